package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/http/httpguts"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Authenticator is what the proxy needs from pkg/auth: the front end's authenticator satisfies it.
// When it also has VerifyToken(ctx, token) (auth.Authenticator does), the login page uses that.
type Authenticator interface {
	Authenticate(r *http.Request) (*auth.Caller, error)
}

type tokenVerifier interface {
	VerifyToken(ctx context.Context, token string) (*auth.Caller, error)
}

// Proxy is the workspace proxy: an http.Handler plus the route table fed by pod events, and a
// manager Runnable that serves it.
type Proxy struct {
	opts Options
	// activity records nogoo9/last-activity (nil when off).
	activity  *activityRecorder
	authn     Authenticator
	router    *router
	conns     *connRegistry
	transport *syncTransport
	// forward is what ReverseProxy uses: transport, or its fallback with StandardTransport.
	forward http.RoundTripper
	bufPool *bufferPool
	// cookieName is the login cookie: CookieName, or InsecureCookieName with InsecureCookie.
	cookieName string
	// csrf guards the login and logout forms against cross-origin posts.
	csrf *http.CrossOriginProtection
	// fast forwards plain requests without ReverseProxy (forward.go).
	fast bool
	// lean is the connection loop serving plain requests while Start runs (server.go); nil with
	// StandardServer. watchAfter overrides its defaultWatchAfter (tests).
	lean       atomic.Pointer[leanServer]
	watchAfter time.Duration
	tokens     *tokenCache
	log        logr.Logger
	errorLog   *log.Logger
	// synced, when set, is waited for before the proxy listens: until the informer has listed
	// the pods, every workspace would look missing. Its signal, not a poll: the replica's start-up
	// gate opens on the same handler's signal, and a poll's 100 ms put the listen after readiness.
	synced toolscache.DoneChecker
	// listening is closed once the proxy's listener is bound (Setup's readiness check).
	listening     chan struct{}
	listeningOnce sync.Once
}

