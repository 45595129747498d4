package proxy

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/auth"
)

func typesUID(s string) types.UID { return types.UID(s) }

// CookieName is the proxy's login cookie. The __Host- prefix makes browsers accept it only with
// Secure, Path=/ and no Domain, so neither a sibling host nor a page served over plain HTTP can
// set or shadow it.
const CookieName = "__Host-nogoo9_token"

// InsecureCookieName is the login cookie with Options.InsecureCookie (plain HTTP, where a
// __Host- cookie cannot exist).
const InsecureCookieName = "nogoo9_token"

// serveOwn answers the proxy's own endpoints under ReservedPrefix.
func (p *Proxy) serveOwn(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case ReservedPrefix + "login":
		p.serveLogin(w, r)
	case ReservedPrefix + "logout":
		p.serveLogout(w, r)
	case ReservedPrefix + "healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	default:
		http.NotFound(w, r)
	}
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="referrer" content="same-origin"><title>nogoo9 login</title></head>
<body><h1>nogoo9</h1>{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
<form method="post" action="login"><input type="hidden" name="next" value="{{.Next}}">
<label>Token <input type="password" name="token" autocomplete="off" required></label>
<button type="submit">Log in</button></form></body></html>
`))

var logoutPage = template.Must(template.New("logout").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="referrer" content="same-origin"><title>nogoo9 logout</title></head>
<body><h1>nogoo9</h1><form method="post" action="logout"><button type="submit">Log out</button></form></body></html>
`))

// ownPageHeaders are sent with every answer of the login and logout endpoints: never cached,
// never framed (clickjacking), no Referer leaving the page.
func ownPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	// same-origin, not no-referrer: with no-referrer a browser posts the form with "Origin: null",
	// and one that sends no fetch metadata (plain http to a name other than localhost, older
	// browsers) then had its own login refused as cross-origin. Other sites still get no Referer.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
}

// maxLoginForm bounds the login form body (a token and a path).
const maxLoginForm = 64 << 10

// serveLogin is the browser login flow. GET shows the form (keeping a safe "next"); POST takes
// the token (form field "token", optional "next"), checks that the form was posted from this
// origin, verifies the token, sets it as the login cookie and redirects (303) to next. A token in
// the URL is refused: it would end up in histories and logs, and a link could log a victim in as
// someone else (login CSRF).
func (p *Proxy) serveLogin(w http.ResponseWriter, r *http.Request) {
	ownPageHeaders(w)
	if r.URL.Query().Has("token") {
		http.Error(w, "400 Bad Request: a token is never accepted in the URL; open "+ReservedPrefix+"login and paste it into the form", http.StatusBadRequest)
		return
	}
	if o := p.opts.Origins; o != nil && o.NormalizeHost(r.Host) != o.Host {
		if o.Under(r.Host) {
			p.serveHostLogin(w, r)
			return
		}
		// Another name of the proxy (an internal one, another port): the login is the apex's only,
		// the one origin whose form a workspace host takes a hand-off from.
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "421 Misdirected Request: log in at "+o.Apex()+ReservedPrefix+"login", http.StatusMisdirectedRequest)
			return
		}
		loc := o.Apex() + ReservedPrefix + "login"
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, loc, http.StatusSeeOther)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		next := r.URL.Query().Get("next")
		if origin, path, ok := p.workspaceNext(next); ok {
			// Logged in here already: straight on to the workspace's host.
			if token, c := p.cookieLogin(r); c != nil {
				p.handOff(w, r, origin, path, token)
				return
			}
			p.showLogin(w, http.StatusOK, origin+path, "")
			return
		}
		p.showLogin(w, http.StatusOK, safeNext(next), "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "405 Method Not Allowed: open the login form with GET and submit it with POST", http.StatusMethodNotAllowed)
		return
	}
	if !p.sameOrigin(w, r) {
		return
	}
	if !readLoginForm(w, r) {
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	wsOrigin, wsPath, toHost := p.workspaceNext(r.PostForm.Get("next"))
	if toHost {
		next = wsOrigin + wsPath
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		p.showLogin(w, http.StatusBadRequest, next, "The token field is empty; paste your token and try again.")
		return
	}
	caller, err := p.verify(r, token)
	if err != nil {
		p.log.Info("login refused", "remote", r.RemoteAddr, "reason", err.Error())
		status, msg := auth.LoginRefused(w, err)
		p.showLogin(w, status, next, msg)
		return
	}
	http.SetCookie(w, p.cookie(p.cookieName, token, 0, caller.Expiry))
	if toHost {
		p.handOff(w, r, wsOrigin, wsPath, token)
		return
	}
	w.Header().Set("Location", next)
	w.WriteHeader(http.StatusSeeOther)
}

// readLoginForm reads a login form's body, at most maxLoginForm bytes, into r.PostForm, or answers
// 400 and returns false.
func readLoginForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "400 Bad Request: the login form could not be read: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (p *Proxy) showLogin(w http.ResponseWriter, code int, next, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginPage.Execute(w, struct{ Next, Error string }{next, msg})
}

