package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/mcp"
)

// rawClient speaks the Streamable HTTP transport by hand, so that a test sees the bytes and
// headers each answer came with, at the protocol version it chooses.
type rawClient struct {
	t       *testing.T
	url     string
	user    string
	version string
	session string
	// accept, when set, is the Accept header's lines instead of the usual one.
	accept []string
}

// post sends one JSON-RPC message and returns the status, the Content-Type and the JSON-RPC
// message of the answer (taken out of its server-sent event when the answer is a stream).
func (c *rawClient) post(body string) (int, string, map[string]any) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.accept != nil {
		req.Header["Accept"] = c.accept
	}
	req.Header.Set("X-Test-User", c.user)
	req.Header.Set("Authorization", "Bearer test")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", c.version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		c.session = id
	}
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 16<<20)
		raw = nil
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				raw = []byte(d)
			}
		}
	}
	var msg map[string]any
	if resp.StatusCode == http.StatusOK && len(raw) > 0 {
		if err := json.Unmarshal(raw, &msg); err != nil {
			c.t.Fatalf("answer to %.100s is not JSON (%s): %v: %.300s", body, ct, err, raw)
		}
	}
	return resp.StatusCode, ct, msg
}

func (c *rawClient) initialize() {
	c.t.Helper()
	status, _, msg := c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + c.version + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if status != http.StatusOK || c.session == "" {
		c.t.Fatalf("initialize at %s: status %d, session %q, %v", c.version, status, c.session, msg)
	}
	if got := msg["result"].(map[string]any)["protocolVersion"]; got != c.version {
		c.t.Fatalf("initialize at %s negotiated %v", c.version, got)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// TestFastListAnswersAsTheSDKDoes: list_workspaces is answered without the SDK's encoder
// (fastList); at every protocol version it handles, its answer is the SDK's, message for message,
// for pages, ids of either kind and every user, and every call it does not handle (a tool error,
// another tool, an odd member, a session of someone else) reaches the SDK and is answered as
// before. (A batch reaches neither: TestBatchesAreRefusedBeforeTheSDK.)
func TestFastListAnswersAsTheSDKDoes(t *testing.T) {
	pods := benchPods(250)
	// A value that needs escaping in the text copy: quotes, a backslash, a tab, non-ASCII.
	pods[7].Annotations["nogoo9/last-upgrade-error"] = "image \"ide:v2\" not found\\retry\tin 5 s: é ✓ \u2028"
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{pods}})
	if err != nil {
		t.Fatal(err)
	}
	asAdminOrUser := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u := r.Header.Get("X-Test-User")
			c := &auth.Caller{Subject: u, IsAdmin: u == "root"}
			next.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), c)))
		})
	}
	fast := httptest.NewServer(asAdminOrUser(mcp.NewHandler(svc, mcp.Options{Version: "test"})))
	defer fast.Close()
	sdkOnly := httptest.NewServer(asAdminOrUser(mcp.NewHandler(svc, mcp.Options{Version: "test", NoFastList: true})))
	defer sdkOnly.Close()

	call := func(id, args string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"list_workspaces","arguments":` + args + `}}`
	}
	for _, version := range []string{"2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			for _, user := range []string{"root", "user-3"} {
				a := &rawClient{t: t, url: fast.URL, user: user, version: version}
				b := &rawClient{t: t, url: sdkOnly.URL, user: user, version: version}
				a.initialize()
				b.initialize()
				all := "" // the members that list every user's workspaces, for an admin
				if user == "root" {
					all = `"allUsers":true,`
				}
				// The continue value of the first page of 2, to ask for the second.
				_, _, first := b.post(call("1", `{`+all+`"limit":2}`))
				next, _ := first["result"].(map[string]any)["structuredContent"].(map[string]any)["continue"].(string)
				if next == "" {
					t.Fatalf("%s: the first page of 2 has no continue value: %.300s", user, fmt.Sprint(first))
				}
				for _, tc := range []struct {
					name, body string
					fast       bool // answered by fastList (application/json), else by the SDK (a stream)
				}{
					{"no arguments", call("2", `{}`), true},
					{"null arguments", call("3", `null`), true},
					{"default page", call("4", `{`+all+`"limit":0}`), true},
					{"the second page, a string id", call(`"page-2"`, fmt.Sprintf(`{%s"limit":2,"continue":%q}`, all, next)), true},
					{"the largest page", call("6", `{`+all+`"limit":1000}`), true},
					{"with _meta", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_workspaces","arguments":{"limit":3},"_meta":{"progressToken":"p"}}}`, true},
					{"every user's as a user, or a limit out of range (tool errors)", call("8", `{"allUsers":true,"limit":1001}`), false},
					{"an unknown argument (a tool error)", call("9", `{"owner":"x"}`), false},
					{"another namespace (a tool error)", call("10", `{"namespace":"kube-system"}`), false},
					{"a fractional id", call("11.5", `{}`), false},
					{"a member the SDK reads case-sensitively", `{"jsonrpc":"2.0","id":12,"Method":"tools/call","params":{"name":"list_workspaces"}}`, false},
					{"an unknown params member", `{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"list_workspaces","task":{}}}`, false},
					{"another tool", `{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"list_templates","arguments":{}}}`, false},
				} {
					sa, cta, ma := a.post(tc.body)
					sb, _, mb := b.post(tc.body)
					if sa != sb || !reflect.DeepEqual(ma, mb) {
						t.Errorf("%s, %s: answered %d %.500s; the SDK answers %d %.500s", user, tc.name, sa, fmt.Sprint(ma), sb, fmt.Sprint(mb))
					}
					if gotFast := cta == "application/json"; gotFast != tc.fast {
						t.Errorf("%s, %s: answered as %q; want fastList's answer: %v", user, tc.name, cta, tc.fast)
					}
					if tc.fast {
						res := ma["result"].(map[string]any)
						var fromText any
						if err := json.Unmarshal([]byte(res["content"].([]any)[0].(map[string]any)["text"].(string)), &fromText); err != nil || !reflect.DeepEqual(fromText, res["structuredContent"]) {
							t.Errorf("%s, %s: the text block is not the structured content: %v", user, tc.name, err)
						}
					}
				}
				// Another subject's session is the SDK's to refuse, as ever.
				a.user, b.user = "mallory", "mallory"
				sa, cta, _ := a.post(call("16", `{}`))
				sb, _, _ := b.post(call("16", `{}`))
				if sa != sb || sa == http.StatusOK || cta == "application/json" {
					t.Errorf("mallory on %s's session: answered %d (%s); the SDK answers %d", user, sa, cta, sb)
				}
			}
		})
	}
	// A protocol version fastList does not know (2025-03-26's results differ) goes to the SDK.
	a := &rawClient{t: t, url: fast.URL, user: "root", version: "2025-03-26"}
	a.initialize()
	if _, ct, _ := a.post(call("1", `{}`)); ct == "application/json" {
		t.Errorf("a list at protocol version 2025-03-26 was answered by fastList")
	}
}

