package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTokenFromRequest(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		cookie  string
		name2   string // the cookie's name when not CookieName
		want    string
		wantErr string
	}{
		{name: "bearer header", header: "Bearer abc.def.ghi", want: "abc.def.ghi"},
		{name: "scheme is case-insensitive and spaces around the token are trimmed", header: "  bearer   abc  ", want: "abc"},
		{name: "the login cookie alone is refused: a browser sends it on its own (CSRF)", cookie: "from-cookie", wantErr: "cookie is not accepted here"},
		{name: "the HTTPS login cookie (__Host- prefix) alone is refused too", cookie: "from-cookie", name2: "__Host-" + CookieName, wantErr: "cookie is not accepted here"},
		{name: "the header is read and the cookie ignored", header: "Bearer from-header", cookie: "from-cookie", want: "from-header"},
		{name: "Basic credentials are refused, not read as a token", header: "Basic dXNlcjpwdw==", wantErr: "malformed Authorization header"},
		{name: "a bare token without a scheme is refused", header: "abc.def.ghi", wantErr: "malformed Authorization header"},
		{name: "Bearer with no token is refused", header: "Bearer   ", wantErr: "malformed Authorization header"},
		{name: "a malformed header is refused even with a good cookie", header: "Token abc", cookie: "from-cookie", wantErr: "malformed"},
		{name: "nothing at all", wantErr: "no bearer token"},
		{name: "an empty cookie is no token", cookie: "", wantErr: "no bearer token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if tc.cookie != "" {
				name := CookieName
				if tc.name2 != "" {
					name = tc.name2
				}
				r.AddCookie(&http.Cookie{Name: name, Value: tc.cookie})
			}
			got, err := TokenFromRequest(r)
			if tc.wantErr != "" {
				var ae *Error
				if err == nil || !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("TokenFromRequest() = %q, %v; want an *Error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("TokenFromRequest() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestClaimHas(t *testing.T) {
	tests := []struct {
		name  string
		claim any
		want  string
		is    bool
	}{
		{"string claim equal", "admin", "admin", true},
		{"string claim different", "admins", "admin", false},
		{"list claim containing the value", []any{"staff", "nogoo9-admins"}, "nogoo9-admins", true},
		{"list claim without the value", []any{"staff", "dev"}, "nogoo9-admins", false},
		{"list claim with non-string members is matched on its strings", []any{1.0, true, "nogoo9-admins"}, "nogoo9-admins", true},
		{"a list member only containing the value as a substring does not match", []any{"not-nogoo9-admins"}, "nogoo9-admins", false},
		{"boolean claim true matches the value true", true, "true", true},
		{"boolean claim false does not match true", false, "true", false},
		{"a number never matches", 1.0, "1", false},
		{"a missing claim never matches", nil, "admin", false},
		{"an object claim never matches", map[string]any{"admin": true}, "admin", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := claimHas(tc.claim, tc.want); got != tc.is {
				t.Errorf("claimHas(%#v, %q) = %v, want %v", tc.claim, tc.want, got, tc.is)
			}
		})
	}
}

func TestStringList(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want []string
	}{
		{"a single string is a one-element list", "staff", []string{"staff"}},
		{"a list keeps its strings in order", []any{"a", 2.0, "b"}, []string{"a", "b"}},
		{"anything else is no list", 3.0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stringList(tc.v); strings.Join(got, ",") != strings.Join(tc.want, ",") || (got == nil) != (tc.want == nil) {
				t.Errorf("stringList(%#v) = %#v, want %#v", tc.v, got, tc.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	oidc := func(f func(*Options)) Options {
		o := Options{Mode: "oidc", OIDC: OIDCConfig{IssuerURL: "https://login.example.com", ClientID: "nogoo9", SubjectClaim: "sub"}}
		f(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" when valid
	}{
		{"oidc with issuer and client id", oidc(func(*Options) {}), ""},
		{"oidc with an admin claim and value", oidc(func(o *Options) { o.OIDC.AdminClaim, o.OIDC.AdminValue = "groups", "admins" }), ""},
		{"oidc without --oidc-issuer-url", oidc(func(o *Options) { o.OIDC.IssuerURL = "" }), "--oidc-issuer-url is empty"},
		{"oidc with an issuer that is not a URL", oidc(func(o *Options) { o.OIDC.IssuerURL = "login.example.com" }), `--oidc-issuer-url="login.example.com" is not an http(s) URL`},
		{"oidc without --oidc-client-id", oidc(func(o *Options) { o.OIDC.ClientID = "" }), "--oidc-client-id is empty"},
		{"oidc admin claim without a value", oidc(func(o *Options) { o.OIDC.AdminClaim = "groups" }), "--oidc-admin-claim=groups needs --oidc-admin-value"},
		{"oidc admin value without a claim", oidc(func(o *Options) { o.OIDC.AdminValue = "admins" }), "--oidc-admin-value=admins needs --oidc-admin-claim"},
		{"oidc with --admin-group, which only kubernetes mode reads", oidc(func(o *Options) { o.Kube.AdminGroup = "admins" }), "--admin-group=admins only applies with --auth=kubernetes"},
		{"kubernetes needs nothing else", Options{Mode: "kubernetes"}, ""},
		{"kubernetes with an admin group", Options{Mode: "kubernetes", Kube: KubernetesConfig{AdminGroup: "admins"}}, ""},
		{"kubernetes with oidc admin flags, which it would ignore", Options{Mode: "kubernetes", OIDC: OIDCConfig{AdminClaim: "groups", AdminValue: "a"}}, "only apply with --auth=oidc"},
		{"an unknown mode", Options{Mode: "ldap"}, `--auth="ldap" is not a mode`},
		{"an empty mode", Options{}, "--auth is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	t.Run("New refuses an invalid configuration before any network call", func(t *testing.T) {
		o := oidc(func(o *Options) { o.OIDC.IssuerURL = "" })
		if _, err := o.New(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "--oidc-issuer-url is empty") {
			t.Errorf("New() = %v", err)
		}
	})
}

func TestCallerContext(t *testing.T) {
	if c, ok := CallerFrom(context.Background()); ok || c != nil {
		t.Errorf("CallerFrom(empty) = %v, %v", c, ok)
	}
	if _, ok := CallerFrom(WithCaller(context.Background(), nil)); ok {
		t.Errorf("a nil Caller in the context counts as a caller")
	}
	want := &Caller{Subject: "alice", IsAdmin: true}
	if got, ok := CallerFrom(WithCaller(context.Background(), want)); !ok || got != want {
		t.Errorf("CallerFrom = %v, %v", got, ok)
	}
}

func TestMiddlewareRefusesWithoutCallingNext(t *testing.T) {
	tests := []struct {
		name       string
		header     string
		wantStatus int
		wantSub    string
	}{
		{"no token: 401 with the reason", "", http.StatusUnauthorized, ""},
		{"a token the verifier refuses: 401", "Bearer bad", http.StatusUnauthorized, ""},
		{"a good token: the caller reaches the handler", "Bearer good", http.StatusOK, "alice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var seen string
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, _ := CallerFrom(r.Context())
				seen = c.Subject
			})
			r := httptest.NewRequest(http.MethodGet, "/api/v1/whoami", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			Middleware(stubAuth{}, func(*http.Request) string { return "https://nogoo9.example/.well-known/oauth-protected-resource/mcp" }, next).ServeHTTP(rec, r)
			if rec.Code != tc.wantStatus || seen != tc.wantSub {
				t.Errorf("status %d, handler saw %q; want %d, %q (body %s)", rec.Code, seen, tc.wantStatus, tc.wantSub, rec.Body)
			}
			if rec.Code == http.StatusUnauthorized && (!strings.Contains(rec.Body.String(), "Unauthorized: ") ||
				!strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), `Bearer resource_metadata="https://nogoo9.example/.well-known/oauth-protected-resource/mcp"`)) {
				t.Errorf("401 without a reason or WWW-Authenticate with resource_metadata: %s %q", rec.Body, rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}

// stubAuth accepts the token "good" as alice.
type stubAuth struct{}

func (s stubAuth) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, s.VerifyToken)
}
func (stubAuth) VerifyToken(_ context.Context, token string) (*Caller, error) {
	if token == "good" {
		return &Caller{Subject: "alice"}, nil
	}
	return nil, &Error{Reason: "token rejected"}
}
