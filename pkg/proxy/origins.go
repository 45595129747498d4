package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// Per-workspace origins (Options.Origins, --proxy-workspace-domain).
//
// With one origin for every workspace, a page served by workspace A is, to the browser, a page of
// the same site as workspace B and the login form: it can read B's answers with the viewer's
// cookie, drive B's terminal over a WebSocket, and read a token typed into the login form of a
// window it opened. Host names separate them: each route is served only on its own host,
// "<label>.<apex>", whose cookie is its own (host-only, HttpOnly). Who can write what:
//
//   - a workspace's pages (the tenant's code, or anything the tenant ran) run on that workspace's
//     host only; the proxy never forwards the login cookie or the reserved path to a pod;
//   - the apex host serves only nogoo9's own pages: the login form, the hand-off page and
//     redirects. No workspace page is ever served there;
//   - the hosts of one apex are one "site" to the browser (SameSite does not separate them), so a
//     request a page of workspace A sends to workspace B's host carries B's cookie: the proxy
//     refuses it unless it is a top-level GET navigation (crossSiteUse). A bearer token in the
//     Authorization header is not ambient, so programs may use any host.
//
// The login: a browser without a cookie for B's host is sent to the apex's login form (a workspace
// page cannot read it: another origin). Logged in there, the apex hands the token to B's host in a
// form the page posts at once (handoffPage); B's host takes a login only from the apex's origin and
// sets its own cookie.

// noRoute is originRoute's "answered already".
var noRoute = &target{}

// originRoute finds the route of a request with Origins set, or answers it (noRoute).
//
// On a workspace host only that host's own routes are looked up: a route of another workspace
// whose prefix nests inside this one's ("/ws/jane/demo/static/", claimed by a tenant's path
// annotation) must not serve its pages, or a redirect to them, in this origin. Nothing else is
// served there: 404, before any authentication, so a page of this host cannot probe which other
// workspaces its viewer may open. A request that carries the login cookie must come from this
// host's own pages (crossSiteUse).
//
// On any other host (the apex, an internal name) a workspace's route is served only to a bearer
// token; a browser's request is sent to the route's host (misdirected).
func (p *Proxy) originRoute(w http.ResponseWriter, r *http.Request, clean string) *target {
	o := p.opts.Origins
	_, bearer := r.Header["Authorization"] // a token the client sends itself, not one the browser adds
	if !o.Under(r.Host) {
		t := p.router.lookup(clean)
		if t == nil || bearer {
			return t
		}
		p.misdirected(w, r, t, clean, p.hostOf(t))
		return noRoute
	}
	host := o.NormalizeHost(r.Host)
	t := p.router.lookupWhere(clean, func(t *target) bool { return p.hostOf(t) == host })
	if t == nil {
		if rt := p.router.route(clean + "/"); !strings.HasSuffix(clean, "/") && rt != nil && p.hostOf(rt) == host {
			return nil // serveNoRoute: this host's prefix without its slash
		}
		http.Error(w, "404 Not Found: "+host+" serves one workspace route, and nothing at "+clean, http.StatusNotFound)
		return noRoute
	}
	if bearer || t.public {
		return t // no ambient credential is used: the login cookie is stripped like every other
	}
	if _, cookie, _ := cookieValue(r.Header["Cookie"], p.cookieName); !cookie {
		return t // nothing ambient: authentication answers 401, or sends a navigation to the login
	}
	wholeHeader(w, r) // the fetch metadata fields are lazy (quickheader.go)
	if why := crossSiteUse(r.Header, r.Method, o.Scheme+"://"+host, p.opts.AllowedOrigins); why != "" {
		p.log.Info("request refused: not sent by the workspace's own pages", "why", why, "host", r.Host, "path", clean, "remote", r.RemoteAddr)
		http.Error(w, "403 Forbidden: "+why+"; open "+o.Scheme+"://"+host+t.prefix+" itself", http.StatusForbidden)
		return noRoute
	}
	return t
}

// hostOf is the host that serves t (Origins set).
func (p *Proxy) hostOf(t *target) string {
	return p.opts.Origins.HostFor(t.ws.namespace, t.ws.id, t.kind == kindPreview)
}

