package proxy

import (
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/auth"
)

func typesUID(s string) types.UID { return types.UID(s) }

// serveOwn answers the proxy's own endpoints under ReservedPrefix.
func (p *Proxy) serveOwn(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case ReservedPrefix + "login":
		p.serveLogin(w, r)
	case ReservedPrefix + "logout":
		http.SetCookie(w, p.cookie("", -1, time.Time{}))
		http.Redirect(w, r, ReservedPrefix+"login", http.StatusSeeOther)
	case ReservedPrefix + "healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	default:
		http.NotFound(w, r)
	}
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer"><title>nogoo9 login</title></head>
<body><h1>nogoo9</h1>{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
<form method="post" action="login"><input type="hidden" name="next" value="{{.Next}}">
<label>Token <input type="password" name="token" autocomplete="off" required></label>
<button type="submit">Log in</button></form></body></html>
`))

// serveLogin is the browser login flow: POST a bearer token (form field "token", optional
// "next"), get it back as an HttpOnly, Secure, SameSite=Lax cookie and a redirect to next. GET
// without a token shows the form; GET with ?token= works too (the redirect takes it off the
// address bar) for links handed out by the front end.
func (p *Proxy) serveLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "405 Method Not Allowed: use GET or POST", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "400 Bad Request: the login form could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	next := safeNext(r.Form.Get("next"))
	token := strings.TrimSpace(r.Form.Get("token"))
	if token == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, struct{ Next, Error string }{next, ""})
		return
	}
	caller, err := p.verify(r, token)
	if err != nil {
		p.log.Info("login refused", "remote", r.RemoteAddr, "reason", err.Error())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_ = loginPage.Execute(w, struct{ Next, Error string }{next, "That token was not accepted; get a fresh one and try again."})
		return
	}
	http.SetCookie(w, p.cookie(token, 0, caller.Expiry))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (p *Proxy) verify(r *http.Request, token string) (*auth.Caller, error) {
	if v, ok := p.authn.(tokenVerifier); ok {
		return v.VerifyToken(r.Context(), token)
	}
	r2 := r.Clone(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	return p.authn.Authenticate(r2)
}

func (p *Proxy) cookie(value string, maxAge int, expires time.Time) *http.Cookie {
	return &http.Cookie{
		Name:     auth.CookieName,
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		Expires:  expires,
		HttpOnly: true,
		Secure:   !p.opts.InsecureCookie,
		SameSite: http.SameSiteLaxMode,
	}
}

// safeNext keeps a redirect target on this site: a path, never "//host" or "/\host".
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/"
	}
	return next
}

// tokenCache remembers verified tokens for a short time, so a request costs a map lookup rather
// than a signature check or a TokenReview. An entry never outlives the token's expiry.
type tokenCache struct {
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]cachedCaller
}

type cachedCaller struct {
	c       *auth.Caller
	expires time.Time
}

// maxCachedTokens bounds the cache; when full it starts over (a burst of new tokens costs one
// verification each, nothing more).
const maxCachedTokens = 10000

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, m: map[string]cachedCaller{}}
}

func (tc *tokenCache) get(token string, now time.Time) *auth.Caller {
	if tc.ttl <= 0 {
		return nil
	}
	tc.mu.RLock()
	e, ok := tc.m[token]
	tc.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		return nil
	}
	return e.c
}

func (tc *tokenCache) put(token string, c *auth.Caller, now time.Time) {
	if tc.ttl <= 0 {
		return
	}
	exp := now.Add(tc.ttl)
	if !c.Expiry.IsZero() && c.Expiry.Before(exp) {
		exp = c.Expiry
	}
	tc.mu.Lock()
	if len(tc.m) >= maxCachedTokens {
		tc.m = map[string]cachedCaller{}
	}
	tc.m[token] = cachedCaller{c: c, expires: exp}
	tc.mu.Unlock()
}