// New builds a proxy. Feed it pods with PodChanged and PodDeleted (Setup does that from the
// manager's informer) and serve it with Start or as an http.Handler.
func New(authn Authenticator, opts Options) (*Proxy, error) {
	if authn == nil {
		return nil, fmt.Errorf("proxy: no authenticator: the proxy never serves a private workspace without one")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	lg := ctrl.Log.WithName("proxy")
	p := &Proxy{
		opts:       opts,
		listening:  make(chan struct{}),
		authn:      authn,
		conns:      newConnRegistry(lg),
		bufPool:    newBufferPool(),
		tokens:     newTokenCache(opts.AuthCacheTTL),
		cookieName: CookieName,
		csrf:       http.NewCrossOriginProtection(),
		log:        lg,
		errorLog:   log.New(logWriter{lg}, "", 0),
	}
	dialer := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	fallback := &http.Transport{
		Proxy:                  nil, // pods are reached directly, never through HTTP_PROXY
		DialContext:            dialer.DialContext,
		MaxIdleConnsPerHost:    opts.MaxIdleConnsPerPod,
		IdleConnTimeout:        idleConnTimeout,
		ResponseHeaderTimeout:  max(opts.ResponseHeaderTimeout, 0),
		MaxResponseHeaderBytes: opts.MaxResponseHeaderBytes,
		ExpectContinueTimeout:  time.Second,
		// Pass encodings through untouched: the browser and the workspace negotiate them.
		DisableCompression: true,
		WriteBufferSize:    16 << 10,
		ReadBufferSize:     16 << 10,
	}
	limits := responseLimits{
		headerTimeout:  max(opts.ResponseHeaderTimeout, 0),
		maxHeaderBytes: opts.MaxResponseHeaderBytes,
		max1xx:         opts.Max1xxResponses,
	}
	std := &limit1xx{next: fallback, max: opts.Max1xxResponses}
	p.transport = newSyncTransport(std, dialer.DialContext, limits, opts.MaxIdleConnsPerPod, idleConnTimeout)
	p.forward = p.transport
	if opts.StandardTransport {
		p.forward = std
	}
	p.fast = !opts.StandardTransport && !opts.NoFastPath
	if opts.InsecureCookie {
		p.cookieName = InsecureCookieName
	}
	p.router = newRouter(opts.NotReadyGrace, p.conns, p.newReverseProxy, lg)
	p.activity = newActivityRecorder(opts.Activity, p.router.pod, p.conns, lg)
	return p, nil
}

// PodChanged tells the proxy about a new or changed workspace pod: the informer's
// *podcache.Pod, or a *corev1.Pod (reduced as the cache reduces it).
func (p *Proxy) PodChanged(pod any) {
	c := podcache.Of(pod)
	if c == nil {
		return
	}
	p.router.upsert(c)
	p.activity.observe(c)
}

// PodDeleted tells the proxy a workspace pod (either type) is gone; its WebSockets are closed at
// once.
func (p *Proxy) PodDeleted(pod any) {
	c := podcache.Of(pod)
	if c == nil {
		return
	}
	p.router.remove(c)
	p.activity.forget(c.UID)
}

// OpenWebSockets is the number of upgraded connections open to the pod with uid (for tests and
// the benchmark's cutover figure).
func (p *Proxy) OpenWebSockets(uid string) int { return p.conns.count(typesUID(uid)) }

// ServeHTTP routes one request. The order is: own endpoints, route lookup on the cleaned path,
// authentication and authorization (unless a public preview; also before the trailing-slash
// redirect), phase, WebSocket origin, forward (the fast path for plain requests, else the
// route's ReverseProxy).
//
// On the lean loop, r's header map may lack the fields lazyField names (nothing on the way to
// the fast path reads them): every other path makes it whole first (wholeHeader).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != http.NoBody && r.Body != nil && p.opts.RequestBodyTimeout > 0 {
		// net/http's server only: the lean loop serves no request with a body.
		var b *bodyWatch
		if r, b = p.watchBody(w, r); b != nil {
			defer b.finish()
		}
	}
	if strings.HasPrefix(r.URL.Path, ReservedPrefix) {
		wholeHeader(w, r)
		p.serveOwn(w, r)
		return
	}
	clean := cleanPath(r.URL.Path)
	var t *target
	if p.opts.Origins == nil {
		t = p.router.lookup(clean)
	} else if t = p.originRoute(w, r, clean); t == noRoute {
		return // answered
	}
	if t == nil {
		wholeHeader(w, r)
		p.serveNoRoute(w, r, clean)
		return
	}
	if !t.public {
		caller, err := p.authenticate(w, r)
		if err != nil {
			wholeHeader(w, r)
			p.unauthorized(w, r, err)
			return
		}
		if !p.authorize(w, caller, t, clean) {
			return
		}
	}
	if t.status.Phase == workspace.PhaseStopped {
		wholeHeader(w, r)
		p.serveStopped(w, r, t)
		return
	}
	if msg, bad := t.unavailable(); bad {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "503 Service Unavailable: "+msg, http.StatusServiceUnavailable)
		return
	}
	if headerFirst(r.Header, "Upgrade") != "" && !originAllowed(r.Header.Get("Origin"), r.Host, p.opts.AllowedOrigins) {
		p.log.Info("WebSocket refused: origin not allowed", "origin", r.Header.Get("Origin"), "host", r.Host, "path", clean)
		http.Error(w, "403 Forbidden: WebSocket origin "+r.Header.Get("Origin")+" is not allowed: add it to --proxy-allowed-origins", http.StatusForbidden)
		return
	}

	// Only a person's requests are activity: an anonymous one to a public preview could come from
	// anyone, the workspace's own process included, and would keep it from ever being idle.
	if !t.public {
		p.activity.touch(t.ws, t.podUID, r)
	}

	// The handler owns r from here: rewrite its path in place rather than cloning the request.
	// RawPath (set only when the path has escapes such as %2F) is kept when it still spells the
	// matched prefix, otherwise the decoded, cleaned path is forwarded.
	raw := r.URL.RawPath
	if raw != "" && (clean != r.URL.Path || !strings.HasPrefix(raw, t.prefix)) {
		raw = ""
	}
	if t.strip {
		r.URL.Path = clean[len(t.prefix)-1:]
		if raw != "" {
			raw = raw[len(t.prefix)-1:]
		}
	} else {
		r.URL.Path = clean
	}
	r.URL.RawPath = raw
	if p.fast && fastEligible(r) {
		p.forwardFast(w, r, t)
		return
	}
	wholeHeader(w, r)
	t.reverseProxy(p.router.newRP).ServeHTTP(w, r) // made at the route's first request
}

