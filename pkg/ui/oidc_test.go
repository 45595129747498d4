package ui

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

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
	// login is in progress (after the start, before the provider's redirect back), with the
	// browser's client (its cookies).
	logIn := func(user, password string, meanwhile func(*http.Client)) (*http.Client, string) {
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
			meanwhile(c)
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
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("the callback's answer that starts the session: Cache-Control %q, want no-store", cc)
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
		flood := func(*http.Client) {
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
	// The login form's CSRF token and the sealed single sign-on login used to share one cookie:
	// opening /login in another tab (or the same one, going back) while the provider's login form
	// was open replaced the sealed login, and the callback then refused the login ("not started
	// in this browser"). Each has its own cookie now.
	t.Run("opening the login page while a single sign-on is in progress does not break it", func(t *testing.T) {
		meanwhile := func(c *http.Client) {
			resp, err := c.Get(ui.URL + "/login")
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !loginCSRFRe.Match(page) {
				t.Fatalf("GET /login is not the login form:\n%s", page)
			}
		}
		if _, home := logIn("bob", "bob-pw", meanwhile); !strings.Contains(home, "u-bob") {
			t.Errorf("bob's login did not survive opening the login page meanwhile:\n%s", home)
		}
	})
	// Every answer of the callback is the end of one person's login (a session's cookie, or a
	// refusal with a fresh login form): none may be stored by a cache and served again.
	t.Run("the callback's answers are not stored", func(t *testing.T) {
		h := f.srv.Config.Handler
		cookie, state := anonymousStart(t, h, "192.0.2.7:1")
		for name, q := range map[string]string{
			"the provider's error": "?state=x&error=access_denied",
			"no login cookie":      "?state=" + url.QueryEscape(state) + "&code=x",
			"another state":        "?state=forged&code=x",
			"a bad code":           "?state=" + url.QueryEscape(state) + "&code=x",
		} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/login/callback"+q, nil)
			r.RemoteAddr = "192.0.2.7:1"
			if name != "no login cookie" {
				r.AddCookie(cookie)
			}
			h.ServeHTTP(w, r)
			if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
				t.Errorf("%s: %d with Cache-Control %q, want no-store", name, w.Code, cc)
			}
		}
	})
	// The callback used to exchange any code it was handed, for as long as its pending login
	// lived (10 minutes), two token-endpoint calls a time (oauth2 tries both ways of sending the
	// client's credentials when it is not told which): one anonymous start, then a loop of
	// callbacks with a bad code, spent the provider's per-client rate limit and so broke single
	// sign-on for everyone.
	tokenCalls := countTokenCalls(t, login)
	t.Run("a flood of callbacks with a bad code makes a bounded number of token-endpoint calls", func(t *testing.T) {
		// The limits' clock stands still unless the test moves it: the bounds hold on a slow machine.
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		login.gate = newExchangeGate(func() time.Time { return time.Unix(0, clock.Load()) })
		// Its buckets are then ahead of the real clock: the subtests after this one get fresh ones.
		defer func() { login.gate = newExchangeGate(time.Now) }()
		h := f.srv.Config.Handler
		cookie, state := anonymousStart(t, h, "192.0.2.1:1234")
		before := tokenCalls.Load()
		const n = 100
		var refused, limited atomic.Int64
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for range n / 10 {
					w := httptest.NewRecorder()
					r := httptest.NewRequest("GET", "/login/callback?state="+url.QueryEscape(state)+"&code=x", nil)
					r.RemoteAddr = "192.0.2.1:1234"
					r.AddCookie(cookie)
					h.ServeHTTP(w, r)
					switch w.Code {
					case http.StatusUnauthorized:
						refused.Add(1)
					case http.StatusTooManyRequests:
						if w.Header().Get("Retry-After") == "" {
							t.Errorf("429 without Retry-After")
						}
						limited.Add(1)
					default:
						t.Errorf("callback with a bad code: %d, want 401 or 429", w.Code)
					}
				}
			})
		}
		wg.Wait()
		calls := tokenCalls.Load() - before
		t.Logf("%d callbacks from one address: %d exchanges refused by the provider, %d answered 429 without one; %d token-endpoint calls", n, refused.Load(), limited.Load(), calls)
		if calls > exchangeClientBurst {
			t.Errorf("%d callbacks with a bad code from one address made %d token-endpoint calls, want at most %d", n, calls, exchangeClientBurst)
		}
		if calls != refused.Load() {
			t.Errorf("%d exchanges made %d token-endpoint calls, want one each", refused.Load(), calls)
		}
		if _, home := logIn("bob", "bob-pw", nil); !strings.Contains(home, "u-bob") {
			t.Errorf("bob's login did not work after the flood:\n%s", home)
		}

		// From many addresses, the global limit bounds them.
		before = tokenCalls.Load()
		for i := range 60 {
			for range 2 {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/login/callback?state="+url.QueryEscape(state)+"&code=x", nil)
				r.RemoteAddr = fmt.Sprintf("198.51.100.%d:4321", i+1)
				r.AddCookie(cookie)
				h.ServeHTTP(w, r)
				if w.Code != http.StatusUnauthorized && w.Code != http.StatusTooManyRequests {
					t.Errorf("callback with a bad code: %d, want 401 or 429", w.Code)
				}
			}
		}
		calls = tokenCalls.Load() - before
		t.Logf("120 callbacks from 60 addresses: %d token-endpoint calls", calls)
		if calls > exchangeBurst {
			t.Errorf("120 callbacks with a bad code from 60 addresses made %d token-endpoint calls, want at most %d", calls, exchangeBurst)
		}
		// Meanwhile an exchange from any address is answered 429: the global limit is everyone's
		// (docs/ui.md says so). The bucket refills, and single sign-on works again.
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/login/callback?state="+url.QueryEscape(state)+"&code=x", nil)
		r.RemoteAddr = "203.0.113.9:1"
		r.AddCookie(cookie)
		if h.ServeHTTP(w, r); w.Code != http.StatusTooManyRequests {
			t.Errorf("a callback from a new address while the global bucket is empty: %d, want 429", w.Code)
		}
		clock.Add(int64(time.Duration(float64(time.Second) / exchangeRate)))
		if _, home := logIn("ada", "ada-pw", nil); !strings.Contains(home, "u-ada") {
			t.Errorf("ada's login did not work after the flood:\n%s", home)
		}
	})
	t.Run("an exchange is one token-endpoint call, in the way the provider's discovery names", func(t *testing.T) {
		// A fresh login has not learnt from a success which way the provider takes the client's
		// credentials: left to guess, oauth2 tried both, two calls for each bad code.
		fresh, err := NewOIDCLogin(ctx, OIDCConfig{IssuerURL: provider.Issuer, ClientID: "nogoo9", RedirectURL: ui.URL + "/login/callback"})
		if err != nil {
			t.Fatal(err)
		}
		calls := countTokenCalls(t, fresh)
		if _, err := fresh.oauth.Exchange(oidc.ClientContext(ctx, fresh.client), "x", oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil {
			t.Fatal("a bad code was exchanged")
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("exchanging a bad code made %d token-endpoint calls, want 1", n)
		}
	})
	t.Run("a browser's callback is single-use: a reload makes no second exchange", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(ui.URL + "/login/oidc?next=/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		callback := ui.URL + "/login/callback?state=" + url.QueryEscape(loc.Query().Get("state")) + "&code=x"
		before := tokenCalls.Load()
		for i, want := range []int{http.StatusUnauthorized, http.StatusForbidden} {
			resp, err := c.Get(callback)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("callback %d: %s, want %d", i+1, resp.Status, want)
			}
		}
		if calls := tokenCalls.Load() - before; calls != 1 {
			t.Errorf("a callback and its reload made %d token-endpoint calls, want 1", calls)
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

// TestOIDCAuthStyle: the client's credentials travel one way, the one discovery names (oauth2,
// left to guess, tried both: two token-endpoint calls for every code that failed).
func TestOIDCAuthStyle(t *testing.T) {
	for _, tc := range []struct {
		secret  string
		methods []string
		want    oauth2.AuthStyle
	}{
		{"", nil, oauth2.AuthStyleInParams},
		{"", []string{"client_secret_basic"}, oauth2.AuthStyleInParams},
		{"s", nil, oauth2.AuthStyleInHeader},
		{"s", []string{"none", "client_secret_basic", "client_secret_post"}, oauth2.AuthStyleInHeader},
		{"s", []string{"client_secret_post"}, oauth2.AuthStyleInParams},
		{"s", []string{"private_key_jwt"}, oauth2.AuthStyleInHeader},
	} {
		if got := authStyle(tc.secret, tc.methods); got != tc.want {
			t.Errorf("authStyle(secret %q, %q) = %v, want %v", tc.secret, tc.methods, got, tc.want)
		}
	}
}

// countTokenCalls counts the requests login makes to its provider's token endpoint.
func countTokenCalls(t *testing.T, login *OIDCLogin) *atomic.Int64 {
	t.Helper()
	base := login.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	token, err := url.Parse(login.oauth.Endpoint.TokenURL)
	if err != nil || token.Host == "" {
		t.Fatalf("token endpoint %q", login.oauth.Endpoint.TokenURL)
	}
	var n atomic.Int64
	login.client.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host == token.Host && r.URL.Path == token.Path {
			n.Add(1)
		}
		return base.RoundTrip(r)
	})
	t.Cleanup(func() { login.client.Transport = base })
	return &n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// anonymousStart starts a login as remote would, and returns its login cookie and state.
func anonymousStart(t *testing.T, h http.Handler, remote string) (*http.Cookie, string) {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/login/oidc?next=/", nil)
	r.RemoteAddr = remote
	h.ServeHTTP(w, r)
	loc, err := url.Parse(w.Header().Get("Location"))
	if w.Code != http.StatusFound || err != nil || loc.Query().Get("state") == "" {
		t.Fatalf("start: %d to %q", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("start set %d cookies, want the login cookie", len(cookies))
	}
	return cookies[0], loc.Query().Get("state")
}
