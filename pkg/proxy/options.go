package proxy

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nogoo9/no-crd/pkg/connlimit"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Options configure the proxy. The zero value plus a BindAddress is usable: Defaults fills in the
// rest.
type Options struct {
	// BindAddress is where the proxy listens (--proxy-bind-address), e.g. ":8091".
	BindAddress string
	// Listener, when set, is used instead of listening on BindAddress (tests, benchmarks).
	Listener net.Listener
	// AllowedOrigins lists the extra origins ("https://ide.example.com") allowed to open WebSockets;
	// the proxy's own origin (Origin host equal to the request Host) is always allowed. "*" allows
	// every origin and turns off the cross-site WebSocket hijacking check.
	AllowedOrigins []string
	// NotReadyGrace is how long a pod may be not-ready before the WebSockets opened on it are
	// closed. Deleted pods close their WebSockets at once.
	NotReadyGrace time.Duration
	// InsecureCookie drops the Secure attribute from the login cookie and with it the __Host-
	// prefix (InsecureCookieName instead of CookieName), for plain-HTTP development on loopback
	// only.
	InsecureCookie bool
	// Origins, when set (--proxy-workspace-domain), serves each workspace route on its own host,
	// "<label>.<apex>" (workspace.Origins), so that its pages are an origin of their own; the apex
	// host serves only the login, which hands the token to a workspace's host (origins.go). Nil:
	// every route on every host, one origin for all (path-based routing).
	Origins *workspace.Origins
	// AuthCacheTTL is how long a verified token is remembered (never past the token's own expiry),
	// so a request costs a map lookup instead of a signature check or a TokenReview. 0 selects
	// the default; a negative value disables the cache.
	AuthCacheTTL time.Duration
	// DialTimeout bounds connecting to a workspace pod.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds waiting for a pod's response headers (generous: dev servers
	// can be slow to compile on the first request). 0 selects the default; a negative value waits
	// as long as the client does.
	ResponseHeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds the bytes a pod may send before its response headers end
	// (informational answers included); 0 selects the default.
	MaxResponseHeaderBytes int64
	// Max1xxResponses bounds the informational answers (103 Early Hints, ...) a pod may send
	// before the final one; 0 selects the default.
	Max1xxResponses int
	// MaxSetCookies bounds the Set-Cookie headers of one response; a pod that sends more gets the
	// client a 502. 0 selects the default.
	MaxSetCookies int
	// MaxConnsPerClient caps the connections one client IP may hold open to the proxy; over it a
	// connection gets a 429 and is closed. 0 selects the default; a negative value disables it
	// (for example behind an ingress that is the only client and enforces its own limits).
	MaxConnsPerClient int
	// RequestBodyTimeout bounds each wait for more of a request body (nginx's
	// client_body_timeout): a client that sends nothing for this long while the proxy reads its
	// body gets 408 and loses the connection, and the pod connection the body was going to is
	// closed. The whole body may take any time as long as bytes keep coming. 0 selects the
	// default; a negative value waits as long as the client likes.
	RequestBodyTimeout time.Duration
	// MaxIdleConnsPerPod is the keep-alive pool per pod address. A small pool makes a busy proxy
	// open and close a connection per request (the standard library's default of 2 costs 3x).
	MaxIdleConnsPerPod int
	// StandardTransport forwards every request through net/http's Transport instead of the
	// proxy's synchronous HTTP/1.1 transport: an escape hatch, and the benchmark's comparison row.
	StandardTransport bool
	// StandardServer serves every request with net/http's server instead of the proxy's own
	// connection loop for plain requests (server.go): an escape hatch, and a benchmark row.
	StandardServer bool
	// NoFastPath sends plain requests through httputil.ReverseProxy too, instead of writing them
	// straight from the incoming request (forward.go): an escape hatch, and a benchmark row.
	NoFastPath bool
	// NoRawAnswer parses a pod's answer into the client response's header map on the lean loop
	// instead of copying its header lines as they are (the raw answer, response.go): for tests
	// and benchmarks that compare the two.
	NoRawAnswer bool
	// Activity records what people do through the proxy as nogoo9/last-activity (idle culling);
	// without a Writer nothing is recorded.
	Activity ActivityOptions
	// UIURL is the web UI's base URL: the page for a stopped workspace links to its page there
	// (the Start button). Empty: the page names the API call and kubectl command only.
	UIURL string
}