// misdirected answers a browser's request for route t on a host that serves no workspace (the
// apex, an internal name), where no workspace page runs: after the same checks as a request on
// t's host (so it tells a caller no more than that would), GET and HEAD are redirected to t's
// host, and anything else gets 421: a form must not be moved to another origin behind the
// browser's back.
func (p *Proxy) misdirected(w http.ResponseWriter, r *http.Request, t *target, clean, host string) {
	wholeHeader(w, r)
	if !t.public {
		caller, err := p.authenticate(w, r)
		if err != nil {
			p.unauthorized(w, r, err)
			return
		}
		if !p.authorize(w, caller, t, clean) {
			return
		}
	}
	loc := p.opts.Origins.Scheme + "://" + host + r.URL.RequestURI()
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
		return
	}
	http.Error(w, "421 Misdirected Request: workspace "+t.ws.id+" is served at "+p.opts.Origins.Scheme+"://"+host+": send the request there", http.StatusMisdirectedRequest)
}

// crossSiteUse says why a request that carries a workspace host's login cookie is not known to
// come from that host's own pages, or "" when it is. Fetch metadata decides (every current browser
// sends it to https and localhost origins): Sec-Fetch-Site same-origin, or none (the person typed
// the address or opened a bookmark), or a top-level GET navigation from elsewhere (a link, the UI's
// Open button: the page it opens is this host's own, and the page that opened it cannot read it).
// A frame from another origin is refused: it could trick the viewer into clicking or typing in
// the workspace (clickjacking). Without fetch metadata only a WebSocket handshake whose Origin is
// this host passes (browsers always send Origin there): a script or an image of another page would
// carry the cookie too, and nothing would tell them apart. An origin in allowed
// (--proxy-allowed-origins, "*" for any) may open WebSockets with the cookie, as without Origins.
func crossSiteUse(h http.Header, method, own string, allowed []string) string {
	origin := headerFirst(h, "Origin")
	if headerFirst(h, "Upgrade") != "" && origin != "" && (strings.EqualFold(origin, own) || listedOrigin(origin, allowed)) {
		return ""
	}
	switch site := headerFirst(h, "Sec-Fetch-Site"); site {
	case "same-origin", "none":
		if origin != "" && !strings.EqualFold(origin, own) {
			return "the request's Origin is " + origin // "null" too: a sandboxed frame
		}
		return ""
	case "":
		return "the browser sent no fetch metadata (Sec-Fetch-Site), so a request another page made cannot be told apart: use a current browser over https, or a bearer token"
	default: // same-site, cross-site, or a value this code does not know
		if headerFirst(h, "Sec-Fetch-Mode") == "navigate" && headerFirst(h, "Sec-Fetch-Dest") == "document" && (method == http.MethodGet || method == http.MethodHead) {
			return ""
		}
		return "a page of another origin sent this request with your login cookie (Sec-Fetch-Site: " + site + ", Sec-Fetch-Dest: " + headerFirst(h, "Sec-Fetch-Dest") + ")"
	}
}

// listedOrigin reports whether origin is one of allowed, or allowed holds "*".
func listedOrigin(origin string, allowed []string) bool {
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(a, origin) {
			return true
		}
	}
	return false
}

// loginRedirect sends a browser's navigation without a valid login to the apex's login form, which
// comes back to the address asked for. It reports false (nothing written) for anything else.
func (p *Proxy) loginRedirect(w http.ResponseWriter, r *http.Request) bool {
	o := p.opts.Origins
	if o == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	wholeHeader(w, r)
	if mode := headerFirst(r.Header, "Sec-Fetch-Mode"); mode != "navigate" && (mode != "" || !strings.Contains(headerFirst(r.Header, "Accept"), "text/html")) {
		return false // a script's request or a program's: the 401 says why
	}
	// Back to the address asked for; on the apex or another name of the proxy, to its path on the
	// apex, which then sends the browser on to the workspace's host.
	back := safeNext(r.URL.RequestURI())
	if o.Under(r.Host) {
		back = o.Scheme + "://" + o.NormalizeHost(r.Host) + back
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, o.Apex()+ReservedPrefix+"login?next="+url.QueryEscape(back), http.StatusSeeOther)
	return true
}

// workspaceNext reads a login's next as the address of a workspace host: this scheme, a host one
// label below the apex, and a path safeNext keeps. It returns that host's origin and the path.
func (p *Proxy) workspaceNext(next string) (origin, path string, ok bool) {
	o := p.opts.Origins
	if o == nil || len(next) > maxNextLen || !strings.HasPrefix(next, o.Scheme+"://") {
		return "", "", false
	}
	u, err := url.Parse(next)
	if err != nil || u.User != nil || u.Opaque != "" || u.Scheme != o.Scheme || !o.Under(u.Host) {
		return "", "", false
	}
	return o.Scheme + "://" + o.NormalizeHost(u.Host), safeNext(u.RequestURI()), true
}

