package ui

import (
	"context"
	"crypto/sha256"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// startOP serves a real OpenID Provider (zitadel/oidc's certified op package, as
// hack/oidcprovider does) on loopback over plain http, with opts: here, endpoints that the
// discovery document names elsewhere (op.WithCustomAuthEndpoint, op.WithCustomTokenEndpoint), as
// a provider behind another front may. It returns the issuer URL.
func startOP(t *testing.T, opts ...op.Option) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	provider, err := op.NewProvider(&op.Config{CryptoKey: sha256.Sum256([]byte(issuer)), CodeMethodS256: true},
		storage.NewStorage(storage.NewUserStore(issuer)), op.StaticIssuer(issuer), append([]op.Option{op.WithAllowInsecure()}, opts...)...)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: provider, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return issuer
}

// The single sign-on sends the browser to the provider's authorization endpoint with the login's
// state and PKCE challenge, and sends the code and verifier to its token endpoint, which answers
// with the ID token. Over plain http anyone on the network path reads the code and the verifier
// and can redeem them, or answers the token request with tokens of their own. Only the issuer
// URL (checked with the API's --oidc-issuer-url) and the keys' URL (jwks_uri) were held to https
// (or http on loopback); the endpoints the discovery document names were taken as they came.
func TestOIDCLoginRefusesPlainHTTPEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name, field, value string
		opt                op.Option
	}{
		{"an authorization endpoint", "authorization_endpoint", "http://idp.example.com/authorize", op.WithCustomAuthEndpoint(op.NewEndpointWithURL("/authorize", "http://idp.example.com/authorize"))},
		{"a token endpoint", "token_endpoint", "http://idp.example.com/oauth/token", op.WithCustomTokenEndpoint(op.NewEndpointWithURL("/oauth/token", "http://idp.example.com/oauth/token"))},
	} {
		t.Run(tc.name+" on plain http off loopback", func(t *testing.T) {
			issuer := startOP(t, tc.opt)
			login, err := NewOIDCLogin(context.Background(), OIDCConfig{IssuerURL: issuer, ClientID: "web", RedirectURL: "https://nogoo9.example.com/login/callback"})
			if err == nil {
				t.Fatalf("NewOIDCLogin accepted a provider whose %s is %s (the login would send the browser to %s)", tc.field, tc.value, login.oauth.Endpoint.AuthURL)
			}
			for _, want := range []string{tc.field, tc.value, "https"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %q: %v", want, err)
				}
			}
		})
	}
	t.Run("endpoints on plain http on loopback (a provider for development)", func(t *testing.T) {
		issuer := startOP(t)
		if _, err := NewOIDCLogin(context.Background(), OIDCConfig{IssuerURL: issuer, ClientID: "web", RedirectURL: "http://127.0.0.1/login/callback"}); err != nil {
			t.Fatalf("a provider on loopback: %v", err)
		}
	})
}

// logSink collects what a handler logs through the logger in its request's context.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) handler(h http.Handler) http.Handler {
	log := funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, prefix+" "+args)
	}, funcr.Options{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(logr.NewContext(r.Context(), log)))
	})
}

func (s *logSink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.lines
	s.lines = nil
	return out
}

// The callback logs why a single sign-on was refused. Two of its reasons were text from others,
// whole: the provider's error and error_description from the callback's URL (anyone's to write:
// a link with a megabyte of text, or lines that read as log entries of their own), and the token
// endpoint's refusal, whose body oauth2 quotes in its error (up to the issuer client's 1 MiB).
// Now each is cut to 512 bytes like the authenticator's errors, and an error code is logged
// only when it is one OAuth or OpenID Connect defines.
func TestOIDCCallbackLogsABoundedReason(t *testing.T) {
	huge := strings.Repeat("A", 200<<10)
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"` + huge + `"}`))
	}))
	defer token.Close()
	issuer := startOP(t, op.WithCustomTokenEndpoint(op.NewEndpointWithURL("/oauth/token", token.URL+"/oauth/token")))
	login, err := NewOIDCLogin(context.Background(), OIDCConfig{IssuerURL: issuer, ClientID: "web", RedirectURL: "http://127.0.0.1/login/callback"})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Options{InsecureCookie: true, OIDC: login})
	var logs logSink
	h := logs.handler(f.ui.Handler())
	const maxReason = 512 + 100 // the cut text, the words around it and its length
	check := func(t *testing.T, what string, forbidden ...string) {
		t.Helper()
		lines := logs.take()
		var refused []string
		for _, l := range lines {
			if strings.Contains(l, "single sign-on refused") {
				refused = append(refused, l)
			}
		}
		if len(refused) != 1 {
			t.Fatalf("%s: logged %d refusals, want 1: %.2000q", what, len(refused), lines)
		}
		if len(refused[0]) > maxReason+200 {
			t.Errorf("%s: the refusal's log line is %d bytes, want at most about %d: %.1000q...", what, len(refused[0]), maxReason+200, refused[0])
		}
		for _, s := range forbidden {
			if strings.Contains(refused[0], s) {
				t.Errorf("%s: the log line repeats %q: %.1000q", what, s, refused[0])
			}
		}
	}

	t.Run("the provider's error in the callback's URL", func(t *testing.T) {
		w := httptest.NewRecorder()
		q := url.Values{"error": {"forged\nlevel=error msg=\"admin logged in\"" + strings.Repeat("B", 2000)}, "error_description": {huge}}
		h.ServeHTTP(w, httptest.NewRequest("GET", "/login/callback?"+q.Encode(), nil))
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("callback with error=: %d, want 401", w.Code)
		}
		check(t, "an error code OAuth does not define", "forged", "admin logged in")
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/login/callback?"+url.Values{"error": {"access_denied"}, "error_description": {huge}}.Encode(), nil))
		lines := strings.Join(logs.lines, "\n")
		if !strings.Contains(lines, "access_denied") {
			t.Errorf("a code OAuth defines (access_denied) is not logged: %.1000q", lines)
		}
		check(t, "access_denied with a long description")
	})

	t.Run("the token endpoint's refusal", func(t *testing.T) {
		cookie, state := anonymousStart(t, h, "192.0.2.1:1234")
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/login/callback?"+url.Values{"state": {state}, "code": {"bad"}}.Encode(), nil)
		r.AddCookie(cookie)
		h.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("callback with a code the token endpoint refuses: %d, want 401", w.Code)
		}
		check(t, "the token endpoint's 200 KiB refusal")
	})
}