// TestFastListTakesTheAcceptHeadersTheSDKTakes: whichever Accept header a client sends, a list
// is answered as the SDK answers it: refused where the SDK refuses it, the same message where it
// answers. acceptsJSON mirrors the SDK's own (unexported) rule; this holds the two together.
func TestFastListTakesTheAcceptHeadersTheSDKTakes(t *testing.T) {
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{benchPods(3)}})
	if err != nil {
		t.Fatal(err)
	}
	asRoot := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), &auth.Caller{Subject: "root", IsAdmin: true})))
		})
	}
	fast := httptest.NewServer(asRoot(mcp.NewHandler(svc, mcp.Options{Version: "test"})))
	defer fast.Close()
	sdkOnly := httptest.NewServer(asRoot(mcp.NewHandler(svc, mcp.Options{Version: "test", NoFastList: true})))
	defer sdkOnly.Close()
	a := &rawClient{t: t, url: fast.URL, user: "root", version: "2025-11-25"}
	b := &rawClient{t: t, url: sdkOnly.URL, user: "root", version: "2025-11-25"}
	a.initialize()
	b.initialize()
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_workspaces","arguments":{"allUsers":true}}}`
	answered, fastAnswered := 0, 0
	for _, accept := range [][]string{
		{"application/json, text/event-stream"},
		{"application/json", "text/event-stream"},
		{"text/event-stream, application/json;q=0.9"},
		{"APPLICATION/JSON, Text/Event-Stream"},
		{"*/*"},
		{"application/*, text/*"},
		{"application/json"},
		{"text/event-stream"},
		{"text/html"},
		{""},
		{},
	} {
		a.accept, b.accept = accept, accept
		sa, cta, ma := a.post(list)
		sb, _, mb := b.post(list)
		if sa != sb || !reflect.DeepEqual(ma, mb) {
			t.Errorf("Accept %q: answered %d (%s) %.200s; the SDK answers %d %.200s", accept, sa, cta, fmt.Sprint(ma), sb, fmt.Sprint(mb))
		}
		if sa == http.StatusOK {
			answered++
		}
		if cta == "application/json" {
			fastAnswered++
		}
	}
	if answered == 0 || fastAnswered == 0 {
		t.Fatalf("%d Accept headers answered, %d of them by fastList: the comparison did not compare fastList's answers", answered, fastAnswered)
	}
}

