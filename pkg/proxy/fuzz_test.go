package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// FuzzCleanPath: the path routes are matched on is absolute, has no empty, "." or ".." segment,
// is what path.Clean says (keeping a trailing slash), and cleaning it again changes nothing.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"", "/", "/ws/jane/demo/", "/ws/jane/demo/../../other/", "//ws//x", "/ws/./a/.", "..", "/%2e%2e/", "/ws/jane/demo/..", "a/b/../../../c/", "/\x00/..", "/" + strings.Repeat("../", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := cleanPath(p)
		if !strings.HasPrefix(c, "/") {
			t.Fatalf("cleanPath(%q) = %q is not absolute", p, c)
		}
		if !isClean(c) {
			t.Fatalf("cleanPath(%q) = %q is not clean", p, c)
		}
		if again := cleanPath(c); again != c {
			t.Fatalf("cleanPath is not idempotent: %q -> %q -> %q", p, c, again)
		}
		want := path.Clean("/" + p)
		if strings.HasSuffix(p, "/") && want != "/" {
			want += "/"
		}
		if c != want && c != path.Clean(p) && !(strings.HasSuffix(p, "/") && c == path.Clean(p)+"/") {
			t.Fatalf("cleanPath(%q) = %q, path.Clean says %q", p, c, want)
		}
	})
}

// FuzzRouteLookup: a workspace's path annotation becomes a prefix only when it is clean and outside
// the proxy's reserved prefix, and a cleaned request path matches a route only under its prefix, so
// no request path (with "..", "//" or %2F spelled any way) reaches another workspace.
func FuzzRouteLookup(f *testing.F) {
	f.Add("/ws/jane/demo/", "/ws/jane/demo/index.html")
	f.Add("/ws/jane/demo/", "/ws/jane/demo/../other/")
	f.Add("/ws/jane/demo", "/ws/jane/demox/")
	f.Add("/ws//jane/./demo/../demo/", "/ws/jane/demo")
	f.Add("/nogoo9/login/", "/nogoo9/login/")
	f.Add("/ws/a b/", "/ws/a%20b/")
	f.Add("relative/", "/relative/")
	f.Add("/ws/\x00/", "/ws/\x00/x")
	f.Fuzz(func(t *testing.T, annPath, reqPath string) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", CreationTimestamp: metav1.NewTime(time.Unix(1, 0)),
				Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo"},
				Annotations: map[string]string{workspace.AnnOwner: "jane", workspace.AnnWorkspacePath: annPath, workspace.AnnWorkspacePort: "8080"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.9",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
		targets, errs := routesFor(wsKey{namespace: "ns", id: "demo"}, []*corev1.Pod{pod}, time.Unix(100, 0))
		if len(targets)+len(errs) > 1 {
			t.Fatalf("one path annotation gave %d routes and %d errors", len(targets), len(errs))
		}
		if len(errs) == 1 && errs[0].Error() == "" {
			t.Fatal("an empty error")
		}
		if len(targets) == 0 {
			return
		}
		prefix := targets[0].prefix
		if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") || prefix == "/" || !isClean(prefix) {
			t.Fatalf("annotation %q gave prefix %q", annPath, prefix)
		}
		if strings.HasPrefix(prefix, ReservedPrefix) || strings.ContainsAny(prefix, "?#%\\ ") {
			t.Fatalf("annotation %q gave prefix %q", annPath, prefix)
		}
		tb := &table{routes: map[string]*target{prefix: targets[0]}, maxDepth: depthOf(prefix)}
		p := reqPath
		if u, err := url.Parse(reqPath); err == nil {
			p = u.Path
		}
		c := cleanPath(p)
		if got := tb.lookup(c); got != nil && !strings.HasPrefix(c, prefix) {
			t.Fatalf("request %q (clean %q) matched prefix %q", reqPath, c, prefix)
		} else if got == nil && strings.HasPrefix(c, prefix) {
			t.Fatalf("request %q (clean %q) missed prefix %q", reqPath, c, prefix)
		}
	})
}

// browserView is how a browser reads a Location path: TAB, CR and LF removed, "\" as "/".
func browserView(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\r', '\n':
			return -1
		case '\\':
			return '/'
		}
		return r
	}, s)
	return s
}

// checkSafeNext is the property every post-login redirect keeps: "/" or the input unchanged, a
// local path as the browser reads it, also after one more decoding.
func checkSafeNext(t *testing.T, fn func(string) string, next string) {
	t.Helper()
	got := fn(next)
	if got != "/" && got != next {
		t.Fatalf("safeNext(%q) = %q: want the input or /", next, got)
	}
	for _, v := range []string{got, func() string { d, _ := url.PathUnescape(got); return d }()} {
		b := browserView(v)
		if !strings.HasPrefix(b, "/") || strings.HasPrefix(b, "//") {
			t.Fatalf("safeNext(%q) = %q, which a browser reads as %q: it leaves the site", next, got, b)
		}
		if u, err := url.Parse(b); err == nil && (u.Host != "" || u.Scheme != "") {
			t.Fatalf("safeNext(%q) = %q names host %q", next, got, u.Host)
		}
	}
}