// serveNoRoute answers a path no route covers: a redirect to the route's prefix when the path
// is a prefix without its trailing slash, else 404. The redirect is decided after authentication
// and authorization, exactly like a request inside the workspace, so it tells a caller no more than
// that request would: 401 without a valid token, 403 for someone else's workspace, 308 for the
// owner and admins (and for anyone on a public preview).
func (p *Proxy) serveNoRoute(w http.ResponseWriter, r *http.Request, clean string) {
	var rt *target
	if !strings.HasSuffix(clean, "/") {
		rt = p.router.route(clean + "/")
	}
	if rt == nil || !rt.public {
		caller, err := p.authenticate(w, r)
		if err != nil {
			p.unauthorized(w, r, err)
			return
		}
		if rt == nil {
			http.Error(w, "404 Not Found: no workspace is served at "+clean, http.StatusNotFound)
			return
		}
		if !p.authorize(w, caller, rt, clean) {
			return
		}
	}
	loc := rt.prefix
	if o := p.opts.Origins; o != nil {
		if host := o.HostFor(rt.ws.namespace, rt.ws.id, rt.kind == kindPreview); o.NormalizeHost(r.Host) != host {
			loc = o.Scheme + "://" + host + loc
		}
	}
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, loc, http.StatusPermanentRedirect)
}

// authorize lets the workspace's owner and admins through; anyone else gets 403.
func (p *Proxy) authorize(w http.ResponseWriter, caller *auth.Caller, t *target, clean string) bool {
	if caller.Subject == t.owner || caller.IsAdmin {
		return true
	}
	p.log.V(1).Info("request refused: not the owner", "subject", caller.Subject, "workspace", t.ws.String(), "path", clean)
	http.Error(w, "403 Forbidden: workspace "+t.ws.id+" belongs to another user", http.StatusForbidden)
	return false
}

// idleConnTimeout is how long a kept-alive connection to a pod may stay idle before the proxy
// closes it.
const idleConnTimeout = 90 * time.Second

// newReverseProxy is the ReverseProxy of one target; all share the Transport and buffer pool.
func (p *Proxy) newReverseProxy(t *target) *httputil.ReverseProxy {
	if t.addr == "" || t.problem != "" {
		return nil // never forwarded: unavailable() answers first
	}
	addr, strip, uid, ws, person := t.addr, t.strip, t.podUID, t.ws, !t.public
	fwdPrefix := []string{strings.TrimSuffix(t.prefix, "/")}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = addr
			// Keep the browser's Host: apps such as Jupyter compare it with Origin on WebSockets.
			pr.Out.Host = pr.In.Host
			h := pr.Out.Header
			setXForwarded(h, pr.In)
			if strip {
				h["X-Forwarded-Prefix"] = fwdPrefix // read-only, shared by every request
			}
			// Never hand the caller's nogoo9 credentials to the workspace.
			delete(h, "Authorization")
			if c, ok := h["Cookie"]; ok {
				stripCookie(h, c)
			}
		},
		Transport:     p.forward,
		FlushInterval: -1,
		BufferPool:    p.bufPool,
		ErrorLog:      p.errorLog,
		ErrorHandler:  p.errorHandler,
		ModifyResponse: func(res *http.Response) error {
			if err := badStatus(res.StatusCode); err != nil {
				return err // net/http's Transport hands such an answer on
			}
			if err := p.filterResponseHeaders(res.Header, res.Request); err != nil {
				return err
			}
			if res.StatusCode != http.StatusSwitchingProtocols {
				return nil
			}
			// ReverseProxy checks the switch only after this function, and leaves the body of one
			// it refuses open: refused here, before the connection is tracked, the body is closed
			// (ReverseProxy closes it on an error from here) and the client gets a 502.
			if err := switchRefused(res); err != nil {
				return err
			}
			rwc, ok := res.Body.(io.ReadWriteCloser)
			if !ok {
				return nil // ReverseProxy reports it
			}
			c := p.conns.track(uid, rwc, person) // only a person's WebSocket is activity
			res.Body = c
			if !p.router.podAlive(ws, uid) {
				// The pod went away while the handshake was in flight.
				_ = c.Close()
			}
			return nil
		},
	}
}

