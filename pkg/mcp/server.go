package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
)

// MaxBodyBytes bounds a JSON-RPC request body.
const MaxBodyBytes = 1 << 20

// callerExtra is the TokenInfo.Extra key that carries the *auth.Caller through the SDK.
const callerExtra = "nogoo9.caller"

// requestExtra is the TokenInfo.Extra key that carries the context of the HTTP request a
// message came in through the SDK, which runs each call detached from it: a follow of
// get_workspace_events ends with the request that carries it (requestContext), which ends too
// when its session is closed (sessionLimiter).
const requestExtra = "nogoo9.request"

// Options configure the MCP handler.
type Options struct {
	// Version is reported to clients as the server version.
	Version string
	// ResourceMetadataURL, when set, names the RFC 9728 protected-resource metadata of a request
	// in WWW-Authenticate when the SDK refuses a token (an expiry reached mid-request).
	ResourceMetadataURL func(*http.Request) string
	// MaxSessionsPerUser bounds one subject's open sessions; opening one more closes the
	// subject's least recently used session (DefaultMaxSessionsPerUser when 0).
	MaxSessionsPerUser int
	// NoFastList hands list_workspaces calls to the SDK too (fastList); tests compare the two.
	NoFastList bool
	// FollowHeartbeat is how long a follow of get_workspace_events with a progress token waits
	// without news before it sends a heartbeat (DefaultFollowHeartbeat when 0).
	FollowHeartbeat time.Duration
}

// NewServer returns the MCP server with every nogoo9 tool registered.
func NewServer(svc *frontend.Service, version string) *mcp.Server {
	return newServer(svc, version, DefaultFollowHeartbeat)
}

func newServer(svc *frontend.Service, version string, heartbeat time.Duration) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "nogoo9", Version: version}, &mcp.ServerOptions{
		Instructions: "nogoo9 manages development workspaces (one pod each). Call list_templates, then " +
			"spawn_workspace; calls return at once and the workspace becomes Ready in the background: poll " +
			"get_workspace or follow get_workspace_events. Open workspacePath through the nogoo9 proxy.",
	})
	s.AddReceivingMiddleware(callerFromTokenInfo)
	addTools(s, svc, heartbeat)
	return s
}

// callerFromTokenInfo puts the Caller the bearer-token middleware verified into the context of
// every request the SDK dispatches (tool calls included).
func callerFromTokenInfo(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil {
			if c, ok := ex.TokenInfo.Extra[callerExtra].(*auth.Caller); ok {
				ctx = auth.WithCaller(ctx, c)
			}
		}
		return next(ctx, method, req)
	}
}

// NewHandler returns the /mcp HTTP handler: the Streamable HTTP transport for a caller that
// auth.Middleware has authenticated (the Caller is in the request's context). The caller becomes
// the SDK's TokenInfo, which ties each MCP session to its subject: another user's token cannot
// use it.
//
// A POST whose body is a JSON-RPC batch is refused before the SDK reads it (refuseBatches).
func NewHandler(svc *frontend.Service, o Options) http.Handler {
	if o.FollowHeartbeat <= 0 {
		o.FollowHeartbeat = DefaultFollowHeartbeat
	}
	server := newServer(svc, o.Version, o.FollowHeartbeat)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: MaxBodyBytes,
		// Idle sessions (agents that went away without DELETE) are dropped.
		SessionTimeout: sessionIdle,
		// The front end checks Host and Origin itself, against its own allowed hosts
		// (api.NewHandler): the SDK's check only knows localhost.
		DisableLocalhostProtection: true,
	})
	verify := func(_ context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
		c, ok := auth.CallerFrom(r.Context())
		if !ok {
			return nil, fmt.Errorf("%w: no authenticated caller", sdkauth.ErrInvalidToken)
		}
		return &sdkauth.TokenInfo{UserID: c.Subject, Expiration: c.Expiry, Extra: map[string]any{callerExtra: c, requestExtra: r.Context()}}, nil
	}
	l := limitSessions(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts := &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true} // TokenReview does not say when a token expires.
		if o.ResourceMetadataURL != nil {
			opts.ResourceMetadataURL = o.ResourceMetadataURL(r)
		}
		sdkauth.RequireBearerToken(verify, opts)(h).ServeHTTP(w, r)
	}), o.MaxSessionsPerUser, sessionIdle)
	server.AddReceivingMiddleware(l.initialized)
	if !o.NoFastList {
		l.fast = fastList{svc}.serve
	}
	return refuseBatches(l)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
