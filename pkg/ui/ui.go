package ui

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/session"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

//go:embed static
var staticFS embed.FS

// Options configure the UI.
type Options struct {
	// Service is the front end's service layer (the one REST and MCP use).
	Service *frontend.Service
	// Templates lists templates and their required context (the registry the service reads).
	Templates frontend.Templates
	// Auth verifies the token of the development login and the ID token of the OIDC login.
	Auth auth.Authenticator
	// Hub feeds the live streams; nil disables them (pages still render).
	Hub *Hub
	// Sessions holds the sessions (a fresh store with defaults when nil).
	Sessions *session.Store
	// InsecureCookie drops the Secure attribute and the __Host- prefix of the session cookie:
	// for plain-HTTP development only.
	InsecureCookie bool
	// DevLogin shows the development login, which takes a bearer token.
	DevLogin bool
	// OIDC, when set, offers the OpenID Connect authorization-code login with PKCE.
	OIDC *OIDCLogin
	// ProxyURL is the proxy's public base URL (e.g. https://ws.example.com) that workspace links
	// point at. When empty, links use the request's host with ProxyPort.
	ProxyURL string
	// ProxyPort is the proxy's port on this host, used when ProxyURL is empty ("" for no links).
	ProxyPort string
	// Origins, when set (--proxy-workspace-domain), points each workspace's links at its own host,
	// "<scheme>://<label>.<apex>" + the route's path (workspace.Origins), as the proxy serves it;
	// it wins over ProxyURL and ProxyPort.
	Origins *workspace.Origins
	// MaxStream bounds how long one live stream stays open (the browser reconnects); 30 min when 0.
	MaxStream time.Duration
	// MaxListStreams bounds the live workspace lists one user (one subject, over all their
	// sessions) keeps open at once, one per open tab of the list; DefaultMaxListStreams when 0.
	// A workspace's page's stream is bounded by the service's follow limit instead.
	MaxListStreams int
}

// DefaultMaxListStreams is Options.MaxListStreams when it is 0.
const DefaultMaxListStreams = 8

// maxFormBytes bounds the body of a state-changing request (a form).
const maxFormBytes = 64 << 10

// UI serves the web UI.
type UI struct {
	o     Options
	svc   *frontend.Service
	pages *pageSet
	mux   *http.ServeMux
	// listStreams counts the open list streams per subject.
	listStreams *slots
}

