// Package mcp serves nogoo9's operations as Model Context Protocol tools over the Streamable
// HTTP transport (the official go-sdk), for AI agents. Every tool is a thin shell over
// pkg/frontend; the caller's identity comes from the bearer token (pkg/auth), travels through the
// SDK in the request's TokenInfo and is put back into each tool handler's context.Context.
package mcp