// switchRefused is ReverseProxy's check of a 101 answer (handleUpgradeResponse), made before the
// answer's connection is tracked: the answer must name, in Connection and Upgrade, the protocol
// the request asked for (printable ASCII, in any case). ReverseProxy returns without closing the
// body of a switch it refuses, so a tracked one would stay in the registry (and count as an open
// WebSocket) until its pod is deleted.
func switchRefused(res *http.Response) error {
	var want string
	if res.Request != nil {
		want = upgradeType(res.Request.Header)
	}
	got := upgradeType(res.Header)
	if got == "" || !printableASCII(got) || !asciiEqualFold(got, want) {
		if len(got) > maxQuotedProtocol {
			got = got[:maxQuotedProtocol] + "..." // the pod's bytes, in the client's answer
		}
		return &boundError{fmt.Sprintf("the workspace pod switched to protocol %q when %q was asked for", got, want)}
	}
	return nil
}

// maxQuotedProtocol bounds how much of a refused Upgrade value the 502 and the log quote.
const maxQuotedProtocol = 64

// upgradeType is the protocol h's Upgrade names when its Connection lists "upgrade"
// (ReverseProxy's rule).
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Read-only header values shared by every request.
var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// setXForwarded does what httputil.ProxyRequest.SetXForwarded does (ReverseProxy has already
// removed the client's own X-Forwarded-* headers) with one allocation instead of three.
func setXForwarded(h http.Header, in *http.Request) {
	if in.TLS == nil {
		h["X-Forwarded-Proto"] = protoHTTP
	} else {
		h["X-Forwarded-Proto"] = protoHTTPS
	}
	clientIP, _, err := net.SplitHostPort(in.RemoteAddr)
	if err != nil {
		h["X-Forwarded-Host"] = []string{in.Host}
		return
	}
	v := [2]string{in.Host, clientIP}
	s := v[:]
	h["X-Forwarded-Host"] = s[0:1:1]
	h["X-Forwarded-For"] = s[1:2:2]
}

// stripCookie removes nogoo9's cookies from the Cookie header values, keeping the workspace's
// own cookies.
func stripCookie(h http.Header, values []string) {
	if !containsCookie(values) {
		return
	}
	kept := keptCookies(values)
	if len(kept) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = kept
}

// keptCookies is values without nogoo9's cookies (nil when nothing is left).
func keptCookies(values []string) []string {
	var kept []string
	for _, line := range values {
		var parts []string
		for _, c := range strings.Split(line, ";") {
			c = strings.TrimSpace(c)
			name, _, _ := strings.Cut(c, "=")
			if c != "" && !reservedCookieName(name) {
				parts = append(parts, c)
			}
		}
		if len(parts) > 0 {
			kept = append(kept, strings.Join(parts, "; "))
		}
	}
	return kept
}

// containsCookie is a quick test that values may hold one of nogoo9's cookies: they all contain
// "nogoo9" in some case.
func containsCookie(values []string) bool {
	for _, v := range values {
		if containsFold(v, cookieMark) {
			return true
		}
	}
	return false
}

// cookieMark is in the name of every cookie nogoo9 owns.
const cookieMark = "nogoo9"

// containsFold reports whether s contains the ASCII word sub in any case, without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// reservedCookieName reports whether name is one of nogoo9's cookie names, today's or a future
// one: "nogoo9...", "__Host-nogoo9..." or "__Secure-nogoo9...", in any case (browsers match the
// prefixes case-insensitively), ignoring the white space browsers trim.
func reservedCookieName(name string) bool {
	name = strings.TrimSpace(name)
	for _, pre := range [...]string{"__host-", "__secure-"} {
		if len(name) >= len(pre) && strings.EqualFold(name[:len(pre)], pre) {
			name = name[len(pre):]
			break
		}
	}
	return len(name) >= len(cookieMark) && strings.EqualFold(name[:len(cookieMark)], cookieMark)
}

// setsReservedCookie reports whether a Set-Cookie value would set a cookie a server reads as
// one of nogoo9's. A nameless cookie ("=nogoo9_token=x", or "nogoo9_token" without "=") is sent
// back as its bare value, which servers parse as a name: those count too.
func setsReservedCookie(v string) bool {
	pair, _, _ := strings.Cut(v, ";")
	name, value, found := strings.Cut(pair, "=")
	if found && strings.TrimSpace(name) == "" {
		name, _, _ = strings.Cut(value, "=")
	}
	return reservedCookieName(name)
}

