package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// testIssuer is a real OIDC issuer on httptest: discovery, a JWKS with one RSA key, and tokens
// signed with go-jose. It counts JWKS fetches.
type testIssuer struct {
	srv        *httptest.Server
	key        *rsa.PrivateKey
	jwksFetchs atomic.Int64
}

func newTestIssuer(t *testing.T) *testIssuer { return newTestIssuerWith(t, issuerOptions{}) }

// issuerOptions change what a testIssuer serves.
type issuerOptions struct {
	jwksURI   string           // the discovery document's jwks_uri (default: its own /keys)
	padding   int              // bytes of padding added to the discovery document
	discovery http.HandlerFunc // replaces the discovery handler
	keys      http.HandlerFunc // replaces the JWKS handler (still counted)
}

func newTestIssuerWith(t *testing.T, o issuerOptions) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &testIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if o.discovery != nil {
			o.discovery(w, r)
			return
		}
		jwks := o.jwksURI
		if jwks == "" {
			jwks = is.srv.URL + "/keys"
		}
		doc := map[string]any{
			"issuer": is.srv.URL, "jwks_uri": jwks,
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported":              []string{"id_token"}, "subject_types_supported": []string{"public"},
		}
		if o.padding > 0 {
			doc["x_padding"] = strings.Repeat("x", o.padding)
		}
		_ = json.NewEncoder(w).Encode(doc)
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.jwksFetchs.Add(1)
		if o.keys != nil {
			o.keys(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

// token returns a token of the issuer for audience nogoo9, with extra claims.
func (is *testIssuer) token(t *testing.T, extra map[string]any) string {
	c := map[string]any{"iss": is.srv.URL, "aud": "nogoo9", "sub": "u-1", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	return sign(t, is.key, "k1", c)
}

// sign returns a JWT with claims signed by key under kid.
func sign(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unsigned returns an "alg: none" JWT with claims.
func unsigned(claims map[string]any) string {
	enc := base64.RawURLEncoding.EncodeToString
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	p, _ := json.Marshal(claims)
	return enc(h) + "." + enc(p) + "."
}

func TestOIDCVerifiesRealSignedTokens(t *testing.T) {
	is := newTestIssuer(t)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(f func(map[string]any)) map[string]any {
		c := map[string]any{"iss": is.srv.URL, "aud": "nogoo9", "sub": "u-1", "email": "jane@example.com",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if f != nil {
			f(c)
		}
		return c
	}
	tests := []struct {
		name         string
		subjectClaim string
		token        string
		wantSubject  string
		wantReason   string
	}{
		{"a token signed by the issuer, subject from sub", "sub", sign(t, is.key, "k1", claims(nil)), "u-1", ""},
		{"email subject with email_verified true", "email", sign(t, is.key, "k1", claims(func(c map[string]any) { c["email_verified"] = true })), "jane@example.com", ""},
		{"email subject with email_verified \"true\" as a string", "email", sign(t, is.key, "k1", claims(func(c map[string]any) { c["email_verified"] = "true" })), "jane@example.com", ""},
		{"email subject with email_verified false is refused", "email", sign(t, is.key, "k1", claims(func(c map[string]any) { c["email_verified"] = false })), "", "is not verified"},
		{"email subject without email_verified is refused", "email", sign(t, is.key, "k1", claims(nil)), "", "is not verified"},
		{"an expired token is refused and says so", "sub", sign(t, is.key, "k1", claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })), "", "token expired at"},
		{"a token from another issuer is refused and says so", "sub", sign(t, other, "k1", claims(func(c map[string]any) { c["iss"] = "https://other.example" })), "", "not by the issuer this service trusts"},
		{"a token for another audience is refused", "sub", sign(t, is.key, "k1", claims(func(c map[string]any) { c["aud"] = "other" })), "", "client id (audience)"},
		{"a token signed by another key is refused", "sub", sign(t, other, "k1", claims(nil)), "", "signature does not verify"},
		{"an alg none token is refused", "sub", unsigned(claims(nil)), "", "alg none is never accepted"},
		{"garbage is refused", "sub", "not-a-jwt", "", "not a JWT"},
		// Names Kubernetes reserves: nogoo9 asks the API server about its callers by name.
		{"a subject the holder may choose (email) in Kubernetes' reserved system: names is refused", "email", sign(t, is.key, "k1", claims(func(c map[string]any) {
			c["email"], c["email_verified"] = "system:kube-controller-manager", true
		})), "", `token's email "system:kube-controller-manager" begins with "system:"`},
		{"the issuer's own sub in system: names (the API server's service-account tokens) is kept", "sub", sign(t, is.key, "k1", claims(func(c map[string]any) { c["sub"] = "system:serviceaccount:team:alice" })), "system:serviceaccount:team:alice", ""},
		{"a group in Kubernetes' reserved system: names is refused", "sub", sign(t, is.key, "k1", claims(func(c map[string]any) { c["groups"] = []string{"staff", "system:masters"} })), "", `group "system:masters" begins with "system:"`},
		{"ordinary groups are kept", "sub", sign(t, is.key, "k1", claims(func(c map[string]any) { c["groups"] = []string{"staff", "systems-team"} })), "u-1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9", SubjectClaim: tc.subjectClaim})
			if err != nil {
				t.Fatal(err)
			}
			c, err := o.VerifyToken(context.Background(), tc.token)
			if tc.wantReason != "" {
				ae, ok := err.(*Error)
				if !ok || !strings.Contains(ae.Reason, tc.wantReason) {
					t.Fatalf("VerifyToken = %v, %v; want an *Error whose reason contains %q", c, err, tc.wantReason)
				}
				return
			}
			if err != nil || c.Subject != tc.wantSubject {
				t.Fatalf("VerifyToken = %v, %v; want subject %q", c, err, tc.wantSubject)
			}
		})
	}
}

