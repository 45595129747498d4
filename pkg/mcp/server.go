package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
)

// MaxBodyBytes bounds a JSON-RPC request body.
const MaxBodyBytes = 1 << 20

// callerExtra is the TokenInfo.Extra key that carries the *auth.Caller through the SDK.
const callerExtra = "nogoo9.caller"

// Options configure the MCP handler.
type Options struct {
	// Version is reported to clients as the server version.
	Version string
	// ResourceMetadataURL, when set, is announced in 401 answers (RFC 9728) so that MCP clients
	// can find the authorization server; AuthorizationServers are listed in that document,
	// served at /.well-known/oauth-protected-resource by ProtectedResourceMetadata.
	ResourceMetadataURL string
}

// NewServer returns the MCP server with every nogoo9 tool registered.
func NewServer(svc *frontend.Service, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "nogoo9", Version: version}, &mcp.ServerOptions{
		Instructions: "nogoo9 manages development workspaces (one pod each). Call list_templates, then " +
			"spawn_workspace; calls return at once and the workspace becomes Ready in the background: poll " +
			"get_workspace or follow get_workspace_events. Open workspacePath through the nogoo9 proxy.",
	})
	s.AddReceivingMiddleware(callerFromTokenInfo)
	addTools(s, svc)
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

// NewHandler returns the /mcp HTTP handler: bearer-token authentication, then the Streamable
// HTTP transport.
func NewHandler(svc *frontend.Service, authn auth.Authenticator, o Options) http.Handler {
	server := NewServer(svc, o.Version)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: MaxBodyBytes,
		// Idle sessions (agents that went away without DELETE) are dropped.
		SessionTimeout: 30 * time.Minute,
		// Behind the nogoo9 Service the Host header is the Service's name, not localhost.
		DisableLocalhostProtection: true,
	})
	verify := func(ctx context.Context, token string, r *http.Request) (*sdkauth.TokenInfo, error) {
		c, err := authn.VerifyToken(ctx, token)
		if err != nil {
			ctrl.LoggerFrom(ctx).WithName("auth").Info("MCP request refused: authentication failed",
				"remote", r.RemoteAddr, "reason", err.Error())
			var ae *auth.Error
			if errors.As(err, &ae) {
				return nil, fmt.Errorf("%w: %s", sdkauth.ErrInvalidToken, ae.Reason)
			}
			return nil, fmt.Errorf("%w", sdkauth.ErrInvalidToken)
		}
		// UserID ties an MCP session to its subject: another user's token cannot use it.
		return &sdkauth.TokenInfo{UserID: c.Subject, Expiration: c.Expiry, Extra: map[string]any{callerExtra: c}}, nil
	}
	return sdkauth.RequireBearerToken(verify, &sdkauth.RequireBearerTokenOptions{
		ResourceMetadataURL:    o.ResourceMetadataURL,
		AllowMissingExpiration: true, // TokenReview does not say when a token expires.
	})(h)
}

// ProtectedResourceMetadata serves the RFC 9728 document for resource (the /mcp URL) naming the
// OIDC issuer as its authorization server.
func ProtectedResourceMetadata(resource, issuer string) http.Handler {
	md := &oauthex.ProtectedResourceMetadata{Resource: resource, BearerMethodsSupported: []string{"header"}}
	if issuer != "" {
		md.AuthorizationServers = []string{issuer}
	}
	return sdkauth.ProtectedResourceMetadataHandler(md)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
