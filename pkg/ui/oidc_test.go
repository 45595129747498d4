package ui

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/hack/oidcprovider"
	"github.com/nogoo9/no-crd/pkg/auth"
)

// TestOIDCLoginAgainstARealProvider runs the authorization-code flow with PKCE against a real
// OpenID Provider (zitadel/oidc's op package, hack/oidcprovider): its login form, its code, its
// signed ID token with a groups claim that the API's own authenticator reads.
func TestOIDCLoginAgainstARealProvider(t *testing.T) {
	var handler atomic.Pointer[http.Handler]
	ui := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	defer ui.Close()
	provider, err := oidcprovider.Start(oidcprovider.Config{
		ClientID: "nogoo9", RedirectURIs: []string{ui.URL + "/login/callback"},
		Users: []oidcprovider.User{
			{ID: "u-ada", Username: "ada", Password: "ada-pw", Groups: []string{"staff", "nogoo9-admins"}},
			{ID: "u-bob", Username: "bob", Password: "bob-pw", Groups: []string{"staff"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer provider.Close()
	ctx := context.Background()
	authn, err := auth.NewOIDC(ctx, auth.OIDCConfig{IssuerURL: provider.Issuer, ClientID: "nogoo9", AdminClaim: "groups", AdminValue: "nogoo9-admins"})
	if err != nil {
		t.Fatal(err)
	}
	login, err := NewOIDCLogin(ctx, OIDCConfig{IssuerURL: provider.Issuer, ClientID: "nogoo9", RedirectURL: ui.URL + "/login/callback", Scopes: []string{"profile", "groups"}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Options{InsecureCookie: true, Auth: authn, OIDC: login})
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Serve the fixture's UI under the URL the provider knows.
		r2 := r.Clone(r.Context())
		u, _ := url.Parse(f.srv.URL + r.URL.RequestURI())
		r2.URL, r2.Host, r2.RequestURI = u, u.Host, ""
		resp, err := http.DefaultTransport.RoundTrip(r2)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	handler.Store(&h)

	idRe := regexp.MustCompile(`name="id" value="([^"]+)"`)
	// logIn logs user in through the provider's form; meanwhile, when not nil, runs while the
	// login is in progress (after the start, before the provider's redirect back).
	logIn := func(user, password string, meanwhile func()) (*http.Client, string) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
		resp, err := c.Get(ui.URL + "/login/oidc?next=/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := idRe.FindSubmatch(page)
		if m == nil || !strings.HasPrefix(resp.Request.URL.String(), provider.Issuer) {
			t.Fatalf("not at the provider's login form (%s):\n%s", resp.Request.URL, page)
		}
		if q := resp.Request.URL.Query(); q.Get("authRequestID") == "" {
			t.Fatalf("login form without an auth request: %s", resp.Request.URL)
		}
		if meanwhile != nil {
			meanwhile()
		}
		req, _ := http.NewRequest("POST", provider.Issuer+"/login/username", strings.NewReader(url.Values{"id": {string(m[1])}, "username": {user}, "password": {password}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/login/callback" {
			t.Fatalf("after the provider's login: %s at %s\n%s", resp.Status, resp.Request.URL, body)
		}
		resp, err = c.Get(ui.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		home, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return c, string(home)
	}

	_, home := logIn("ada", "ada-pw", nil)
	if !strings.Contains(home, "u-ada") || !strings.Contains(home, `class="badge admin"`) || !strings.Contains(home, `href="/?all=1"`) {
		t.Errorf("ada (group nogoo9-admins) is not logged in as an admin:\n%s", home)
	}
	_, home = logIn("bob", "bob-pw", nil)
	if !strings.Contains(home, "u-bob") || strings.Contains(home, `class="badge admin"`) {
		t.Errorf("bob is not logged in as a plain user:\n%s", home)
	}

	// Logins in progress used to be held in a map of at most 10,000 on the server: anyone could
	// fill it with anonymous starts, each then evicting a login in progress at random (bob's
	// survived 60,000 such starts with a chance under 1%). Now the browser holds its own, sealed.
	t.Run("a flood of anonymous starts does not end another person's login in progress", func(t *testing.T) {
		flood := func() {
			h := f.srv.Config.Handler
			for i := range 60000 {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/login/oidc?next=/", nil))
				if w.Code != http.StatusFound {
					t.Fatalf("anonymous start %d: %d, want 302 to the provider", i, w.Code)
				}
			}
		}
		if _, home := logIn("bob", "bob-pw", flood); !strings.Contains(home, "u-bob") {
			t.Errorf("bob's login did not survive a flood of anonymous starts:\n%s", home)
		}
	})
	t.Run("a login cookie from another login, tampered with or past its deadline is refused", func(t *testing.T) {
		now := time.Now()
		p := pendingLogin{State: "s1", Verifier: "v", Nonce: "n", Next: "/", Expires: now.Add(time.Minute).Unix()}
		sealed := login.sealLogin(p)
		if got, ok := login.openLogin(sealed, "s1", now); !ok || got != p {
			t.Fatalf("openLogin(its own cookie) = %+v, %v", got, ok)
		}
		raw, _ := base64.RawURLEncoding.DecodeString(sealed)
		raw[len(raw)-1] ^= 1
		other, _ := NewOIDCLogin(ctx, OIDCConfig{IssuerURL: provider.Issuer, ClientID: "nogoo9", RedirectURL: ui.URL + "/login/callback"})
		for name, tc := range map[string]struct {
			cookie, state string
			at            time.Time
		}{
			"another state":                  {sealed, "s2", now},
			"no state":                       {sealed, "", now},
			"a tampered cookie":              {base64.RawURLEncoding.EncodeToString(raw), "s1", now},
			"past its deadline":              {sealed, "s1", now.Add(2 * time.Minute)},
			"sealed by another nogoo9":       {other.sealLogin(p), "s1", now},
			"not base64":                     {"%%%", "s1", now},
			"larger than any login it seals": {strings.Repeat("A", maxLoginCookie+1), "s1", now},
		} {
			if _, ok := login.openLogin(tc.cookie, tc.state, tc.at); ok {
				t.Errorf("%s: opened", name)
			}
		}
	})
	t.Run("a callback with a state this browser did not start is refused", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
		resp, err := c.Get(ui.URL + "/login/callback?code=x&state=forged")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s, want 403", resp.Status)
		}
	})
	t.Run("a callback's error shows a code of the specifications, never the link's words", func(t *testing.T) {
		c := &http.Client{Timeout: 30 * time.Second}
		for _, tc := range []struct{ e, want string }{
			{"access_denied", "(access_denied)"},
			{"nogoo9 has moved: log in at https://nogoo9-corp.example", "(an error)"},
		} {
			resp, err := c.Get(ui.URL + "/login/callback?state=x&error=" + url.QueryEscape(tc.e) + "&error_description=" + url.QueryEscape(tc.e))
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(page), tc.want) || strings.Contains(string(page), "nogoo9-corp.example") {
				t.Errorf("error=%q: %s, want 401 saying %q and nothing of the link's words:\n%s", tc.e, resp.Status, tc.want, page)
			}
		}
	})
}