// Forged tokens with the issuer's name and an unknown key id make go-oidc refetch the JWKS on
// every check; behind the Guard a flood of them costs a bounded number of fetches.
func TestGuardedOIDCBoundsJWKSRefetches(t *testing.T) {
	is := newTestIssuer(t)
	o, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"})
	if err != nil {
		t.Fatal(err)
	}
	forger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// A still clock: the buckets do not refill while the (slow) RSA signing runs.
	g := NewGuard(o, GuardOptions{Now: (&fakeClock{t: time.Now()}).now})
	const n = 300
	for i := range n {
		tok := sign(t, forger, fmt.Sprintf("unknown-%d", i), map[string]any{"iss": is.srv.URL, "aud": "nogoo9", "sub": "x", "exp": time.Now().Add(time.Hour).Unix()})
		_, _ = verifyFrom(g, "10.1.0.1", tok)
	}
	if got := is.jwksFetchs.Load(); got > 11 {
		t.Errorf("%d forged tokens caused %d JWKS fetches, want at most 11 (the client's burst of 10, plus the first)", n, got)
	}
	// The issuer's own tokens still work for other clients.
	good := sign(t, is.key, "k1", map[string]any{"iss": is.srv.URL, "aud": "nogoo9", "sub": "ok", "exp": time.Now().Add(time.Hour).Unix()})
	if c, err := verifyFrom(g, "10.1.0.2", good); err != nil || c.Subject != "ok" {
		t.Fatalf("a good token after the flood = %v, %v", c, err)
	}
}

