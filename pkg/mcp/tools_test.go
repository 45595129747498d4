package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kfake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/mcp"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// workspaceServer is one workspace (benchPods' ws-0 of user-0, with these extra annotations)
// in a fake API server, the front end over it, and /mcp serving it to user-0.
type workspaceServer struct {
	pod    *corev1.Pod
	k8s    client.Client     // the pods, read back by the assertions
	events *kfake.Clientset  // the events of its pod
	srv    *httptest.Server  // /mcp
	svc    *frontend.Service // the front end behind it
	caller *auth.Caller      // user-0, the workspace's owner
	opts   mcp.Options       // the handler's options
	wrap   func(c corev1client.EventsGetter) corev1client.EventsGetter
}

func newWorkspaceServer(t *testing.T, ann map[string]string, configure func(*workspaceServer)) *workspaceServer {
	t.Helper()
	ws := &workspaceServer{pod: benchPods(1)[0], events: kfake.NewClientset(), caller: &auth.Caller{Subject: "user-0"}, opts: mcp.Options{Version: "test"}}
	for k, v := range ann {
		ws.pod.Annotations[k] = v
	}
	if configure != nil {
		configure(ws)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	ws.k8s = fake.NewClientBuilder().WithScheme(scheme).WithObjects(ws.pod).
		WithIndex(&corev1.Pod{}, frontend.IndexOwner, func(o client.Object) []string {
			if v := workspace.OwnerOf(o); v != "" {
				return []string{v}
			}
			return nil
		}).
		WithIndex(&corev1.Pod{}, podcache.IndexWorkspaceID, podcache.WorkspaceID).Build()
	var events corev1client.EventsGetter = ws.events.CoreV1()
	if ws.wrap != nil {
		events = ws.wrap(events)
	}
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Cache: ws.k8s, Client: ws.k8s, APIReader: ws.k8s, Events: events, Templates: oneTemplate{}, MaxFollowsPerUser: 1})
	if err != nil {
		t.Fatal(err)
	}
	ws.svc = svc
	h := mcp.NewHandler(svc, ws.opts)
	ws.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), ws.caller)))
	}))
	t.Cleanup(ws.srv.Close)
	return ws
}

// addEvent records a Kubernetes event about the workspace's pod.
func (ws *workspaceServer) addEvent(t *testing.T, reason string) {
	t.Helper()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: ws.pod.Name + "." + strings.ToLower(reason), Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: ws.pod.Name},
		Reason:         reason, Type: corev1.EventTypeNormal, Count: 1, LastTimestamp: metav1.Now(),
	}
	if _, err := ws.events.CoreV1().Events("ns").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// connect opens a session with the SDK's client.