// FuzzEscapedTextIsTheJSON: the text copy fastList writes (the list written escaped from the
// views, frontend.WorkspaceList.WriteEscapedJSON) is, read back as a JSON string, the structured
// content it repeats, whatever a workspace's strings hold.
func FuzzEscapedTextIsTheJSON(f *testing.F) {
	for _, s := range []string{"", `plain`, `"quoted" \ back`, "tab\there\nnew\x00nul", "é ✓ \u2028 \U0001F600", "<&>", "\x01"} {
		f.Add(s)
	}
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	f.Fuzz(func(t *testing.T, s string) {
		pods := benchPods(2)
		pods[1].Annotations["nogoo9/last-upgrade-error"] = s
		pods[1].Annotations["nogoo9/workspace-name"] = s
		svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{pods}})
		if err != nil {
			t.Fatal(err)
		}
		list, err := svc.List(admin, frontend.ListOptions{AllUsers: true})
		if err != nil {
			t.Fatal(err)
		}
		var js, text bytes.Buffer
		if err := list.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		if err := list.WriteEscapedJSON(&text); err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal([]byte(`"`+text.String()+`"`), &back); err != nil {
			t.Fatalf("the text copy of %s is no JSON string: %v", js.Bytes(), err)
		}
		if back != js.String() {
			t.Fatalf("the text copy reads %q, want %q", back, js.Bytes())
		}
	})
}

// BenchmarkEscapedText is the text copy of a page of 1,000 workspaces (about 0.4 MB of JSON):
// "whole" escapes the page's JSON as fastList did until the twenty-fourth round, "views" writes
// it escaped from the views as it does now (the shapes' literals escaped once per shape, each
// view's own values by the first write and kept: every iteration after the first copies them),
// and "plain" writes the structured copy, for scale.
func BenchmarkEscapedText(b *testing.B) {
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{benchPods(1000)}})
	if err != nil {
		b.Fatal(err)
	}
	list, err := svc.List(auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true}), frontend.ListOptions{AllUsers: true})
	if err != nil {
		b.Fatal(err)
	}
	var js bytes.Buffer
	if err := list.WriteJSON(&js); err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	for _, c := range []struct {
		name  string
		write func() error
	}{
		{"plain", func() error { return list.WriteJSON(&out) }},
		{"whole", func() error {
			_, err := out.Write(frontend.AppendEscaped(out.AvailableBuffer(), js.Bytes()))
			return err
		}},
		{"views", func() error { return list.WriteEscapedJSON(&out) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(js.Len()))
			for b.Loop() {
				out.Reset()
				if err := c.write(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
