// Package auth authenticates callers of nogoo9's front ends (REST, MCP, proxy).
//
// A bearer token (Authorization header, or the nogoo9_token cookie for browsers) is verified
// either as an OIDC ID token with go-oidc (issuer, audience, signature, expiry) or through the
// Kubernetes TokenReview API. The result is a Caller, carried in the request's context.Context to
// every handler; authorization (owner or admin) is decided by the callers of this package.
package auth
