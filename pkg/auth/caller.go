package auth

import (
	"context"
	"time"
)

// Caller is an authenticated identity.
type Caller struct {
	// Subject is the raw subject (OIDC subject claim, or the Kubernetes user name). Workspace
	// ownership compares it with the nogoo9/owner annotation.
	Subject string
	// Groups the caller belongs to, as the token or TokenReview reported them.
	Groups []string
	// IsAdmin callers may act on every user's workspaces.
	IsAdmin bool
	// Expiry is when the token stops being valid; zero when unknown (TokenReview of a token that
	// is not a JWT).
	Expiry time.Time
}

type callerKey struct{}

// WithCaller returns a copy of ctx that carries c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller in ctx, or nil and false when there is none.
func CallerFrom(ctx context.Context) (*Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*Caller)
	return c, ok && c != nil
}