// New returns the UI; serve it with Handler.
func New(o Options) (*UI, error) {
	if o.Service == nil || o.Auth == nil || o.Templates == nil {
		return nil, errors.New("ui: Service, Templates and Auth are required")
	}
	if !o.DevLogin && o.OIDC == nil {
		return nil, errors.New("ui: no login method: enable the development login or configure OIDC")
	}
	if o.Sessions == nil {
		o.Sessions = session.NewStore(session.Options{})
	}
	if o.MaxStream <= 0 {
		o.MaxStream = 30 * time.Minute
	}
	if o.MaxListStreams <= 0 {
		o.MaxListStreams = DefaultMaxListStreams
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	u := &UI{o: o, svc: o.Service, pages: pages, mux: http.NewServeMux(), listStreams: newSlots(o.MaxListStreams)}
	u.routes()
	return u, nil
}

func (u *UI) routes() {
	static, _ := fs.Sub(staticFS, "static")
	fileServer := http.FileServerFS(static)
	u.mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(fileServer)))
	u.mux.HandleFunc("GET /login", u.loginPage)
	u.mux.HandleFunc("POST /login", u.devLogin)
	u.mux.HandleFunc("GET /login/oidc", u.oidcStart)
	u.mux.HandleFunc("GET /login/callback", u.oidcCallback)
	u.mux.HandleFunc("POST /logout", u.withSession(u.logout))
	u.mux.HandleFunc("GET /{$}", u.withSession(u.listPage))
	u.mux.HandleFunc("GET /stream", ownPagesOnly(u.withSession(u.listStream)))
	u.mux.HandleFunc("GET /workspaces/new", u.withSession(u.newPage))
	u.mux.HandleFunc("POST /workspaces", u.withSession(u.spawn))
	u.mux.HandleFunc("GET /workspaces/{id}", u.withSession(u.workspacePage))
	u.mux.HandleFunc("GET /workspaces/{id}/stream", ownPagesOnly(u.withSession(u.workspaceStream)))
	u.mux.HandleFunc("POST /workspaces/{id}/upgrade", u.withSession(u.upgrade))
	u.mux.HandleFunc("GET /workspaces/{id}/delete", u.withSession(u.deletePage))
	u.mux.HandleFunc("POST /workspaces/{id}/delete", u.withSession(u.delete))
	u.mux.HandleFunc("POST /workspaces/{id}/maintenance", u.withSession(u.maintenance))
	u.mux.HandleFunc("POST /workspaces/{id}/stop", u.withSession(u.stop))
	u.mux.HandleFunc("POST /workspaces/{id}/start", u.withSession(u.start))
	u.mux.HandleFunc("POST /workspaces/{id}/pin", u.withSession(u.pin))
	// The same pages and actions for a workspace in another watched namespace; the routes above
	// address nogoo9's own namespace, so links made before namespaces keep working.
	u.mux.HandleFunc("GET /namespaces/{ns}/workspaces/{id}", u.withSession(u.workspacePage))
	u.mux.HandleFunc("GET /namespaces/{ns}/workspaces/{id}/stream", ownPagesOnly(u.withSession(u.workspaceStream)))
	u.mux.HandleFunc("POST /namespaces/{ns}/workspaces/{id}/upgrade", u.withSession(u.upgrade))
	u.mux.HandleFunc("GET /namespaces/{ns}/workspaces/{id}/delete", u.withSession(u.deletePage))
	u.mux.HandleFunc("POST /namespaces/{ns}/workspaces/{id}/delete", u.withSession(u.delete))
	u.mux.HandleFunc("POST /namespaces/{ns}/workspaces/{id}/maintenance", u.withSession(u.maintenance))
	u.mux.HandleFunc("POST /namespaces/{ns}/workspaces/{id}/stop", u.withSession(u.stop))
	u.mux.HandleFunc("POST /namespaces/{ns}/workspaces/{id}/start", u.withSession(u.start))
	u.mux.HandleFunc("POST /namespaces/{ns}/workspaces/{id}/pin", u.withSession(u.pin))
	u.mux.HandleFunc("GET /upgrade-all", u.withSession(u.upgradeAllPage))
	u.mux.HandleFunc("POST /upgrade-all", u.withSession(u.upgradeAll))
	u.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Not the path: a page shows no text a link wrote (docs/security.md).
		u.renderError(w, r, nil, http.StatusNotFound, "Page not found: nogoo9 has no page at this address; go back to your workspaces.")
	})
}

// Handler returns the UI's handler: every request passes Go's cross-origin protection (a
// state-changing request from another origin is refused before any handler runs), and every
// answer carries a strict Content-Security-Policy.
func (u *UI) Handler() http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctrl.LoggerFrom(r.Context()).WithName("ui").Info("request refused: cross-origin", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
		http.Error(w, "403 Forbidden: cross-origin request refused; use the nogoo9 page itself", http.StatusForbidden)
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		u.mux.ServeHTTP(w, r)
	}))
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Asset URLs carry the build's version (?v=), so they may be cached for long.
		w.Header().Set("Cache-Control", "public, max-age=86400")
		h.ServeHTTP(w, r)
	})
}

