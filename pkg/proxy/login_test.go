package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

func TestSafeNextKeepsTheRedirectOnThisSite(t *testing.T) {
	tests := []struct{ name, next, want string }{
		{"empty", "", "/"},
		{"a workspace path", "/ws/jane/demo/", "/ws/jane/demo/"},
		{"a path with a query", "/ws/jane/demo/?folder=/home", "/ws/jane/demo/?folder=/home"},
		{"an escaped character that is harmless", "/ws/jane/my%20demo/", "/ws/jane/my%20demo/"},
		{"protocol-relative URL", "//evil.example/", "/"},
		{"TAB between the slashes (browsers drop it)", "/\t/evil.example", "/"},
		{"CR between the slashes", "/\r/evil.example", "/"},
		{"LF between the slashes", "/\n/evil.example", "/"},
		{"header injection", "/a\r\nSet-Cookie: x=y", "/"},
		{"backslash (browsers read it as a slash)", "/\\evil.example", "/"},
		{"backslash later in the path", "/ws/\\evil", "/"},
		{"encoded slash after the first slash", "/%2f/evil.example", "/"},
		{"encoded slash in upper case", "/%2F%2Fevil.example", "/"},
		{"encoded backslash", "/%5cevil.example", "/"},
		{"encoded TAB", "/%09/evil.example", "/"},
		{"encoded NUL", "/a%00b", "/"},
		{"a bad escape", "/a%zz", "/"},
		{"absolute https URL", "https://evil.example/", "/"},
		{"absolute URL with user info", "http://jane@evil.example/", "/"},
		{"javascript URL", "javascript:alert(1)", "/"},
		{"relative path", "ws/jane/demo/", "/"},
		{"leading space", " //evil.example", "/"},
		{"DEL character", "/\x7f/evil.example", "/"},
		{"too long", "/" + strings.Repeat("a", maxNextLen), "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := safeNext(tc.next); got != tc.want {
				t.Fatalf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
			}
		})
	}
}

// verifierOnly accepts one token through VerifyToken; Authenticate must never be used for the
// login cookie (pkg/auth reads only the Authorization header).
type verifierOnly struct{}

func (verifierOnly) Authenticate(*http.Request) (*auth.Caller, error) {
	panic("the proxy must verify raw tokens with VerifyToken")
}

func (verifierOnly) VerifyToken(_ context.Context, token string) (*auth.Caller, error) {
	if token == "good" {
		return &auth.Caller{Subject: "jane"}, nil
	}
	return nil, &auth.Error{Reason: "unknown token"}
}

func newLoginProxy(t *testing.T, insecure bool) *Proxy {
	t.Helper()
	p, err := New(verifierOnly{}, Options{BindAddress: ":0", InsecureCookie: insecure})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// send serves one request on the proxy's own endpoints.
func send(p *Proxy, method, target string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, "http://proxy.example"+target, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, "http://proxy.example"+target, nil)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, req)
	return w
}