// In OIDC mode what a failed check may cost is a JWKS download; a token decided against the keys
// already fetched costs a local signature check. Before only outbound checks were limited,
// garbage, alg-none, expired or wrong-audience tokens emptied an address's bucket just as well,
// and the next new valid token from that address (an ingress's) was answered 429.
func TestGuardedOIDCLimitsOnlyChecksThatFetchKeys(t *testing.T) {
	is := newTestIssuer(t)
	o, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(o, GuardOptions{Now: (&fakeClock{t: time.Now()}).now})
	if _, err := verifyFrom(g, "10.2.0.1", is.token(t, map[string]any{"sub": "first"})); err != nil {
		t.Fatal(err)
	}
	expired := is.token(t, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	for i := range 100 {
		for _, tok := range []string{
			fmt.Sprintf("not-a-jwt-%d", i),
			unsigned(map[string]any{"iss": is.srv.URL, "aud": "nogoo9", "sub": fmt.Sprint(i), "exp": time.Now().Add(time.Hour).Unix()}),
			is.token(t, map[string]any{"aud": fmt.Sprintf("other-%d", i)}),
			expired + strings.Repeat("", i),
		} {
			if _, err := verifyFrom(g, "10.2.0.1", tok); err == nil {
				t.Fatalf("a bad token was accepted: %s", tok)
			} else if ae, ok := err.(*Error); !ok || ae.RetryAfter > 0 {
				t.Fatalf("a token decided locally was refused without a check: %v", err)
			}
		}
	}
	if c, err := verifyFrom(g, "10.2.0.1", is.token(t, map[string]any{"sub": "new-user"})); err != nil || c.Subject != "new-user" {
		t.Fatalf("a new valid token from the same address after 400 locally refused ones = %v, %v", c, err)
	}
	if got := is.jwksFetchs.Load(); got != 1 {
		t.Errorf("the keys were fetched %d times, want once", got)
	}
	// Refusals decided locally come unlimited: they stay out of the negative cache (a full cache
	// scans itself on each insertion).
	g.mu.Lock()
	n := len(g.bad)
	g.mu.Unlock()
	if n != 0 {
		t.Errorf("the negative cache holds %d locally refused tokens, want none", n)
	}
}

// --oidc-admin-claim=email must not make an admin of whoever typed the admin's address into an
// identity provider that does not verify it: email_verified must be true, as for
// --oidc-subject-claim=email.
func TestOIDCAdminByEmailNeedsAVerifiedEmail(t *testing.T) {
	is := newTestIssuer(t)
	o, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9", AdminClaim: "email", AdminValue: "ops@corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		claims   map[string]any
		admin    bool
		wantLogs string
	}{
		{"verified admin address", map[string]any{"email": "ops@corp.example", "email_verified": true}, true, ""},
		{"verified as the string \"true\"", map[string]any{"email": "ops@corp.example", "email_verified": "true"}, true, ""},
		{"unverified admin address", map[string]any{"email": "ops@corp.example", "email_verified": false}, false, "email_verified is not true"},
		{"admin address without email_verified", map[string]any{"email": "ops@corp.example"}, false, "email_verified is not true"},
		{"email_verified \"yes\"", map[string]any{"email": "ops@corp.example", "email_verified": "yes"}, false, "email_verified is not true"},
		{"another verified address", map[string]any{"email": "jane@corp.example", "email_verified": true}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{}))
			c, err := o.VerifyToken(ctx, is.token(t, tc.claims))
			if err != nil {
				t.Fatalf("VerifyToken: %v (the token stays valid; only admin rights are withheld)", err)
			}
			if c.IsAdmin != tc.admin {
				t.Fatalf("IsAdmin = %v, want %v", c.IsAdmin, tc.admin)
			}
			if tc.wantLogs != "" && (!strings.Contains(logs.String(), tc.wantLogs) || !strings.Contains(logs.String(), "ops@corp.example")) {
				t.Fatalf("logs %q do not say why admin rights were withheld (want %q and the address)", logs.String(), tc.wantLogs)
			}
		})
	}
}