func (ws *workspaceServer) connect(t *testing.T, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	s, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: ws.srv.URL, DisableStandaloneSSE: true, MaxRetries: -1, HTTPClient: &http.Client{Transport: &bearer{http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// annotations are the workspace pod's annotations as the API server has them now.
func (ws *workspaceServer) annotations(t *testing.T) map[string]string {
	t.Helper()
	var p corev1.Pod
	if err := ws.k8s.Get(context.Background(), client.ObjectKeyFromObject(ws.pod), &p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations
}

// callTool calls a tool and returns its structured answer decoded into out, or the tool error's
// text.
func callTool(t *testing.T, s *sdk.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if res.IsError {
		return res.Content[0].(*sdk.TextContent).Text
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return ""
}

// TestSetWorkspaceUpdateKeepsTheSettingLeftOut: set_workspace_update promises that the fields
// left out stay as they are, but giving only a window removed the workspace's own update policy
// (and giving only a policy its window): the front end sets both, and a missing one meant
// "remove". Each setting left out now keeps its value; an empty one given still clears it.
func TestSetWorkspaceUpdateKeepsTheSettingLeftOut(t *testing.T) {
	const sat, sun = "Sat 02:00-04:00 UTC", "Sun 01:00-03:00 UTC"
	for _, tc := range []struct {
		name                   string
		policy, window         string // the workspace's own settings before the call ("": none)
		args                   map[string]any
		wantPolicy, wantWindow string
	}{
		{"only a window keeps the policy", "window", sat, map[string]any{"window": sun}, "window", sun},
		{"only a policy keeps the window", "window", sat, map[string]any{"policy": "manual"}, "manual", sat},
		{"only a policy on a workspace without a window sets none", "when-idle", "", map[string]any{"policy": "manual"}, "manual", ""},
		{"only a window on a workspace that follows its template's policy", "", "", map[string]any{"window": sun}, "", sun},
		{"only pinned keeps both", "window", sat, map[string]any{"pinned": true}, "window", sat},
		{"both given set both", "window", sat, map[string]any{"policy": "on-start", "window": sun}, "on-start", sun},
		{"an empty policy and window given clear both", "window", sat, map[string]any{"policy": "", "window": ""}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.policy != "" {
				ann[workspace.AnnUpdatePolicy] = tc.policy
			}
			if tc.window != "" {
				ann[workspace.AnnUpdateWindow] = tc.window
			}
			ws := newWorkspaceServer(t, ann, nil)
			s := ws.connect(t, nil)
			args := map[string]any{"id": "ws-0"}
			for k, v := range tc.args {
				args[k] = v
			}
			var got frontend.Workspace
			if msg := callTool(t, s, "set_workspace_update", args, &got); msg != "" {
				t.Fatalf("set_workspace_update %v: %s", tc.args, msg)
			}
			a := ws.annotations(t)
			if a[workspace.AnnUpdatePolicy] != tc.wantPolicy || a[workspace.AnnUpdateWindow] != tc.wantWindow {
				t.Errorf("after set_workspace_update %v the pod has policy %q, window %q; want %q, %q", tc.args, a[workspace.AnnUpdatePolicy], a[workspace.AnnUpdateWindow], tc.wantPolicy, tc.wantWindow)
			}
			if got.UpdatePolicy != tc.wantPolicy || got.UpdateWindow != tc.wantWindow {
				t.Errorf("the answer says policy %q, window %q; want %q, %q", got.UpdatePolicy, got.UpdateWindow, tc.wantPolicy, tc.wantWindow)
			}
		})
	}
}

// slowEvents is an API server whose event lists take longer than any deadline they are given.
type slowEvents struct{ corev1client.EventsGetter }

func (s slowEvents) Events(ns string) corev1client.EventInterface {
	return slowEventList{s.EventsGetter.Events(ns)}
}

type slowEventList struct{ corev1client.EventInterface }

func (s slowEventList) List(ctx context.Context, o metav1.ListOptions) (*corev1.EventList, error) {
	if _, ok := ctx.Deadline(); ok {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.EventInterface.List(ctx, o)
}

// TestFollowTimeoutStartsAfterThePastEventsAreRead: a follow's timeoutSeconds bounds the
// following, as REST's timeout does, not the reading of the past events before it: with the
// timeout running from the call's start, an API server slower than a short timeout turned the
// follow into "reading events failed".
func TestFollowTimeoutStartsAfterThePastEventsAreRead(t *testing.T) {
	ws := newWorkspaceServer(t, nil, func(ws *workspaceServer) {
		ws.wrap = func(c corev1client.EventsGetter) corev1client.EventsGetter { return slowEvents{c} }
	})
	ws.addEvent(t, "Scheduled")
	s := ws.connect(t, nil)
	var out struct {
		Events []frontend.Event `json:"events"`
		Ended  string           `json:"ended"`
	}
	if msg := callTool(t, s, "get_workspace_events", map[string]any{"id": "ws-0", "follow": true, "timeoutSeconds": 1}, &out); msg != "" {
		t.Fatalf("a follow whose past events took longer than its timeout to read failed: %s", msg)
	}
	if out.Ended != "timeout" || len(out.Events) != 1 || out.Events[0].Reason != "Scheduled" {
		t.Errorf("the follow answered %+v; want the past event and ended timeout", out)
	}
}

// sseFollow opens a follow of ws-0 by hand (the SDK's client gives no way to drop one call's
// connection) on a session it initializes, with a progress token, and returns once the first
// notification arrived, with the function that drops the connection.
func sseFollow(t *testing.T, ws *workspaceServer) (drop func()) {
	t.Helper()
	c := &rawClient{t: t, url: ws.srv.URL, user: ws.caller.Subject, version: "2025-06-18"}
	c.initialize()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_workspace_events","arguments":{"id":"ws-0","follow":true,"timeoutSeconds":300},"_meta":{"progressToken":"p"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer test")
	req.Header.Set("Mcp-Session-Id", c.session)
	req.Header.Set("Mcp-Protocol-Version", c.version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	if !strings.Contains(sc.Text(), "notifications/progress") {
		cancel()
		t.Fatalf("the follow's first message is %q, want a progress notification", sc.Text())
	}
	return func() {
		cancel()
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestAbandonedFollowFreesItsSlot: the SDK runs a tool call detached from the HTTP request
// that carries it and nogoo9 ignored failed notifications, so a follow whose client went away
// held one of its user's follow slots (here the only one) until its timeout, five minutes.
// Now it ends when its request ends, and the user's next follow is accepted at once.
func TestAbandonedFollowFreesItsSlot(t *testing.T) {
	ws := newWorkspaceServer(t, nil, nil)
	ws.addEvent(t, "Scheduled")
	drop := sseFollow(t, ws)
	s := ws.connect(t, nil)
	if msg := callTool(t, s, "get_workspace_events", map[string]any{"id": "ws-0", "follow": true, "timeoutSeconds": 1}, nil); !strings.Contains(msg, "already follow") {
		t.Fatalf("a second follow while the first is open answered %q; want the refusal (the test needs the slot taken)", msg)
	}
	drop()
	g := NewWithT(t)
	g.Eventually(func() string {
		return callTool(t, s, "get_workspace_events", map[string]any{"id": "ws-0", "follow": true, "timeoutSeconds": 1}, nil)
	}, 20*time.Second, 50*time.Millisecond).Should(BeEmpty(), "the follow whose client went away still holds the user's only follow slot")
}

// TestFollowSendsHeartbeats: a follow with a progress token and no new events sends a progress
// notification without a message every Options.FollowHeartbeat, with increasing progress: the
// notification that cannot be delivered once the client went away ends the follow.
func TestFollowSendsHeartbeats(t *testing.T) {
	ws := newWorkspaceServer(t, nil, func(ws *workspaceServer) { ws.opts.FollowHeartbeat = 20 * time.Millisecond })
	ws.addEvent(t, "Scheduled")
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	s := ws.connect(t, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Params)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "get_workspace_events", Arguments: map[string]any{"id": "ws-0", "follow": true, "timeoutSeconds": 1},
		Meta: sdk.Meta{"progressToken": "p"}})
	if err != nil || res.IsError {
		t.Fatalf("follow: %v %v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 3 || !strings.Contains(got[0].Message, "Scheduled") {
		t.Fatalf("a follow of 1 s with a heartbeat every 20 ms sent %d progress notifications; want the event and heartbeats", len(got))
	}
	for i, p := range got {
		if i > 0 && p.Message != "" {
			t.Errorf("notification %d carries %q; a heartbeat carries no message", i, p.Message)
		}
		if i > 0 && p.Progress <= got[i-1].Progress {
			t.Errorf("notification %d has progress %v after %v; progress must increase", i, p.Progress, got[i-1].Progress)
		}
	}
}
