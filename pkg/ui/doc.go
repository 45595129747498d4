// Package ui is nogoo9's web UI: server-rendered pages (html/template) served by nogoo9 itself on
// the API listener at /, with every asset embedded in the binary. A small vendored library (htmx
// and its Server-Sent Events extension, see static/vendor/README.md) does partial updates; rows
// and a workspace's events change live over SSE, fed by the pod informer (Hub), never by polling.
//
// Every operation goes through frontend.Service with the session's caller in the context
// (auth.WithCaller), so the UI has no authorization rule of its own: the owner/admin checks, the
// error texts and the quotas are those of the REST API and MCP.
//
// Sessions are server-side (pkg/session): the browser holds a random id in an HttpOnly,
// SameSite=Strict cookie (Secure, with the __Host- prefix, unless InsecureCookie), never a bearer
// token. Every state-changing request passes http.CrossOriginProtection and carries the session's
// CSRF token.
package ui