func cookieNamed(w *httptest.ResponseRecorder, name string) *http.Cookie {
	for _, c := range w.Result().Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

var sameSite = map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://proxy.example"}

func TestLoginTakesTheTokenOnlyFromASameOriginPost(t *testing.T) {
	p := newLoginProxy(t, false)

	t.Run("a token in the URL is refused and never becomes a cookie", func(t *testing.T) {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			w := send(p, m, "/_nogoo9/login?token=good&next=/%09/evil.example", nil, sameSite)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "never accepted in the URL") {
				t.Fatalf("%s with ?token=: %d %q, want 400 explaining why", m, w.Code, w.Body.String())
			}
			if len(w.Result().Cookies()) != 0 || w.Header().Get("Location") != "" {
				t.Fatalf("%s with ?token= set %v, Location %q: want neither", m, w.Result().Cookies(), w.Header().Get("Location"))
			}
		}
	})
	t.Run("GET shows the form with a safe next", func(t *testing.T) {
		w := send(p, http.MethodGet, "/_nogoo9/login?next=/%09/evil.example", nil, nil)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="next" value="/"`) || len(w.Result().Cookies()) != 0 {
			t.Fatalf("GET login: %d %q, want 200 with the form and next=/", w.Code, w.Body.String())
		}
		if w.Header().Get("X-Frame-Options") != "DENY" || w.Header().Get("Cache-Control") != "no-store" {
			t.Fatalf("login page headers %v: want no framing and no caching", w.Header())
		}
	})
	t.Run("a cross-site POST is refused", func(t *testing.T) {
		for _, hdr := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
			{"Origin": "https://evil.example"}, // an older browser without Fetch metadata
		} {
			w := send(p, http.MethodPost, "/_nogoo9/login", url.Values{"token": {"good"}}, hdr)
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "posted from another site") || len(w.Result().Cookies()) != 0 {
				t.Fatalf("cross-site POST %v: %d %q cookies %v, want 403 and no cookie", hdr, w.Code, w.Body.String(), w.Result().Cookies())
			}
		}
	})
	t.Run("a bad token is refused", func(t *testing.T) {
		w := send(p, http.MethodPost, "/_nogoo9/login", url.Values{"token": {"bad"}}, sameSite)
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
			t.Fatalf("bad token: %d, cookies %v, want 401 and none", w.Code, w.Result().Cookies())
		}
	})
	t.Run("a same-origin POST sets the __Host- cookie and redirects to a safe next", func(t *testing.T) {
		w := send(p, http.MethodPost, "/_nogoo9/login", url.Values{"token": {"good"}, "next": {"/\t/evil.example"}}, sameSite)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/" {
			t.Fatalf("login: %d Location %q, want 303 to /", w.Code, w.Header().Get("Location"))
		}
		c := cookieNamed(w, "__Host-nogoo9_token")
		if c == nil || c.Value != "good" || !c.Secure || !c.HttpOnly || c.Path != "/" || c.Domain != "" || c.SameSite != http.SameSiteLaxMode {
			t.Fatalf("login cookie %+v: want __Host-nogoo9_token, Secure, HttpOnly, Path=/, no Domain, SameSite=Lax", c)
		}
		w = send(p, http.MethodPost, "/_nogoo9/login", url.Values{"token": {"good"}, "next": {"/ws/jane/demo/"}}, sameSite)
		if w.Header().Get("Location") != "/ws/jane/demo/" {
			t.Fatalf("Location %q, want /ws/jane/demo/", w.Header().Get("Location"))
		}
	})
	t.Run("with --insecure-cookie the cookie is the plain name without Secure", func(t *testing.T) {
		w := send(newLoginProxy(t, true), http.MethodPost, "/_nogoo9/login", url.Values{"token": {"good"}}, nil)
		c := cookieNamed(w, "nogoo9_token")
		if w.Code != http.StatusSeeOther || c == nil || c.Secure {
			t.Fatalf("insecure login: %d cookie %+v, want 303 and a non-Secure nogoo9_token", w.Code, c)
		}
	})
}

func TestLogoutIsASameOriginPost(t *testing.T) {
	p := newLoginProxy(t, false)
	w := send(p, http.MethodGet, "/_nogoo9/logout", nil, nil)
	if w.Code != http.StatusOK || len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), `method="post"`) {
		t.Fatalf("GET logout: %d cookies %v, want 200 with a form and no cookie change", w.Code, w.Result().Cookies())
	}
	w = send(p, http.MethodPost, "/_nogoo9/logout", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
		t.Fatalf("cross-site logout: %d cookies %v, want 403 and no cookie change", w.Code, w.Result().Cookies())
	}
	w = send(p, http.MethodPost, "/_nogoo9/logout", url.Values{}, sameSite)
	c := cookieNamed(w, "__Host-nogoo9_token")
	if w.Code != http.StatusSeeOther || c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Fatalf("logout: %d cookie %+v, want 303 and the cookie cleared", w.Code, c)
	}
}

func TestTheProxyReadsItsOwnCookie(t *testing.T) {
	p := newLoginProxy(t, false)
	tests := []struct {
		name, cookie, wantErr string
	}{
		{"the __Host- cookie is read and verified with VerifyToken", "a=1; __Host-nogoo9_token=good", ""},
		{"the plain name is not the login cookie when Secure", "nogoo9_token=good", "no bearer token"},
		{"two different login cookies are refused", "__Host-nogoo9_token=good; __Host-nogoo9_token=other", "two different nogoo9 login cookies"},
		{"the same cookie twice is fine", "__Host-nogoo9_token=good; __Host-nogoo9_token=good", ""},
		{"a bad cookie is refused", "__Host-nogoo9_token=bad", "unknown token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://proxy.example/ws/jane/demo/", nil)
			r.Header.Set("Cookie", tc.cookie)
			c, err := p.authenticate(nil, r)
			if tc.wantErr == "" {
				if err != nil || c.Subject != "jane" {
					t.Fatalf("authenticate: %v %v, want jane", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("authenticate: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSetCookieFilter(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr string
	}{
		{"the workspace's own cookies pass", []string{"sid=1; Path=/", "theme=dark"}, []string{"sid=1; Path=/", "theme=dark"}, ""},
		{"nogoo9's login cookie is removed", []string{"nogoo9_token=evil; Path=/", "sid=1"}, []string{"sid=1"}, ""},
		{"the __Host- name in another case is removed", []string{"__HOST-NOGOO9_token=evil; Path=/; Secure"}, nil, ""},
		{"a __Secure- name is removed", []string{"__Secure-nogoo9_session=x; Secure"}, nil, ""},
		{"a future nogoo9 cookie is removed", []string{"nogoo9_csrf=x"}, nil, ""},
		{"white space around the name does not help", []string{"  nogoo9_token=evil"}, nil, ""},
		{"a nameless cookie that spells the name is removed", []string{"=__Host-nogoo9_token=evil; Path=/"}, nil, ""},
		{"a cookie without = that spells the name is removed", []string{"nogoo9_token; Path=/"}, nil, ""},
		{"a name that merely contains nogoo9 passes", []string{"my_nogoo9=1"}, []string{"my_nogoo9=1"}, ""},
		{"a flood is refused", make([]string, DefaultMaxSetCookies+1), nil, "more than 32 Set-Cookie headers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := filterSetCookies(tc.in, DefaultMaxSetCookies)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("filterSetCookies(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// Failed token checks are limited per client address (auth.Guard), as on the API: one client's
// garbage tokens, at the login form or as bearer headers, must not lock every other client out.
// Before stop 48 the proxy verified tokens without the client's address, so all of its clients
// shared one bucket.
func TestOneClientsGarbageTokensDoNotLockOthersOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		try  func(p *Proxy, addr, token string) *httptest.ResponseRecorder
		ok   int
	}{
		{"the login form", func(p *Proxy, addr, token string) *httptest.ResponseRecorder {
			return sendFrom(p, addr, http.MethodPost, "/_nogoo9/login", url.Values{"token": {token}, "next": {"/"}}, sameSite)
		}, http.StatusSeeOther},
		{"a bearer header on a workspace path", func(p *Proxy, addr, token string) *httptest.ResponseRecorder {
			return sendFrom(p, addr, http.MethodGet, "/ws/ns/demo/", nil, map[string]string{"Authorization": "Bearer " + token})
		}, http.StatusNotFound}, // verified, then no route: not 401 or 429
	} {
		t.Run(tc.name, func(t *testing.T) {
			stopped := time.Now() // the guard's clock stands still: its buckets never refill mid-test
			p, err := New(auth.NewGuard(verifierOnly{}, auth.GuardOptions{Now: func() time.Time { return stopped }}), Options{BindAddress: ":0"})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 30 { // past the per-client burst (10)
				tc.try(p, "10.0.0.1:4000", fmt.Sprintf("garbage-%d", i))
			}
			if w := tc.try(p, "10.0.0.1:4000", "good"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
				t.Fatalf("a valid token from the client that sent 30 garbage ones: %d (Retry-After %q) %q, want 429 with Retry-After: that client waits",
					w.Code, w.Header().Get("Retry-After"), w.Body.String())
			}
			if w := tc.try(p, "10.0.0.2:4000", "good"); w.Code != tc.ok {
				t.Fatalf("a valid token from another client: %d %q, want %d", w.Code, w.Body.String(), tc.ok)
			}
		})
	}
}

// sendFrom is send from client address addr.
func sendFrom(p *Proxy, addr, method, target string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, "http://proxy.example"+target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.RemoteAddr = addr
	w := httptest.NewRecorder()
	p.ServeHTTP(w, req)
	return w
}