// Plain http lets anyone on the path serve signing keys: only loopback issuers may use it.
func TestOIDCIssuerMustUseHTTPSUnlessLoopback(t *testing.T) {
	for issuer, wantErr := range map[string]string{
		"https://login.example.com/realms/dev": "",
		"http://127.0.0.1:5556":                "",
		"http://127.8.9.10/dex":                "",
		"http://localhost:8080":                "",
		"http://LOCALHOST":                     "",
		"http://[::1]:5556":                    "",
		"http://login.example.com":             `--oidc-issuer-url="http://login.example.com" uses plain http`,
		"http://10.0.0.5:5556":                 `--oidc-issuer-url="http://10.0.0.5:5556" uses plain http`,
		"http://localhost.example.com":         "uses plain http",
		"http://[::ffff:127.0.0.1]":            "",
		"ftp://login.example.com":              "is not an http(s) URL",
	} {
		cfg := OIDCConfig{IssuerURL: issuer, ClientID: "nogoo9"}
		err := cfg.validate()
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("validate(%q) = %v, want no error", issuer, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("validate(%q) = %v, want an error containing %q", issuer, err, wantErr)
		case wantErr != "" && strings.Contains(wantErr, "plain http") && !strings.Contains(err.Error(), "https"):
			t.Errorf("validate(%q) = %v: does not say to use https", issuer, err)
		}
	}
	// The keys' location comes from the discovery document: it must not be plain http either.
	is := newTestIssuerWith(t, issuerOptions{jwksURI: "http://keys.example.com/keys"})
	if _, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"}); err == nil || !strings.Contains(err.Error(), `jwks_uri "http://keys.example.com/keys"`) {
		t.Fatalf("NewOIDC with a plain-http jwks_uri = %v, want an error naming it", err)
	}
	// Nor may the issuer's answers be redirected there.
	is = newTestIssuerWith(t, issuerOptions{keys: func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://keys.invalid/keys", http.StatusFound)
	}})
	o, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.VerifyToken(context.Background(), is.token(t, nil)); err == nil || !strings.Contains(err.Error(), "to http://keys.invalid/keys, which is not https: refused") {
		t.Fatalf("VerifyToken with keys redirected to plain http = %v, want the redirect refused", err)
	}
}

// The discovery document and the JWKS are read with a 1 MiB cap; an error that carries the
// provider's answer carries at most an excerpt of it (it is logged with every refusal).
func TestOIDCBoundsWhatItReadsFromTheIssuer(t *testing.T) {
	const huge = 2 << 20
	t.Run("an over-long discovery document", func(t *testing.T) {
		is := newTestIssuerWith(t, issuerOptions{padding: huge})
		_, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"})
		if err == nil || !strings.Contains(err.Error(), "longer than 1048576 bytes") || len(err.Error()) > 1024 {
			t.Fatalf("NewOIDC = %.300v (%d bytes), want a short error saying the answer is longer than 1048576 bytes", err, len(fmt.Sprint(err)))
		}
	})
	t.Run("a discovery error page", func(t *testing.T) {
		is := newTestIssuerWith(t, issuerOptions{discovery: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(strings.Repeat("<html>", 100<<10)))
		}})
		_, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"})
		if err == nil || !strings.Contains(err.Error(), "502") || len(err.Error()) > 1024 {
			t.Fatalf("NewOIDC = %.300v (%d bytes), want a short error with the status", err, len(fmt.Sprint(err)))
		}
	})
	for name, keys := range map[string]http.HandlerFunc{
		"an over-long JWKS": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"keys":[],"x":"` + strings.Repeat("x", huge) + `"}`))
		},
		"a JWKS error page": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(strings.Repeat("<html>", 100<<10)))
		},
	} {
		t.Run(name, func(t *testing.T) {
			is := newTestIssuerWith(t, issuerOptions{keys: keys})
			o, err := NewOIDC(context.Background(), OIDCConfig{IssuerURL: is.srv.URL, ClientID: "nogoo9"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = o.VerifyToken(context.Background(), is.token(t, nil))
			ae, ok := err.(*Error)
			if !ok || len(err.Error()) > 1024 {
				t.Fatalf("VerifyToken = %.300v (%d bytes), want a short *Error", err, len(fmt.Sprint(err)))
			}
			// The keys could not be read: nothing is known about the token (503, try again).
			if !ae.Transient || !strings.Contains(ae.Reason, "signing keys") {
				t.Fatalf("VerifyToken = %v, want a transient failure saying the issuer's signing keys could not be fetched", err)
			}
		})
	}
}
