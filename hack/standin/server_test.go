package standin

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func testBackend(owner string) Backend {
	return Backend{Addr: "127.0.0.1:0", Role: RoleWorkspace, Workload: Workload{
		Namespace: "ns", Pod: "ws-demo-abc12", UID: "u1", Workspace: "demo", Name: "Jane's demo",
		Owner: owner, Template: "node", TemplateVersion: "1.1.0",
	}}
}

func startTestListener(t *testing.T, b Backend) *listener {
	t.Helper()
	l, err := listen(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func get(t *testing.T, url string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestPageNamesTheWorkspaceOwnerPodAndVersionEscaped(t *testing.T) {
	l := startTestListener(t, testBackend(`jane<script>alert(1)</script>@example.com`))
	resp, body := get(t, "http://"+l.bound+"/any/path", http.Header{"Accept": {"text/html,*/*"}})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"Jane&#39;s demo", "ws-demo-abc12", "1.1.0", "jane&lt;script&gt;alert(1)&lt;/script&gt;@example.com", ">demo<"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>alert(1)") {
		t.Error("the owner is not escaped")
	}
}

func TestJSONReportsTheRequestPathAndAnAuthorizationHeader(t *testing.T) {
	b := testBackend("jane@example.com")
	l := startTestListener(t, b)
	resp, body := get(t, "http://"+l.bound+"/some/file.js", http.Header{"Accept": {"application/json"}, "Authorization": {"Bearer x"}})
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var info Info
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	if info.Backend != b || info.Path != "/some/file.js" || !info.Authorization {
		t.Fatalf("info %+v", info)
	}
	_, body = get(t, "http://"+l.bound+"/", http.Header{"Accept": {"text/html;q=0.9, application/json"}})
	if err := json.Unmarshal([]byte(body), &info); err != nil || info.Authorization {
		t.Fatalf("JSON with a list of types: %v %+v", err, info)
	}
}

func TestTerminalSendsTheBannerEchoesAndEndsWithTheListener(t *testing.T) {
	b := testBackend("jane@example.com")
	l := startTestListener(t, b)
	ctx := context.Background()
	term, err := DialTerminal(ctx, "ws://"+l.bound+"/term", "")
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if term.Banner != Banner(b) || !strings.Contains(term.Banner, "1.1.0") || !strings.Contains(term.Banner, "ws-demo-abc12") {
		t.Fatalf("banner %q", term.Banner)
	}
	for _, msg := range []string{"hello", "ls -la"} {
		r, err := term.Send(msg)
		if err != nil || r != EchoReply(b, msg) {
			t.Fatalf("echo of %q: %q, %v", msg, r, err)
		}
	}
	// Any path upgrades, as the page's own script connects to the URL it was loaded from.
	other, err := DialTerminal(ctx, "http://"+l.bound+"/some/page", "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	l.Close()
	for _, c := range []*Terminal{term, other} {
		select {
		case <-c.Closed():
		case <-time.After(10 * time.Second):
			t.Fatal("an open terminal survived its listener")
		}
	}
	if _, err := DialTerminal(ctx, "ws://"+l.bound+"/term", ""); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}

func TestListenRefusesAnythingButLoopbackIPv4(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::1]:0", "[::]:0", ":0", "10.0.0.1:8080", "localhost:0"} {
		b := testBackend("x")
		b.Addr = addr
		l, err := listen(b, nil)
		if err == nil {
			l.Close()
			t.Errorf("listen(%q) succeeded", addr)
			continue
		}
		if !strings.Contains(err.Error(), "loopback") {
			t.Errorf("listen(%q): %v; want a loopback refusal", addr, err)
		}
	}
	// A kwok pod IP is fine.
	b := testBackend("x")
	b.Addr = "127.1.251.7:0"
	l, err := listen(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if host, _, _ := net.SplitHostPort(l.bound); host != "127.1.251.7" {
		t.Fatalf("bound %s", l.bound)
	}
}