var nextSeeds = []string{"/", "/ws/jane/demo/", "//evil.example", "/\\evil.example", "/\t/evil.example", "/%2F%2Fevil.example", "https://evil.example/", "/a?next=//x", "/%5Cevil", "", "javascript:alert(1)", "/\r\n/evil", "/ws/%E2%80%AE"}

func FuzzSafeNext(f *testing.F) {
	for _, s := range nextSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) { checkSafeNext(t, safeNext, next) })
}

// FuzzLoginOrigin: the login and logout forms are refused whenever the browser says the post is
// cross-site, or its Origin names another host; a refused post never sets the login cookie.
func FuzzLoginOrigin(f *testing.F) {
	f.Add("cross-site", "http://evil.example", "good")
	f.Add("", "http://evil.example", "good")
	f.Add("same-origin", "http://proxy.example", "good")
	f.Add("", "null", "good")
	f.Add("same-site", "http://sub.proxy.example", "good")
	f.Add("", "http://proxy.example\r\nX: y", "good")
	f.Fuzz(func(t *testing.T, fetchSite, origin, token string) {
		if strings.ContainsAny(fetchSite+origin, "\r\n\x00") {
			return // net/http never delivers such header values
		}
		p := newLoginProxy(t, true)
		hdr := map[string]string{}
		if fetchSite != "" {
			hdr["Sec-Fetch-Site"] = fetchSite
		}
		if origin != "" {
			hdr["Origin"] = origin
		}
		w := send(p, "POST", ReservedPrefix+"login", url.Values{"token": {token}, "next": {"/"}}, hdr)
		crossSite := fetchSite != "" && fetchSite != "same-origin" && fetchSite != "none"
		otherHost := fetchSite == "" && origin != "" && func() bool {
			u, err := url.Parse(origin)
			return err != nil || u.Host != "proxy.example"
		}()
		if (crossSite || otherHost) && (w.Code != 403 || len(w.Result().Cookies()) != 0) {
			t.Fatalf("cross-origin login (Sec-Fetch-Site %q, Origin %q) answered %d with cookies %v", fetchSite, origin, w.Code, w.Result().Cookies())
		}
		if w.Code >= 500 {
			t.Fatalf("login answered %d", w.Code)
		}
	})
}

// forwardedBoth writes the request quickParse made of head the way the fast path forwards it,
// once from the request's header map and once from its header lines (writeLines), and parses
// both as the pod would; ok is false when quickParse does not take head.
func forwardedBoth(t *testing.T, head string, strip bool) (fromMap, fromLines *http.Request, ok bool) {
	t.Helper()
	q := newQuickReq()
	r, ok := q.quickParse([]byte(head), "10.1.2.3:4567")
	if !ok {
		return nil, nil, false
	}
	if q.lines == "" {
		t.Fatalf("quickParse took %q without its header lines", head)
	}
	tg := &target{prefix: "/ws/jane/demo/", strip: strip}
	write := func(lines string) *http.Request {
		f := &fastRequest{in: r, t: tg, rawQuery: cleanQueryParams(r.URL.RawQuery), lines: lines}
		if c, ok := r.Header["Cookie"]; ok && containsCookie(c) {
			f.cookies, f.cookieOK = keptCookies(c), true
		}
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		if err := f.writeRequest(bw); err != nil {
			t.Fatalf("writeRequest(%q): %v", head, err)
		}
		_ = bw.Flush()
		out, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf.Bytes())))
		if err != nil {
			t.Fatalf("the pod cannot read what the proxy forwards for %q (lines %t): %v\n%q", head, lines != "", err, buf.String())
		}
		return out
	}
	return write(""), write(q.lines), true
}

// forwardedLinesSeeds are requests' header lines that quickParse takes (TestForwardedLinesSeedsAreTaken).
var forwardedLinesSeeds = []string{
	"Host: h\r\nAuthorization: Bearer t\r\nX-A: 1\r\n",
	"host: h\r\nx-a: 1\r\nX-A: 2\r\nconnection: close, X-Drop\r\nx-drop: gone\r\nkeep-alive: 5\r\n",
	"Host: h\r\nCookie: theme=dark; " + CookieName + "=tok; lang=en\r\ncookie: x=y\r\nX-Forwarded-For: 6.6.6.6\r\nx-forwarded-prefix: /evil\r\n",
	"Host: h\r\nCookie: " + InsecureCookieName + "=tok\r\nPROXY-AUTHORIZATION: basic x\r\nTe: trailers\r\nForwarded: for=x\r\n",
	"Host: h\r\nX-Forwarded-Host: evil\r\nx-forwarded-proto: https\r\nProxy-Connection: keep-alive\r\nX-Empty:\r\nX-Sp:   v  \r\n",
	"HOST: h\r\nConnection: keep-alive, Cookie\r\nCookie: a=b; " + CookieName + "=tok\r\nProxy-Authenticate: x\r\n",
	"Host: h\r\nConnection: close\r\nclose: x\r\nConnection: , x-\u212aeep ,keep-alive,\r\nX-Keep: 1\r\nx-keep: 2\r\n",
	"Host: h\r\nConnection: a, b, c, d, e, f, g, h, i\r\nI: 1\r\nA: 2\r\nJ: 3\r\n",
	"Host: h\r\nConnection: a, b, c, d, e, f, g, h, i, x-\u212aeep, \u017fecret, cookie\r\nX-Keep: 1\r\nSecret: 2\r\nCookie: " + CookieName + "=tok\r\nJ: 3\r\n",
}