// serveLogout clears the login cookie on a POST from this origin; GET shows a form that posts.
// A GET never logs out: any page could embed it.
func (p *Proxy) serveLogout(w http.ResponseWriter, r *http.Request) {
	ownPageHeaders(w)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if p.continueLogout(w, r) {
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = logoutPage.Execute(w, nil)
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "405 Method Not Allowed: log out with POST", http.StatusMethodNotAllowed)
		return
	}
	fromApex := p.fromApex(r)
	if !fromApex && !p.sameOrigin(w, r) {
		return
	}
	http.SetCookie(w, p.cookie(p.cookieName, "", -1, time.Time{}))
	if p.cookieName != InsecureCookieName {
		// The login cookie's name before the __Host- prefix: clear a leftover one too.
		http.SetCookie(w, p.cookie(InsecureCookieName, "", -1, time.Time{}))
	}
	if p.logOutHosts(w, r, fromApex) {
		return
	}
	w.Header().Set("Location", ReservedPrefix+"login")
	w.WriteHeader(http.StatusSeeOther)
}

// sameOrigin refuses (403) a state-changing request a browser sent from another origin
// (Sec-Fetch-Site, else Origin against Host); requests without either come from non-browser
// clients, which carry no ambient cookie.
func (p *Proxy) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	if err := p.csrf.Check(r); err != nil {
		p.log.Info("cross-origin form post refused", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		http.Error(w, "403 Forbidden: this form was posted from another site; open "+ReservedPrefix+"login on this site and submit it there", http.StatusForbidden)
		return false
	}
	return true
}

// verify checks a raw token: with VerifyToken when the authenticator has it (auth.Authenticator
// does), else through Authenticate on a request carrying only that token.
// The client's address goes with it: a Guard limits failed checks per client, so one client's
// garbage tokens never lock the others out.
func (p *Proxy) verify(r *http.Request, token string) (*auth.Caller, error) {
	ctx := auth.WithClient(r.Context(), r)
	if v, ok := p.authn.(tokenVerifier); ok {
		return v.VerifyToken(ctx, token)
	}
	r2 := r.Clone(ctx)
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	return p.authn.Authenticate(r2)
}

func (p *Proxy) cookie(name, value string, maxAge int, expires time.Time) *http.Cookie {
	return &http.Cookie{
		Name:     name,
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		Expires:  expires,
		HttpOnly: true,
		Secure:   !p.opts.InsecureCookie,
		SameSite: http.SameSiteLaxMode,
	}
}

// maxNextLen bounds the redirect target after login.
const maxNextLen = 2048

// safeNext keeps the redirect after login on this site: a plain local path, else "/". Browsers
// drop TAB, CR and LF anywhere in a URL and read "\" as "/", so "/\t/evil.example" or
// "/\\evil.example" would leave the site; a path that spells "//" or "/\" only once decoded is
// refused too, in case something decodes it again on the way.
func safeNext(next string) string {
	if next == "" || len(next) > maxNextLen || next[0] != '/' {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	if strings.HasPrefix(next, "//") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	dec, err := url.PathUnescape(next)
	if err != nil {
		return "/"
	}
	for i := 0; i < len(dec); i++ {
		if c := dec[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	if strings.HasPrefix(dec, "//") {
		return "/"
	}
	return next
}

// tokenCache remembers verified tokens for a short time, so a request costs a map lookup rather
// than a signature check or a TokenReview. An entry ends at the TTL, a monotonic offset (monoNow,
// clock.go: a wall clock set forward or back does not move it), or when the wall clock passes the
// token's own expiry, whichever is first: the expiry is a wall time, as the verifier reads it, so
// a lookup of a token that expires reads the wall clock once (a step of the wall clock or a
// suspended host, which stops the monotonic clock, must not let the cache accept a token the
// verifier would refuse).
type tokenCache struct {
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]cachedCaller
}

type cachedCaller struct {
	c       *auth.Caller
	expires time.Duration // monoNow: the TTL, or the token's expiry if sooner when it was cached
}

// maxCachedTokens bounds the cache; when full it starts over (a burst of new tokens costs one
// verification each, nothing more).
const maxCachedTokens = 10000

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, m: map[string]cachedCaller{}}
}

func (tc *tokenCache) get(token string, now time.Duration) *auth.Caller {
	if tc.ttl <= 0 {
		return nil
	}
	tc.mu.RLock()
	e, ok := tc.m[token]
	tc.mu.RUnlock()
	if !ok || now >= e.expires || (!e.c.Expiry.IsZero() && !time.Now().Before(e.c.Expiry)) {
		return nil
	}
	return e.c
}

// put remembers c for token from now (monoNow, taken before the token was verified) for the
// TTL, or until the token expires if that is sooner.
func (tc *tokenCache) put(token string, c *auth.Caller, now time.Duration) {
	if tc.ttl <= 0 {
		return
	}
	exp := now + tc.ttl
	if !c.Expiry.IsZero() {
		// The time left now, from now's reading (taken earlier): the entry ends no later
		// than the token.
		// (Compared before adding: a far expiry must not overflow now+left.)
		if left := time.Until(c.Expiry); left < tc.ttl {
			exp = now + left
		}
	}
	tc.mu.Lock()
	if len(tc.m) >= maxCachedTokens {
		tc.m = map[string]cachedCaller{}
	}
	// The token is a slice of the request's head (quickParse): the entry keeps a copy of it,
	// not the head.
	tc.m[strings.Clone(token)] = cachedCaller{c: c, expires: exp}
	tc.mu.Unlock()
}
