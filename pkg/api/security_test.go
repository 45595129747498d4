package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
)

// do sends one request to base+path with the given headers and returns status, body and headers.
func do(t *testing.T, base, method, path, body string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header
}

// The login cookie is a credential the browser sends on its own: the API and MCP never read it.
func TestCookieIsNotACredentialForTheAPI(t *testing.T) {
	skipShort(t)
	cookie := map[string]string{"Cookie": auth.CookieName + "=" + adminToken("root"), "Content-Type": "application/json"}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/api/v1/workspaces", ""},
		{"GET", "/api/v1/whoami", ""},
		{"POST", "/api/v1/upgrade-all", ""},
		{"POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`},
	} {
		code, body, h := do(t, env.server.URL, tc.method, tc.path, tc.body, cookie)
		if code != http.StatusUnauthorized || !strings.Contains(body, "cookie is not accepted") {
			t.Errorf("%s %s with only the login cookie: %d %s; want 401 saying the cookie is not accepted", tc.method, tc.path, code, body)
		}
		if !strings.Contains(h.Get("WWW-Authenticate"), "resource_metadata=") {
			t.Errorf("%s %s: 401 without resource_metadata in WWW-Authenticate: %q", tc.method, tc.path, h.Get("WWW-Authenticate"))
		}
	}
}