// Defaults for the zero fields of Options.
const (
	DefaultNotReadyGrace      = 10 * time.Second
	DefaultAuthCacheTTL       = 30 * time.Second
	DefaultDialTimeout        = 5 * time.Second
	DefaultMaxIdleConnsPerPod = 256
	// DefaultResponseHeaderTimeout lets a dev server compile for two minutes before its first
	// answer.
	DefaultResponseHeaderTimeout = 2 * time.Minute
	// DefaultMaxResponseHeaderBytes is net/http's server default (http.DefaultMaxHeaderBytes).
	DefaultMaxResponseHeaderBytes = 1 << 20
	// DefaultMax1xxResponses leaves room for a few Early Hints and 102 Processing answers.
	DefaultMax1xxResponses = 10
	// DefaultMaxSetCookies is far above what one answer of a real application sets.
	DefaultMaxSetCookies = 32
	// DefaultRequestBodyTimeout is nginx's client_body_timeout default.
	DefaultRequestBodyTimeout = time.Minute
	// DefaultMaxConnsPerClient is connlimit's default.
	DefaultMaxConnsPerClient = connlimit.DefaultMaxPerClient
)

func (o Options) withDefaults() (Options, error) {
	if o.BindAddress == "" && o.Listener == nil {
		return o, fmt.Errorf("proxy: the bind address is empty: set --proxy-bind-address, e.g. :8091")
	}
	if o.NotReadyGrace < 0 {
		return o, fmt.Errorf("proxy: not-ready grace %s is negative: use 0 to close at once or a positive duration", o.NotReadyGrace)
	}
	if o.Origins != nil && o.Origins.Scheme == "http" && !o.InsecureCookie {
		return o, fmt.Errorf("proxy: --proxy-workspace-domain %s is plain http, where the Secure login cookie cannot be set: use https, or add --insecure-cookie for development on loopback", o.Origins.Apex())
	}
	if o.NotReadyGrace == 0 {
		o.NotReadyGrace = DefaultNotReadyGrace
	}
	if o.AuthCacheTTL == 0 {
		o.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxIdleConnsPerPod <= 0 {
		o.MaxIdleConnsPerPod = DefaultMaxIdleConnsPerPod
	}
	if o.ResponseHeaderTimeout == 0 {
		o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if o.RequestBodyTimeout == 0 {
		o.RequestBodyTimeout = DefaultRequestBodyTimeout
	}
	if o.MaxResponseHeaderBytes < 0 || o.Max1xxResponses < 0 || o.MaxSetCookies < 0 {
		return o, fmt.Errorf("proxy: response limits must not be negative (max response header bytes %d, max 1xx responses %d, max Set-Cookie headers %d): use 0 for the defaults",
			o.MaxResponseHeaderBytes, o.Max1xxResponses, o.MaxSetCookies)
	}
	if o.MaxResponseHeaderBytes == 0 {
		o.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	if o.Max1xxResponses == 0 {
		o.Max1xxResponses = DefaultMax1xxResponses
	}
	if o.MaxSetCookies == 0 {
		o.MaxSetCookies = DefaultMaxSetCookies
	}
	if o.MaxConnsPerClient == 0 {
		o.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	for _, a := range o.AllowedOrigins {
		if a == "*" {
			continue
		}
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return o, fmt.Errorf("proxy: allowed origin %q is not an origin: use scheme://host[:port], e.g. https://ide.example.com", a)
		}
	}
	return o, nil
}

// ParseOrigins splits a comma-separated --proxy-allowed-origins flag value.
func ParseOrigins(s string) []string {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, strings.TrimSuffix(o, "/"))
		}
	}
	return out
}