// ownPagesOnly serves h (a live stream) only to nogoo9's own pages. A stream is a GET, which the
// cross-origin protection lets through, and it takes one of a few places (a user's live lists, the
// follows a user shares with REST and MCP) for as long as it stays open; the session cookie
// (SameSite=Strict) goes with requests from any page of the same site, a workspace's on another
// host or port included, which could thus open the viewer's streams until none were left. A
// request the browser marks as from another origin (Sec-Fetch-Site other than same-origin or
// none; without it, an Origin that is not this host) is refused with 403 before it takes a place.
func ownPagesOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		site := r.Header.Get("Sec-Fetch-Site")
		foreign := site != "" && site != "same-origin" && site != "none"
		if origin := r.Header.Get("Origin"); site == "" && origin != "" {
			o, err := url.Parse(origin)
			foreign = err != nil || o.Host != r.Host
		}
		if foreign {
			ctrl.LoggerFrom(r.Context()).WithName("ui").Info("request refused: a stream from another origin", "path", r.URL.Path, "site", site)
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "403 Forbidden: live updates are sent only to nogoo9's own pages, not to a page of another origin (a workspace's included); open the page on nogoo9 itself", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// request is what a handler with a session gets.
type request struct {
	*http.Request
	sess   *session.Session
	sessID string
	ctx    context.Context // carries the caller, for the service
}

func (u *UI) cookieName() string {
	if u.o.InsecureCookie {
		return "nogoo9-session"
	}
	return "__Host-nogoo9-session"
}

// clearSessionCookie tells the browser to drop the session cookie.
func (u *UI) clearSessionCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: u.cookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: !u.o.InsecureCookie, SameSite: http.SameSiteStrictMode})
}

// sessionOf returns the live session of r, if any; the id is the cookie's value, also when it
// names no live session.
func (u *UI) sessionOf(r *http.Request) (string, *session.Session, bool) {
	c, err := r.Cookie(u.cookieName())
	if err != nil {
		return "", nil, false
	}
	s, ok := u.o.Sessions.Get(c.Value)
	return c.Value, s, ok
}

// liveSession returns the session with id as it stands now. Its token, verified at login, is
// verified again by the authenticator the API uses when its last check is the store's
// RecheckAfter (30 s) old or older: refused (revoked, expired, its account gone), the session ends
// and ok is false; verified, the session's caller becomes what the authenticator says now (an
// admin demoted is a user from this request on). err is set, and the session kept as it is, when
// the token could not be checked now (auth.Status 429 or 503: the verifier away, too many
// refusals).
func (u *UI) liveSession(r *http.Request, id string, sess *session.Session) (_ *session.Session, ok bool, err error) {
	if !u.o.Sessions.Stale(sess) {
		return sess, true, nil
	}
	log := ctrl.LoggerFrom(r.Context()).WithName("ui")
	c, err := u.o.Auth.VerifyToken(auth.WithClient(r.Context(), r), sess.Token())
	if err != nil {
		if status, _ := auth.Status(err); status != http.StatusUnauthorized {
			log.Info("session not rechecked: the token could not be checked now", "user", sess.Caller.Subject, "reason", err.Error())
			return nil, false, err
		}
		u.o.Sessions.Delete(id)
		log.Info("session ended: its token was refused", "user", sess.Caller.Subject, "reason", err.Error())
		return nil, false, nil
	}
	now, ok := u.o.Sessions.Rechecked(id, c)
	if !ok {
		log.Info("session ended: its token now names another user, or it was logged out", "user", sess.Caller.Subject)
		return nil, false, nil
	}
	if c.IsAdmin != sess.Caller.IsAdmin {
		log.Info("session's caller changed at its recheck", "user", c.Subject, "admin", c.IsAdmin, "wasAdmin", sess.Caller.IsAdmin)
	}
	return now, true, nil
}