// A page on another origin can make a browser send requests with whatever credentials it holds;
// such requests never change state, even with a valid bearer token.
func TestCrossOriginRequestsNeverChangeState(t *testing.T) {
	skipShort(t)
	admin := "Bearer " + adminToken("root")
	seed(t, "xo-owner", "xo-box", "1.0")
	before := podCount(t)
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		header       map[string]string
	}{
		{"upgrade-all with a foreign Origin and no body", "POST", "/api/v1/upgrade-all", "", map[string]string{"Origin": "http://evil.example"}},
		{"upgrade-all with Sec-Fetch-Site cross-site", "POST", "/api/v1/upgrade-all", "", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"delete with a foreign Origin", "DELETE", "/api/v1/workspaces/xo-box", "", map[string]string{"Origin": "https://evil.example"}},
		{"spawn with a foreign Origin", "POST", "/api/v1/workspaces", `{"template":"python","id":"xo2","context":{"repo":"r"}}`, map[string]string{"Origin": "http://evil.example"}},
		{"maintenance with Sec-Fetch-Site cross-site", "PUT", "/api/v1/workspaces/xo-box/maintenance", `{"reason":"x"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"an MCP tool call with a foreign Origin", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, map[string]string{"Origin": "http://evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"Authorization": admin, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
			for k, v := range tc.header {
				h[k] = v
			}
			code, body, _ := do(t, env.server.URL, tc.method, tc.path, tc.body, h)
			if code != http.StatusForbidden || !strings.Contains(body, "Forbidden:") {
				t.Errorf("%d %s; want 403 with the reason", code, body)
			}
		})
	}
	if after := podCount(t); after != before {
		t.Errorf("pods went from %d to %d: a cross-origin request changed state", before, after)
	}
	// The same calls from a non-browser client (no Origin) or from the server's own origin pass.
	if code, body, _ := do(t, env.server.URL, "POST", "/api/v1/upgrade-all", "", map[string]string{"Authorization": admin}); code != http.StatusAccepted {
		t.Errorf("upgrade-all without Origin: %d %s; want 202", code, body)
	}
	if code, body, _ := do(t, env.server.URL, "POST", "/api/v1/upgrade-all", "", map[string]string{"Authorization": admin, "Origin": env.server.URL}); code != http.StatusAccepted {
		t.Errorf("upgrade-all from the same origin: %d %s; want 202", code, body)
	}
	// Reading is harmless: a cross-site GET with a bearer token still answers.
	if code, body, _ := do(t, env.server.URL, "GET", "/api/v1/whoami", "", map[string]string{"Authorization": admin, "Sec-Fetch-Site": "cross-site"}); code != http.StatusOK {
		t.Errorf("cross-site GET whoami: %d %s", code, body)
	}
}

// A front end without --public-url, as `make demo` runs it: metadata served by default, /mcp
// checks Host and Origin.
func defaultFrontEnd(t *testing.T, allowedHosts ...string) *httptest.Server {
	t.Helper()
	authn, err := (&auth.Options{Mode: "oidc", OIDC: auth.OIDCConfig{IssuerURL: env.issuer.srv.URL, ClientID: clientID, CAFile: env.issuer.caFile}}).New(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewHandler(env.svc, authn, api.Options{Version: "test", Issuer: env.issuer.srv.URL, AllowedHosts: allowedHosts}))
	t.Cleanup(srv.Close)
	return srv
}

func TestProtectedResourceMetadataServedByDefault(t *testing.T) {
	skipShort(t)
	srv := defaultFrontEnd(t)
	for _, tc := range []struct{ method, path, metadataPath, resource string }{
		{"POST", "/mcp", "/.well-known/oauth-protected-resource/mcp", srv.URL + "/mcp"},
		{"GET", "/mcp", "/.well-known/oauth-protected-resource/mcp", srv.URL + "/mcp"},
		{"GET", "/api/v1/workspaces", "/.well-known/oauth-protected-resource", srv.URL},
		{"POST", "/api/v1/upgrade-all", "/.well-known/oauth-protected-resource", srv.URL},
	} {
		code, _, h := do(t, srv.URL, tc.method, tc.path, "", map[string]string{"Authorization": "Bearer not-a-token"})
		want := `Bearer resource_metadata="` + srv.URL + tc.metadataPath + `"`
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), want) {
			t.Errorf("%s %s: %d, WWW-Authenticate %q; want 401 starting with %s", tc.method, tc.path, code, h.Get("WWW-Authenticate"), want)
		}
		code, body, _ := do(t, srv.URL, "GET", tc.metadataPath, "", nil)
		var md struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &md) != nil || md.Resource != tc.resource ||
			len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != env.issuer.srv.URL {
			t.Errorf("GET %s: %d %s; want resource %s and authorization_servers [%s]", tc.metadataPath, code, body, tc.resource, env.issuer.srv.URL)
		}
	}
}

func TestMCPChecksHostAndOrigin(t *testing.T) {
	skipShort(t)
	srv := defaultFrontEnd(t, "nogoo9.example.com")
	u, _ := url.Parse(srv.URL)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	tok := "Bearer " + userToken("hal")
	for _, tc := range []struct {
		name       string
		host       string
		origin     string
		wantStatus int
	}{
		{"a rebinding attacker's Host and Origin", "evil.example.com", "http://evil.example.com", http.StatusForbidden},
		{"a rebinding attacker's Host alone", "evil.example.com:" + u.Port(), "", http.StatusForbidden},
		{"loopback Host with a foreign Origin", u.Host, "http://evil.example.com", http.StatusForbidden},
		{"loopback Host with the null Origin", u.Host, "null", http.StatusForbidden},
		{"loopback Host and Origin", u.Host, "http://" + u.Host, http.StatusOK},
		{"localhost Host and Origin", "localhost:" + u.Port(), "http://localhost:" + u.Port(), http.StatusOK},
		{"a page on another loopback port (cross-origin)", "localhost:" + u.Port(), "http://localhost:6274", http.StatusForbidden},
		{"a configured host", "nogoo9.example.com", "https://nogoo9.example.com", http.StatusOK},
		{"a cluster-internal Service name", "nogoo9.nogoo9-system.svc:8090", "", http.StatusOK},
		// An error quotes at most 80 bytes of an input (workspace.Quote): the whole header came
		// back before.
		{"a 100 KB Origin", u.Host, "http://" + strings.Repeat("a", 100<<10) + ".example", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"Host": tc.host, "Authorization": tok, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
			if tc.origin != "" {
				h["Origin"] = tc.origin
			}
			code, body, _ := do(t, srv.URL, "POST", "/mcp", init, h)
			if code != tc.wantStatus {
				t.Errorf("%d %s; want %d", code, body, tc.wantStatus)
			}
			if code == http.StatusForbidden && !strings.Contains(body, "--mcp-allowed-hosts") && !strings.Contains(body, "cross-origin") {
				t.Errorf("403 does not say what to do: %s", body)
			}
			if len(body) > 1024 {
				t.Errorf("the answer is %d bytes: an error quotes at most 80 bytes of an input", len(body))
			}
		})
	}
}

// recorder keeps the query of every events request a clientset sends.
type recorder struct {
	mu      sync.Mutex
	queries []string
	next    http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, "/events") {
		r.mu.Lock()
		r.queries = append(r.queries, req.URL.Query().Get("fieldSelector"))
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

func TestEventsReadOnlyTheWorkspacesOwnEvents(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	mine := seed(t, "ivy", "ivy-box", "1.0")
	other := seed(t, "ivy", "ivy-box-2", "1.0") // an id that extends mine: a prefix match would take it in
	addEvent(t, mine.Name, "Pulled", "mine")
	addEvent(t, other.Name, "Pulled", "not mine")
	rec := &recorder{}
	cfg := restclient.CopyConfig(env.cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }
	svc, err := frontend.New(frontend.Config{Namespace: ns, Cache: env.mgrCache, Client: env.k8s, Events: kubernetes.NewForConfigOrDie(cfg).CoreV1(), Templates: env.templates})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(auth.WithCaller(context.Background(), &auth.Caller{Subject: "ivy"}), 30*time.Second)
	defer cancel()
	evs, stream, err := svc.Events(ctx, "ivy-box", true)
	g.Expect(err).NotTo(HaveOccurred())
	defer stream.Stop()
	g.Expect(evs).To(ConsistOf(HaveField("Message", "mine")))
	addEvent(t, other.Name, "Killing", "not mine either")
	addEvent(t, mine.Name, "Started", "mine, later")
	e, err := stream.Next(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.Message).To(Equal("mine, later"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	g.Expect(rec.queries).NotTo(BeEmpty())
	want := []string{"involvedObject.kind=Pod", "involvedObject.name=" + mine.Name}
	for _, q := range rec.queries {
		terms := strings.Split(q, ",")
		slices.Sort(terms)
		g.Expect(terms).To(Equal(want), "every events list and watch names the workspace's pod; all queries: %q", rec.queries)
	}
}

// A follow is of one workspace: when its owner deletes it and another user spawns one with the
// same id, the follow ends instead of carrying the new workspace's events (image names, nodes,
// failures) to the old owner. Before stop 48 it followed the id and carried them.
func TestAFollowEndsWhenItsIdPassesToAnotherOwner(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	lent := seed(t, "lena", "lent-box", "1.0")
	svc, err := frontend.New(frontend.Config{Namespace: ns, Cache: env.mgrCache, Client: env.k8s, Events: kubernetes.NewForConfigOrDie(env.cfg).CoreV1(), Templates: env.templates})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(auth.WithCaller(context.Background(), &auth.Caller{Subject: "lena"}), 30*time.Second)
	defer cancel()
	_, stream, err := svc.Events(ctx, "lent-box", true)
	g.Expect(err).NotTo(HaveOccurred())
	defer stream.Stop()
	g.Expect(env.k8s.Delete(ctx, lent)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.mgrCache.Get(ctx, client.ObjectKeyFromObject(lent), &corev1.Pod{}))
	}).
		WithTimeout(30 * time.Second).Should(BeTrue())
	taken := seed(t, "mort", "lent-box", "1.0")
	addEvent(t, taken.Name, "Pulling", `Pulling image "registry.corp/mort-secret:1"`)
	e, err := stream.Next(ctx)
	g.Expect(err).To(HaveOccurred(), "lena's follow received mort's event %+v", e)
	g.Expect(frontend.CodeOf(err)).To(Equal(frontend.CodeNotFound), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("its id now names another workspace"))
}

// openFollow starts GET .../events?follow=true and returns once the server answered.
func openFollow(t *testing.T, base, token, id string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/workspaces/"+id+"/events?follow=true&timeout=120s", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpc.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("follow: %v", err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp, func() { cancel(); resp.Body.Close() }
}

func TestEventFollowsAreCappedPerUser(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	seed(t, "jo", "jo-box", "1.0")
	seed(t, "kim", "kim-box", "1.0")
	jo, kim := userToken("jo"), userToken("kim")
	var closers []func()
	for i := range frontend.DefaultMaxFollowsPerUser {
		resp, stop := openFollow(t, env.server.URL, jo, "jo-box")
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "follow %d", i+1)
		closers = append(closers, stop)
	}
	resp, _ := openFollow(t, env.server.URL, jo, "jo-box")
	body, _ := io.ReadAll(bufio.NewReader(resp.Body))
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(string(body)).To(And(ContainSubstring("already follow 5 event streams"), ContainSubstring(`"code":"TooManyRequests"`)))
	// Another user is not affected, and a plain (non-follow) read still works.
	resp, _ = openFollow(t, env.server.URL, kim, "kim-box")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	code, _ := rest(t, jo, "GET", "/api/v1/workspaces/jo-box/events", nil)
	g.Expect(code).To(Equal(http.StatusOK))
	// Ending one follow frees its slot.
	closers[0]()
	g.Eventually(func() int {
		resp, stop := openFollow(t, env.server.URL, jo, "jo-box")
		defer stop()
		return resp.StatusCode
	}, 30*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))
}

// Every answer to a credential is Cache-Control: no-store, so no browser cache or proxy keeps a
// caller's workspaces for the next person: JSON answers, errors, refusals, the events stream and
// MCP's answers. The public protected-resource metadata stays cacheable.
func TestCredentialedAnswersAreNeverStored(t *testing.T) {
	skipShort(t)
	seed(t, "nell", "nell-box", "1.0")
	nell := map[string]string{"Authorization": "Bearer " + userToken("nell")}
	mcpHeaders := map[string]string{"Authorization": "Bearer " + userToken("nell"), "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		wantStatus               int
	}{
		{"whoami", "GET", "/api/v1/whoami", "", nell, 200},
		{"a workspace", "GET", "/api/v1/workspaces/nell-box", "", nell, 200},
		{"a workspace in a namespace", "GET", "/api/v1/namespaces/default/workspaces/nell-box", "", nell, 200},
		{"the list", "GET", "/api/v1/workspaces", "", nell, 200},
		{"a page of the list", "GET", "/api/v1/workspaces?limit=1", "", nell, 200},
		{"the list across namespaces", "GET", "/api/v1/workspaces?allNamespaces=true", "", nell, 200},
		{"the templates", "GET", "/api/v1/templates", "", nell, 200},
		{"the events", "GET", "/api/v1/workspaces/nell-box/events", "", nell, 200},
		{"the events followed", "GET", "/api/v1/workspaces/nell-box/events?follow=true&timeout=1s", "", nell, 200},
		{"an error", "GET", "/api/v1/workspaces/nope", "", nell, 404},
		{"a refused token", "GET", "/api/v1/workspaces", "", map[string]string{"Authorization": "Bearer not-a-token"}, 401},
		{"an MCP initialize", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, mcpHeaders, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, h := do(t, env.server.URL, tc.method, tc.path, tc.body, tc.header)
			if code != tc.wantStatus {
				t.Fatalf("%s %s = %d %s; want %d", tc.method, tc.path, code, body, tc.wantStatus)
			}
			if cc := h.Get("Cache-Control"); !strings.HasPrefix(cc, "no-store") {
				t.Errorf("%s %s: Cache-Control %q; want no-store", tc.method, tc.path, cc)
			}
		})
	}
	t.Run("the public metadata stays cacheable", func(t *testing.T) {
		code, _, h := do(t, env.server.URL, "GET", "/.well-known/oauth-protected-resource", "", nil)
		if code != 200 || !strings.Contains(h.Get("Cache-Control"), "max-age") {
			t.Errorf("metadata: %d, Cache-Control %q; want 200 with max-age", code, h.Get("Cache-Control"))
		}
	})
}
