// Package api serves nogoo9's REST API under /api/v1 and mounts the MCP endpoint (/mcp) next to
// it on one listener, behind bearer-token authentication (pkg/auth). Handlers decode, call the
// shared operations in pkg/frontend and encode; authorization lives in pkg/frontend.
package api