// handoffScript posts the hand-off form as soon as the page loads; the page's CSP allows only
// this script (by its hash), and the form only to the workspace host.
const handoffScript = `document.forms[0].submit()`

var handoffScriptHash = func() string {
	sum := sha256.Sum256([]byte(handoffScript))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

var handoffPage = template.Must(template.New("handoff").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>nogoo9: {{if .Token}}opening your workspace{{else}}logging out{{end}}</title></head>
<body><h1>nogoo9</h1><form method="post" action="{{.Action}}">{{if .Token}}<input type="hidden" name="token" value="{{.Token}}"><input type="hidden" name="next" value="{{.Next}}">
<p>Opening {{.Origin}}{{.Next}}</p>{{else}}<input type="hidden" name="continue" value="1"><p>Logging out of {{.Origin}}</p>{{end}}<button type="submit">Continue</button></form><script>` + handoffScript + `</script></body></html>
`))

// handoffForm answers a page that posts a form to origin's /_nogoo9/ endpoint at once: a login
// (token and next) or, without a token, a logout that comes back to the apex's. The form may go to
// origin only, and to then (the apex, for a logout): browsers apply form-action to the redirects
// after the post too.
func handoffForm(w http.ResponseWriter, origin, then, endpoint, next, token string) {
	h := w.Header()
	h.Set("Referrer-Policy", "strict-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src "+handoffScriptHash+"; form-action "+strings.TrimSpace(origin+" "+then)+"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = handoffPage.Execute(w, struct{ Action, Token, Origin, Next string }{origin + ReservedPrefix + endpoint, token, origin, next})
}

// handOff answers the apex's login (a fresh one, or a valid cookie) for a workspace host: a page
// that posts the token to that host's login at once. The token is in the page, which only this
// origin can read: the apex serves no workspace page. Its referrer policy keeps the Origin header
// of the post (with no-referrer, browsers send "Origin: null"), which the host checks. The apex
// remembers the host, so that its logout logs the host out too (logOutHosts).
func (p *Proxy) handOff(w http.ResponseWriter, r *http.Request, origin, next, token string) {
	o := p.opts.Origins
	label := strings.TrimSuffix(strings.TrimPrefix(origin, o.Scheme+"://"), "."+o.Host)
	hosts := []string{label}
	for _, h := range p.handedHosts(r) {
		if h != label && len(hosts) < maxHandedHosts {
			hosts = append(hosts, h)
		}
	}
	http.SetCookie(w, p.cookie(p.hostsCookieName(), strings.Join(hosts, "."), 0, time.Time{}))
	handoffForm(w, origin, "", "login", next, token)
}

// maxHandedHosts bounds the apex's list of workspace hosts it handed a login to (the most recent
// first); a host pushed out of it keeps its cookie after a logout at the apex, until the token
// expires or the host's own logout.
const maxHandedHosts = 32

// hostsCookieName is the apex's cookie that lists the labels of the hosts it handed a login to.
func (p *Proxy) hostsCookieName() string {
	if p.cookieName == InsecureCookieName {
		return "nogoo9_hosts"
	}
	return "__Host-nogoo9_hosts"
}

// handedHosts reads the apex's list of hosts (labels), keeping only labels of this domain.
func (p *Proxy) handedHosts(r *http.Request) []string {
	o := p.opts.Origins
	v, found, _ := cookieValue(r.Header["Cookie"], p.hostsCookieName())
	if o == nil || !found || v == "" {
		return nil
	}
	var out []string
	for _, l := range strings.SplitN(v, ".", maxHandedHosts+1) {
		if len(out) < maxHandedHosts && o.Under(l+"."+o.Host) {
			out = append(out, l)
		}
	}
	return out
}

// fromApex reports whether r is a form the apex's own pages posted to a workspace host.
func (p *Proxy) fromApex(r *http.Request) bool {
	o := p.opts.Origins
	return o != nil && o.Under(r.Host) && strings.EqualFold(headerFirst(r.Header, "Origin"), o.Apex())
}

// logOutHosts continues a logout across the workspace hosts, after the login cookie of r's host
// is cleared: on the apex, a page that posts a logout to the first host it handed a login to; on
// a workspace host, when the apex posted the logout, back to the apex for the next one. It
// reports false (nothing written) when there is nothing to continue.
func (p *Proxy) logOutHosts(w http.ResponseWriter, r *http.Request, fromApex bool) bool {
	o := p.opts.Origins
	if o == nil {
		return false
	}
	if fromApex {
		http.Redirect(w, r, o.Apex()+ReservedPrefix+"logout?continue=1", http.StatusSeeOther)
		return true
	}
	if o.NormalizeHost(r.Host) != o.Host {
		return false
	}
	return p.nextHostLogout(w, r)
}

// continueLogout is the apex's GET /_nogoo9/logout?continue=1, where each workspace host's
// logout comes back: the next host, or the login form once none is left. Only while the apex
// itself is logged out, so that a link cannot log a signed-in person out of their hosts.
func (p *Proxy) continueLogout(w http.ResponseWriter, r *http.Request) bool {
	o := p.opts.Origins
	if o == nil || o.NormalizeHost(r.Host) != o.Host || r.URL.Query().Get("continue") != "1" {
		return false
	}
	if _, found, _ := cookieValue(r.Header["Cookie"], p.cookieName); found {
		return false
	}
	if p.nextHostLogout(w, r) {
		return true
	}
	http.Redirect(w, r, ReservedPrefix+"login", http.StatusSeeOther)
	return true
}

// nextHostLogout answers the page that posts a logout to the first host of the apex's list, and
// keeps the rest; false when the list is empty.
func (p *Proxy) nextHostLogout(w http.ResponseWriter, r *http.Request) bool {
	hosts := p.handedHosts(r)
	if len(hosts) == 0 {
		return false
	}
	o := p.opts.Origins
	if rest := hosts[1:]; len(rest) > 0 {
		http.SetCookie(w, p.cookie(p.hostsCookieName(), strings.Join(rest, "."), 0, time.Time{}))
	} else {
		http.SetCookie(w, p.cookie(p.hostsCookieName(), "", -1, time.Time{}))
	}
	handoffForm(w, o.Scheme+"://"+hosts[0]+"."+o.Host, o.Apex(), "logout", "", "")
	return true
}

// cookieLogin is the caller of r's login cookie when it is valid, with the token.
func (p *Proxy) cookieLogin(r *http.Request) (string, *auth.Caller) {
	token, found, ambiguous := cookieValue(r.Header["Cookie"], p.cookieName)
	if !found || ambiguous || token == "" {
		return "", nil
	}
	now := monoNow()
	if c := p.tokens.get(token, now); c != nil {
		return token, c
	}
	c, err := p.verify(r, token)
	if err != nil {
		return "", nil
	}
	p.tokens.put(token, c, now)
	return token, c
}

// serveHostLogin is /_nogoo9/login on a workspace host. It never shows a form (a page of this
// origin could read what is typed into it): GET goes to the apex's login. POST takes a token only
// from a page of the apex's origin (the hand-off), sets this host's cookie and redirects to next.
func (p *Proxy) serveHostLogin(w http.ResponseWriter, r *http.Request) {
	o := p.opts.Origins
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		back := o.Scheme + "://" + o.NormalizeHost(r.Host) + safeNext(r.URL.Query().Get("next"))
		http.Redirect(w, r, o.Apex()+ReservedPrefix+"login?next="+url.QueryEscape(back), http.StatusSeeOther)
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "405 Method Not Allowed: log in at "+o.Apex()+ReservedPrefix+"login", http.StatusMethodNotAllowed)
		return
	}
	if origin := headerFirst(r.Header, "Origin"); !strings.EqualFold(origin, o.Apex()) {
		p.log.Info("workspace host login refused: not posted by the login page", "origin", origin, "host", r.Host, "remote", r.RemoteAddr)
		http.Error(w, "403 Forbidden: a workspace host takes a login only from "+o.Apex()+ReservedPrefix+"login; log in there", http.StatusForbidden)
		return
	}
	if !readLoginForm(w, r) {
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	token := strings.TrimSpace(r.PostForm.Get("token"))
	caller, err := p.verify(r, token)
	if token == "" || err != nil {
		if err == nil {
			err = auth.ErrNoToken
		}
		p.log.Info("workspace host login refused", "host", r.Host, "remote", r.RemoteAddr, "reason", err.Error())
		status, msg := auth.LoginRefused(w, err)
		http.Error(w, msg+" Log in again at "+o.Apex()+ReservedPrefix+"login.", status)
		return
	}
	http.SetCookie(w, p.cookie(p.cookieName, token, 0, caller.Expiry))
	w.Header().Set("Location", next)
	w.WriteHeader(http.StatusSeeOther)
}
