package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
)

// CookieName is the cookie a browser may carry the bearer token in (the proxy sets it).
const CookieName = "nogoo9_token"

// Authenticator verifies the credentials of a request.
type Authenticator interface {
	// Authenticate reads the bearer token from the Authorization header (or the CookieName
	// cookie) and verifies it. Errors are *Error.
	Authenticate(r *http.Request) (*Caller, error)
	// VerifyToken verifies a raw bearer token. Errors are *Error.
	VerifyToken(ctx context.Context, token string) (*Caller, error)
}

// Error is an authentication failure: the HTTP answer is 401, Reason is safe to show the caller
// and to log. Err, when set, is the underlying verifier error (logged, not shown).
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNoToken is returned when a request carries no bearer token at all.
var ErrNoToken = &Error{Reason: "no bearer token: send an Authorization: Bearer <token> header"}

// TokenFromRequest returns the bearer token of r: the Authorization header, else the cookie.
func TokenFromRequest(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return "", &Error{Reason: "malformed Authorization header: use \"Bearer <token>\""}
		}
		return strings.TrimSpace(token), nil
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		return c.Value, nil
	}
	return "", ErrNoToken
}

// authenticate is the Authenticate shared by every verifier.
func authenticate(r *http.Request, verify func(context.Context, string) (*Caller, error)) (*Caller, error) {
	token, err := TokenFromRequest(r)
	if err != nil {
		return nil, err
	}
	return verify(r.Context(), token)
}

// Middleware authenticates every request with a; on success the Caller is in the request's
// context, on failure it answers 401 with a JSON error and logs the reason.
func Middleware(a Authenticator, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := a.Authenticate(r)
		if err != nil {
			Unauthorized(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
	})
}

// Unauthorized logs why r was refused and answers 401 with {"error": reason}.
func Unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	reason := "invalid token"
	var ae *Error
	if errors.As(err, &ae) {
		reason = ae.Reason
	}
	ctrl.LoggerFrom(r.Context()).WithName("auth").Info("request refused: authentication failed",
		"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
	w.Header().Set("WWW-Authenticate", `Bearer realm="nogoo9"`)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("Unauthorized: %s", reason)})
}