func tooManyCookiesError(max int) error {
	return &boundError{fmt.Sprintf("the workspace pod sent more than %d Set-Cookie headers in one response", max)}
}

// filterSetCookies removes the Set-Cookie values that would set one of nogoo9's cookies, and
// refuses an answer with more than max of them (a flood meant to push nogoo9's cookie out of the
// browser's jar). It returns vv itself, not a copy, when nothing is removed.
func filterSetCookies(vv []string, max int) ([]string, error) {
	if len(vv) > max {
		return nil, tooManyCookiesError(max)
	}
	for i, v := range vv {
		if !setsReservedCookie(v) {
			continue
		}
		kept := append(make([]string, 0, len(vv)-1), vv[:i]...)
		for _, v := range vv[i+1:] {
			if !setsReservedCookie(v) {
				kept = append(kept, v)
			}
		}
		return kept, nil
	}
	return vv, nil
}

// originWide are the answer fields whose effect reaches past the workspace's own paths, over the
// whole proxy origin (or its site): a workspace's answer never carries them to the browser.
//   - Service-Worker-Allowed widens the scope a service worker script may claim: with "/", a
//     workspace page registers a worker that controls every page of the proxy's origin,
//     /_nogoo9/login (where a person pastes an API token) included, and persists.
//   - Clear-Site-Data "cookies" deletes every cookie of the registrable domain, HttpOnly and
//     __Host- ones included: the proxy's and the UI's sessions end, the way open to planting
//     another session.
var originWide = [...]string{"Service-Worker-Allowed", "Clear-Site-Data"}

// dropOriginWide removes originWide's fields from h (canonical keys: http.Header's own, and the
// quick parsers').
func dropOriginWide(h http.Header) {
	for _, k := range originWide {
		delete(h, k)
	}
}

// filterResponseHeaders removes the fields of a workspace's answer that reach past the workspace
// (originWide) and applies filterSetCookies to h in place.
func (p *Proxy) filterResponseHeaders(h http.Header, r *http.Request) error {
	dropOriginWide(h)
	sc, ok := h["Set-Cookie"]
	if !ok {
		return nil
	}
	kept, err := filterSetCookies(sc, p.opts.MaxSetCookies)
	if err != nil {
		return err
	}
	if len(kept) == len(sc) {
		return nil
	}
	p.log.Info("Set-Cookie of a nogoo9 cookie removed from a workspace's answer", "path", r.URL.Path, "removed", len(sc)-len(kept))
	if len(kept) == 0 {
		delete(h, "Set-Cookie")
	} else {
		h["Set-Cookie"] = kept
	}
	return nil
}

// errorHandler answers 502 with a short reason when the pod cannot be reached, and 408 when
// the request failed because its body stalled (bodytimeout.go).
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if bodyStalled(r) {
		// Checked first: the stalled read cancelled the request's context too.
		p.log.Info("request body stalled", "host", r.URL.Host, "path", r.URL.Path, "timeout", p.opts.RequestBodyTimeout.String())
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("408 Request Timeout: no byte of the request body arrived for %s", p.opts.RequestBodyTimeout), http.StatusRequestTimeout)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client went away; nobody reads an answer
	}
	reason := "the workspace pod did not answer"
	var ne net.Error
	var be *boundError
	switch {
	case errors.As(err, &be):
		reason = be.reason
	case strings.Contains(err.Error(), "server response headers exceeded"): // net/http's Transport
		reason = headerBytesError(p.opts.MaxResponseHeaderBytes).Error()
	case strings.Contains(err.Error(), "no response headers within") || strings.Contains(err.Error(), "timeout awaiting response headers"):
		reason = fmt.Sprintf("the workspace pod sent no response headers within %s", p.opts.ResponseHeaderTimeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "the workspace pod refused the connection: its server is not listening (yet) on the route's port"
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		reason = "the workspace pod did not answer in time"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		reason = "the workspace pod closed the connection before answering"
	}
	p.log.Info("proxy error", "host", r.URL.Host, "path", r.URL.Path, "reason", reason, "error", err.Error())
	http.Error(w, "502 Bad Gateway: "+reason, http.StatusBadGateway)
}

