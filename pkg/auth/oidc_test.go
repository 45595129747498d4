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
)

// testIssuer is a real OIDC issuer on httptest: discovery, a JWKS with one RSA key, and tokens
// signed with go-jose. It counts JWKS fetches.
type testIssuer struct {
	srv        *httptest.Server
	key        *rsa.PrivateKey
	jwksFetchs atomic.Int64
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &testIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported":              []string{"id_token"}, "subject_types_supported": []string{"public"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.jwksFetchs.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
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
