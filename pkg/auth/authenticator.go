package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// CookieName is the name of the proxy's own login cookie. The REST API and MCP never read it:
// a cookie is a credential the browser sends on its own, so accepting it there would let any
// page a user visits act as that user (cross-site request forgery). The proxy reads it itself
// and calls VerifyToken.
const CookieName = "nogoo9_token"

// Authenticator verifies the credentials of a request.
type Authenticator interface {
	// Authenticate reads the bearer token from the Authorization header (never from a cookie)
	// and verifies it. Errors are *Error.
	Authenticate(r *http.Request) (*Caller, error)
	// VerifyToken verifies a raw bearer token. Errors are *Error.
	VerifyToken(ctx context.Context, token string) (*Caller, error)
}

// Error is an authentication failure: the HTTP answer is 401 (429 when RetryAfter is set),
// Reason is safe to show the caller and to log. Err, when set, is the underlying verifier error
// (logged, not shown).
type Error struct {
	Reason string
	Err    error
	// Transient marks a failure that says nothing about the token (the verifier could not be
	// reached); it is not remembered by the negative cache.
	Transient bool
	// RetryAfter, when set, means the token was not checked at all because too many checks
	// failed recently: the answer is 429 with a Retry-After header.
	RetryAfter time.Duration
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

// errCookieOnly is returned when a request carries only the proxy's login cookie.
var errCookieOnly = &Error{Reason: "no bearer token: the proxy's " + CookieName + " login cookie is not accepted here (only the proxy reads it); send an Authorization: Bearer <token> header"}

// TokenFromRequest returns the bearer token of r's Authorization header. Cookies are never read.
func TokenFromRequest(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		for _, c := range r.Cookies() {
			// The proxy names it __Host-nogoo9_token on HTTPS and nogoo9_token on plain HTTP.
			if (c.Name == CookieName || c.Name == "__Host-"+CookieName) && c.Value != "" {
				return "", errCookieOnly
			}
		}
		return "", ErrNoToken
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", &Error{Reason: "malformed Authorization header: use \"Bearer <token>\""}
	}
	return strings.TrimSpace(token), nil
}

// authenticate is the Authenticate shared by every verifier. The client's address goes into the
// context, where a Guard finds it to rate-limit failed checks per client.
func authenticate(r *http.Request, verify func(context.Context, string) (*Caller, error)) (*Caller, error) {
	token, err := TokenFromRequest(r)
	if err != nil {
		return nil, err
	}
	return verify(WithClient(r.Context(), r), token)
}

type clientKey struct{}

// peer is what WithClient and WithClientAddr put in a context.
type peer struct {
	remote       string
	forwardedFor []string
}

// WithClientAddr returns a copy of ctx that names the client (an http.Request's RemoteAddr)
// whose token is checked next: a Guard limits failed checks per client. The port is dropped, an
// IPv4-mapped IPv6 address counts as its IPv4 address, and an IPv6 address counts as its /64 (one
// host commonly holds a whole /64, and could otherwise send from as many addresses as it likes).
func WithClientAddr(ctx context.Context, remoteAddr string) context.Context {
	return context.WithValue(ctx, clientKey{}, peer{remote: remoteAddr})
}

// ClientKey is the key of a client's failure bucket (an http.Request's RemoteAddr): see
// WithClientAddr. Other limits on a client's failures (the UI's code exchanges) key the same way.
func ClientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// clientFrom is the key of the client ctx names (WithClient, WithClientAddr), behind trusted.
func clientFrom(ctx context.Context, trusted TrustedProxies) string {
	c, _ := ctx.Value(clientKey{}).(peer)
	return ClientKey(trusted.ClientOf(c.remote, c.forwardedFor))
}

// MetadataURL returns the absolute URL of the RFC 9728 protected-resource metadata for a request
// (announced in WWW-Authenticate on every 401); nil announces none.
type MetadataURL func(r *http.Request) string

// Middleware authenticates every request with a; on success the Caller is in the request's
// context, on failure it answers 401 (or 429, see Error.RetryAfter) with a JSON error, a
// WWW-Authenticate header naming metadata's document, and logs the reason.
func Middleware(a Authenticator, metadata MetadataURL, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := a.Authenticate(r)
		if err != nil {
			u := ""
			if metadata != nil {
				u = metadata(r)
			}
			Unauthorized(w, r, err, u)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
	})
}

// Status is the HTTP status that answers a failed authentication, and its Retry-After value
// ("" for none): 401; 429 when the token was not checked because too many checks failed recently
// (RetryAfter); 503 when the verifier (e.g. the Kubernetes API server) could not be reached
// (Transient): nothing is known about the token, so the answer is "try again", not "your token
// is bad".
func Status(err error) (status int, retryAfter string) {
	var ae *Error
	switch {
	case !errors.As(err, &ae):
		return http.StatusUnauthorized, ""
	case ae.RetryAfter > 0:
		return http.StatusTooManyRequests, strconv.Itoa(int(ae.RetryAfter.Round(time.Second)/time.Second) + 1)
	case ae.Transient:
		return http.StatusServiceUnavailable, "5"
	}
	return http.StatusUnauthorized, ""
}

// LoginRefused answers a login form whose token failed to verify: it sets Retry-After where
// Status gives one and returns the status and the sentence the login page shows the person.
func LoginRefused(w http.ResponseWriter, err error) (status int, msg string) {
	status, retry := Status(err)
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	switch status {
	case http.StatusTooManyRequests:
		return status, "Too many tokens were refused recently; wait " + retry + " seconds and try again with a valid token."
	case http.StatusServiceUnavailable:
		return status, "Your token could not be checked right now (the identity service did not answer); try again in a few seconds."
	}
	return status, "That token was not accepted (expired, wrong audience or not signed by the issuer); get a fresh one and try again."
}

// Unauthorized logs why r was refused and answers 401 with {"error": reason} and
// WWW-Authenticate: Bearer resource_metadata="metadataURL" (RFC 9728; omitted when empty). A
// failure with RetryAfter answers 429 with Retry-After instead, and a Transient one (the verifier
// could not be reached) 503 with Retry-After.
func Unauthorized(w http.ResponseWriter, r *http.Request, err error, metadataURL string) {
	reason := "invalid token"
	var ae *Error
	if errors.As(err, &ae) {
		reason = ae.Reason
	}
	ctrl.LoggerFrom(r.Context()).WithName("auth").Info("request refused: authentication failed",
		"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
	status, retry := Status(err)
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	params := []string{`realm="nogoo9"`}
	if metadataURL != "" {
		params = append([]string{fmt.Sprintf("resource_metadata=%q", metadataURL)}, params...)
	}
	if r.Header.Get("Authorization") != "" && status == http.StatusUnauthorized {
		params = append(params, `error="invalid_token"`)
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	prefix := "Unauthorized: "
	switch status {
	case http.StatusTooManyRequests:
		prefix = "Too many requests: "
	case http.StatusServiceUnavailable:
		prefix = "Service unavailable: "
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"error": prefix + reason})
}