// withSession runs h with the request's session, checking the CSRF token of every request that
// is not GET or HEAD. The session's token is verified again when due (liveSession). Without a live session (the cookie of one that ended is cleared): a page
// redirects to the login page and comes back, a form goes to the login page, htmx's request
// answers 401 with HX-Redirect (htmx follows that; a redirect it would swap into the target), and
// a live stream says so in its page and closes.
func (u *UI) withSession(h func(http.ResponseWriter, *request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		id, sess, ok := u.sessionOf(r)
		if ok {
			var err error
			if sess, ok, err = u.liveSession(r, id, sess); err != nil {
				// Nothing is known about the token now: the session stays, this request waits.
				status, retry := auth.Status(err)
				if retry != "" {
					w.Header().Set("Retry-After", retry)
				}
				msg := "Service Unavailable: your login could not be checked just now (the identity service did not answer); try again in a few seconds."
				if status == http.StatusTooManyRequests {
					msg = "Too Many Requests: too many logins were refused recently, so yours could not be checked just now; try again in " + retry + " seconds."
				}
				if isStreamRequest(r) {
					http.Error(w, msg, status) // the browser reconnects, and the page then streams
					return
				}
				u.renderError(w, r, nil, status, msg)
				return
			}
		}
		if !ok {
			if id != "" {
				u.clearSessionCookie(w)
			}
			switch {
			case isStreamRequest(r):
				refuseStream(w, r, http.StatusUnauthorized, msgSessionEnded, true)
			case r.Header.Get("HX-Request") != "":
				w.Header().Set("HX-Redirect", "/login")
				u.renderError(w, r, nil, http.StatusUnauthorized, "Unauthorized: your session has ended; log in again.")
			case r.Method == http.MethodGet || r.Method == http.MethodHead:
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			default:
				// A form's action is no page to come back to.
				http.Redirect(w, r, "/login", http.StatusSeeOther)
			}
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			// Parsed here, not by PostFormValue, which hides why it failed: a form over the
			// bound would read as one without its token.
			if err := parseForm(r); err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					ctrl.LoggerFrom(r.Context()).WithName("ui").Info("request refused: form too large", "method", r.Method, "path", r.URL.Path, "user", sess.Caller.Subject, "limit", maxFormBytes)
					u.renderError(w, r, sess, http.StatusRequestEntityTooLarge, "Request Entity Too Large: the form is larger than 64 KiB; go back, shorten what you typed (a context value, the name) and send it again.")
					return
				}
			}
			token := r.Header.Get("X-CSRF-Token")
			if token == "" {
				token = r.PostFormValue("csrf")
			}
			if !sess.ValidCSRF(token) {
				ctrl.LoggerFrom(r.Context()).WithName("ui").Info("request refused: CSRF token missing or wrong", "method", r.Method, "path", r.URL.Path, "user", sess.Caller.Subject)
				u.renderError(w, r, sess, http.StatusForbidden, "Forbidden: the form was missing its security token or it was stale; reload the page and try again.")
				return
			}
		}
		// The namespace in the path, if any, is checked by the service (watched, well-formed).
		ctx := frontend.WithNamespace(auth.WithCaller(r.Context(), sess.Caller), r.PathValue("ns"))
		h(w, &request{Request: r, sess: sess, sessID: id, ctx: ctx})
	}
}

// parseForm reads r's form (url-encoded or multipart) and returns why it could not.
func parseForm(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return err
	}
	if err := r.ParseMultipartForm(maxFormBytes); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return err
	}
	return nil
}

// wsPath is the page of workspace id in namespace ns: /workspaces/<id> in nogoo9's own namespace
// (as before namespaces), /namespaces/<ns>/workspaces/<id> in another.
func (u *UI) wsPath(ns, id string) string {
	if ns == "" || ns == u.svc.HomeNamespace() {
		return "/workspaces/" + url.PathEscape(id)
	}
	return "/namespaces/" + url.PathEscape(ns) + "/workspaces/" + url.PathEscape(id)
}

// proxyBase is the base URL of workspace links for r.
func (u *UI) proxyBase(r *http.Request) string {
	if u.o.ProxyURL != "" {
		return strings.TrimRight(u.o.ProxyURL, "/")
	}
	if u.o.ProxyPort == "" {
		return ""
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	scheme := "http"
	if r.TLS != nil || !u.o.InsecureCookie {
		scheme = "https"
	}
	return scheme + "://" + host + ":" + u.o.ProxyPort
}

// safeNext keeps a post-login redirect on this site: a path, never a scheme or another host.
// Browsers drop TAB, CR and LF in a URL and read "\" as "/"; a path that spells "//" only once
// decoded ("/%2F%2Fevil.example") is refused too, in case something decodes it again on the way
// (found by FuzzSafeNext; the proxy's login applies the same rules).
func safeNext(next string) string {
	if next == "" || len(next) > 2048 || !strings.HasPrefix(next, "/") {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Host != "" || u.Scheme != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	dec, err := url.PathUnescape(next)
	if err != nil {
		return "/"
	}
	for _, s := range []string{next, dec} {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' {
				return "/"
			}
		}
		if strings.HasPrefix(s, "//") {
			return "/"
		}
	}
	return next
}