// FuzzForwardedHeaderLines: the header block the fast path writes from the client's header lines
// (writeLines) reaches the pod as the same request as the one written from the header map, with
// and without prefix stripping: hop-by-hop fields, those named in Connection, Authorization, the
// forwarding fields and the nogoo9 cookie are gone in both, whatever their spelling.
func FuzzForwardedHeaderLines(f *testing.F) {
	for _, s := range forwardedLinesSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, lines string, strip bool) {
		head := "GET /ws/jane/demo/x?a=b HTTP/1.1\r\n" + lines + "\r\n"
		if strings.Count(head, "\r\n\r\n") != 1 || !strings.HasSuffix(head, "\r\n\r\n") {
			return // the lean loop hands quickParse exactly one head ending in a blank line
		}
		fromMap, fromLines, ok := forwardedBoth(t, head, strip)
		if !ok {
			return
		}
		if fromMap.Method != fromLines.Method || fromMap.RequestURI != fromLines.RequestURI || fromMap.Host != fromLines.Host {
			t.Fatalf("%q: request line or host differ: map %s %s %s, lines %s %s %s", head,
				fromMap.Method, fromMap.RequestURI, fromMap.Host, fromLines.Method, fromLines.RequestURI, fromLines.Host)
		}
		if !reflect.DeepEqual(fromMap.Header, fromLines.Header) {
			t.Fatalf("%q (strip %t): the pod reads different headers\nfrom the map:   %v\nfrom the lines: %v", head, strip, fromMap.Header, fromLines.Header)
		}
	})
}

// TestForwardedLinesSeedsAreTaken: every seed of FuzzForwardedHeaderLines is a request the lean
// loop takes (a seed quickParse refuses tests nothing), and the pod reads the same headers from
// the lines as from the map, with and without the prefix stripped.
func TestForwardedLinesSeedsAreTaken(t *testing.T) {
	for _, s := range forwardedLinesSeeds {
		for _, strip := range []bool{false, true} {
			fromMap, fromLines, ok := forwardedBoth(t, "GET /ws/jane/demo/x?a=b HTTP/1.1\r\n"+s+"\r\n", strip)
			if !ok {
				t.Fatalf("quickParse refuses the seed %q", s)
			}
			if !reflect.DeepEqual(fromMap.Header, fromLines.Header) {
				t.Errorf("%q (strip %t): the pod reads different headers\nfrom the map:   %v\nfrom the lines: %v", s, strip, fromMap.Header, fromLines.Header)
			}
		}
	}
}

// TestForwardedHeaderLines: what writeLines leaves out and puts in, whatever the spelling, and that
// it keeps the client's order.
func TestForwardedHeaderLines(t *testing.T) {
	head := "GET /ws/jane/demo/x HTTP/1.1\r\nhost: h\r\nx-b: 1\r\nconnection: X-Drop\r\nX-DROP: gone\r\n" +
		"authorization: Bearer secret\r\nProxy-Authenticate: x\r\ncookie: a=b; " + CookieName + "=tok\r\nCOOKIE: c=d\r\nx-forwarded-for: 6.6.6.6\r\n" +
		"X-Forwarded-Prefix: /evil\r\nTRANSFER-ENCODING-X: y\r\nx-a: 2\r\n\r\n"
	_, got, ok := forwardedBoth(t, head, true)
	if !ok {
		t.Fatal("quickParse did not take the request")
	}
	want := http.Header{
		"X-B": {"1"}, "X-A": {"2"}, "Transfer-Encoding-X": {"y"}, "Cookie": {"a=b", "c=d"},
		"X-Forwarded-For": {"10.1.2.3"}, "X-Forwarded-Host": {"h"}, "X-Forwarded-Proto": {"http"},
		"X-Forwarded-Prefix": {"/ws/jane/demo"},
	}
	if !reflect.DeepEqual(got.Header, want) {
		t.Errorf("forwarded headers %v, want %v", got.Header, want)
	}
	// The order of the client's lines is kept (the map walk's is random).
	q := newQuickReq()
	r, _ := q.quickParse([]byte(head), "10.1.2.3:4567")
	f := &fastRequest{in: r, t: &target{prefix: "/ws/jane/demo/", strip: true}, lines: q.lines}
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	if err := f.writeRequest(bw); err != nil {
		t.Fatal(err)
	}
	_ = bw.Flush()
	s := buf.String()
	if i, j := strings.Index(s, "x-b: 1"), strings.Index(s, "x-a: 2"); i < 0 || j < i {
		t.Errorf("the client's lines are not forwarded in its order and spelling:\n%s", s)
	}
}