// authenticate verifies the caller's token (the Authorization header, else the proxy's login
// cookie), remembering the answer for AuthCacheTTL.
func (p *Proxy) authenticate(w http.ResponseWriter, r *http.Request) (*auth.Caller, error) {
	token, err := p.credentials(r)
	if err != nil {
		return nil, err
	}
	now := monoNow() // before the verification: an entry's lifetime starts no later (clock.go)
	if c := p.tokens.get(token, now); c != nil {
		return c, nil
	}
	c, err := p.verify(r, token) // the token alone: verify reads no other header
	if err != nil {
		return nil, err
	}
	p.tokens.put(token, c, now)
	return c, nil
}

// wholeHeader makes r's header map whole when the lean loop's parser left out of it the fields
// nothing on the way to the fast path reads (lazyField, quickReq.wholeHeader).
func wholeHeader(w http.ResponseWriter, r *http.Request) {
	if lw, ok := w.(*leanResponse); ok && lw.lc.quick.partial && r == lw.lc.quick.req {
		lw.lc.quick.wholeHeader()
	}
}

// errTwoCookies: a second login cookie with another value can only come from someone trying to
// shadow the real one, so neither is trusted.
var errTwoCookies = &auth.Error{Reason: "two different nogoo9 login cookies were sent: log out at " + ReservedPrefix + "logout and log in again"}

// credentials is the bearer token of r: the Authorization header, else the proxy's own login
// cookie (the proxy reads it itself: pkg/auth takes tokens from the Authorization header only).
func (p *Proxy) credentials(r *http.Request) (string, error) {
	if h := r.Header["Authorization"]; len(h) > 0 {
		scheme, token, ok := strings.Cut(strings.TrimSpace(h[0]), " ")
		if token = strings.TrimSpace(token); !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return "", &auth.Error{Reason: `malformed Authorization header: use "Bearer <token>"`}
		}
		return token, nil
	}
	v, found, ambiguous := cookieValue(r.Header["Cookie"], p.cookieName)
	if ambiguous {
		return "", errTwoCookies
	}
	if found && v != "" {
		return v, nil
	}
	return "", auth.ErrNoToken
}

// cookieValue finds the cookie name in the Cookie header lines without allocating. ambiguous is
// true when it appears twice with different values.
func cookieValue(lines []string, name string) (value string, found, ambiguous bool) {
	for _, line := range lines {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			// Only the blanks a Cookie header may hold: strings.TrimSpace would also cut Unicode
			// spaces, and a page can set "\u2000__Host-nogoo9_token" (no prefix rules, so with
			// Domain= or on a path) that would then read as the login cookie.
			k, v, ok := strings.Cut(trimBlanks(part), "=")
			if !ok || k != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if found && v != value {
				ambiguous = true
			}
			value, found = v, true
		}
	}
	return value, found, ambiguous
}

func (p *Proxy) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	reason := "invalid token"
	var ae *auth.Error
	if errors.As(err, &ae) {
		reason = ae.Reason
	}
	p.log.V(1).Info("request refused: authentication failed", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
	status, retry := auth.Status(err)
	if status == http.StatusUnauthorized && p.loginRedirect(w, r) {
		return
	}
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nogoo9"`)
	}
	http.Error(w, fmt.Sprintf("%d %s: %s; browsers log in at %slogin", status, http.StatusText(status), reason, ReservedPrefix), status)
}

// originAllowed is the cross-site WebSocket hijacking check: a browser always sends Origin on a
// WebSocket handshake, and it must be the proxy's own origin or one of allowed. A request without
// Origin comes from a non-browser client, which carries no ambient cookie, and is allowed.
func originAllowed(origin, host string, allowed []string) bool {
	if origin == "" {
		return true
	}
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(a, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// bufferPool is the ReverseProxy copy buffer pool: 32 KiB buffers reused across requests. It
// pools array pointers, so neither Get nor Put allocates.
type bufferPool struct{ p sync.Pool }

const copyBufSize = 32 << 10

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([copyBufSize]byte) }}}
}

func (b *bufferPool) Get() []byte { return b.p.Get().(*[copyBufSize]byte)[:] }

func (b *bufferPool) Put(x []byte) {
	if cap(x) == copyBufSize {
		b.p.Put((*[copyBufSize]byte)(x[:copyBufSize]))
	}
}

// logWriter sends ReverseProxy's own log lines (rare) to logr.
type logWriter struct{ log logr.Logger }

func (l logWriter) Write(b []byte) (int, error) {
	l.log.Info("http", "message", strings.TrimSpace(string(b)))
	return len(b), nil
}
