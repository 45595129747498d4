package api

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// crossOrigin refuses state-changing requests that a browser marks as cross-site (Origin of
// another host, or Sec-Fetch-Site: cross-site): a page on any other origin, a workspace's
// included, can never make a signed-in user's browser change anything here. Requests without
// those headers come from non-browser clients and pass.
func crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctrl.LoggerFrom(r.Context()).WithName("api").Info("request refused: cross-origin",
			"method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"), "secFetchSite", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		writeJSON(w, http.StatusForbidden, errorBody{
			Error: fmt.Sprintf("Forbidden: a cross-origin browser request (Origin %s, Sec-Fetch-Site %s) may not change state; call the API from a client with a bearer token, not from a web page on another origin",
				workspace.Quote(r.Header.Get("Origin")), workspace.Quote(r.Header.Get("Sec-Fetch-Site"))),
			Code: "CrossOrigin"})
	}))
	return cop.Handler(next)
}

// hostPolicy is the MCP transport's DNS-rebinding defence: a browser tricked into sending a
// request for an attacker's name to nogoo9's address carries that name in Host (and its origin
// in Origin), so only names that are nogoo9's own are accepted.
type hostPolicy struct {
	any   bool
	names []string // lower-case host or host:port
}

func newHostPolicy(publicURL string, extra []string) hostPolicy {
	var p hostPolicy
	if u, err := url.Parse(publicURL); err == nil && u.Host != "" {
		p.names = append(p.names, strings.ToLower(u.Host), strings.ToLower(u.Hostname()))
	}
	for _, h := range extra {
		h = strings.ToLower(strings.TrimSpace(h))
		switch h {
		case "":
		case "*":
			p.any = true
		default:
			p.names = append(p.names, h)
		}
	}
	return p
}

// allowed reports whether hostport (a Host header, or an origin's host) is nogoo9's own:
// a loopback name or address (any port), a cluster-internal Service name (*.svc,
// *.svc.cluster.local, any port), or a configured name (host alone: any port; host:port: that
// port only).
func (p hostPolicy) allowed(hostport string) bool {
	if p.any {
		return true
	}
	hostport = strings.ToLower(hostport)
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, ".svc.cluster.local") {
		return true
	}
	return slices.Contains(p.names, hostport) || slices.Contains(p.names, host)
}

// protect answers 403 to a request whose Host, or Origin when present, is not allowed.
func (p hostPolicy) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.allowed(r.Host) {
			p.refuse(w, r, fmt.Sprintf("Forbidden: Host %s is not a name of this MCP endpoint; if it is yours, add it to --mcp-allowed-hosts (or set --public-url)", workspace.Quote(r.Host)))
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || !p.allowed(u.Host) {
				p.refuse(w, r, fmt.Sprintf("Forbidden: Origin %s is not allowed to call this MCP endpoint; if it is yours, add its host to --mcp-allowed-hosts", workspace.Quote(o)))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (p hostPolicy) refuse(w http.ResponseWriter, r *http.Request, msg string) {
	ctrl.LoggerFrom(r.Context()).WithName("api").Info("MCP request refused: host or origin not allowed",
		"host", r.Host, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusForbidden, errorBody{Error: msg, Code: "HostNotAllowed"})
}

// metadata serves RFC 9728 protected-resource metadata: one document for the API as a whole
// (/.well-known/oauth-protected-resource) and one for the MCP endpoint
// (/.well-known/oauth-protected-resource/mcp, where MCP clients look first).
type metadata struct {
	publicURL string
	issuer    string
}

func newMetadata(publicURL, issuer string) metadata {
	return metadata{publicURL: strings.TrimSuffix(publicURL, "/"), issuer: issuer}
}

// base is the externally visible base URL: --public-url, else the scheme and Host r came with.
func (m metadata) base(r *http.Request) string {
	if m.publicURL != "" {
		return m.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// url returns the function naming the metadata document of the resource at path ("" for the
// API's root, "/mcp").
func (m metadata) url(path string) func(*http.Request) string {
	return func(r *http.Request) string { return m.base(r) + "/.well-known/oauth-protected-resource" + path }
}

func (m metadata) handler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Public, read-only discovery data (RFC 9728 section 3): any origin may read it.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Methods", "GET, OPTIONS")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "use GET to read the protected-resource metadata", Code: "MethodNotAllowed"})
			return
		}
		md := oauthex.ProtectedResourceMetadata{
			Resource:               m.base(r) + path,
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "nogoo9",
		}
		if m.issuer != "" {
			md.AuthorizationServers = []string{m.issuer}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_ = json.NewEncoder(w).Encode(md)
	})
}

// noStore makes every answer of next Cache-Control: no-store: an answer to a bearer token is that
// caller's data (their workspaces, their identity, an admin's view of everyone's), and no browser
// cache or proxy may keep a copy for the next person to read (RFC 9111 section 5.2.2.5). The
// value is set as the header goes out, so no handler can weaken it (the MCP SDK's event streams
// say no-cache); a no-transform a handler set stays. A handler already inside noStore is served
// as is.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*noStoreWriter); ok {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&noStoreWriter{ResponseWriter: w}, r)
	})
}

// noStoreWriter sets Cache-Control: no-store on the header it writes.
type noStoreWriter struct {
	http.ResponseWriter
	sent bool
}

func (w *noStoreWriter) mark() {
	if w.sent {
		return
	}
	h := w.ResponseWriter.Header()
	v := "no-store"
	if strings.Contains(strings.ToLower(h.Get("Cache-Control")), "no-transform") {
		v += ", no-transform"
	}
	h.Set("Cache-Control", v)
}

func (w *noStoreWriter) WriteHeader(code int) {
	w.mark()
	// An informational answer (1xx) is followed by the real one, which is marked again.
	w.sent = code >= 200
	w.ResponseWriter.WriteHeader(code)
}

func (w *noStoreWriter) Write(b []byte) (int, error) {
	w.mark()
	w.sent = true
	return w.ResponseWriter.Write(b)
}

// Flush keeps event streams flushing (the REST events follow and the MCP SDK ask for
// http.Flusher); a flush before any write sends the header, so it is marked first.
func (w *noStoreWriter) Flush() {
	w.mark()
	w.sent = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// FlushError is Flush reporting a failed write (what http.ResponseController.Flush calls): a
// follow's heartbeat learns that its client went away.
func (w *noStoreWriter) FlushError() error {
	w.mark()
	w.sent = true
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer (deadlines).
func (w *noStoreWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
