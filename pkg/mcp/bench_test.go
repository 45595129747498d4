package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/mcp"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// replayInformer hands the views a fixed set of pods, as the cache's informer does on its
// initial list, and reports synced.
type replayInformer struct{ pods []*corev1.Pod }

type syncedReg struct {
	toolscache.ResourceEventHandlerRegistration
}

func (syncedReg) HasSynced() bool { return true }

func (r replayInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	for _, p := range r.pods {
		h.OnAdd(p, true)
	}
	return syncedReg{}, nil
}

type oneTemplate struct{}

func (oneTemplate) Get(name string) (*templates.Template, bool) {
	return &templates.Template{Name: name, Version: "1.0"}, true
}
func (oneTemplate) Infos(string) []frontend.TemplateInfo { return nil }

func benchPods(n int) []*corev1.Pod {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		owner, id := fmt.Sprintf("user-%d", i%100), fmt.Sprintf("ws-%d", i)
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: workspace.PodName(owner, id), Namespace: "ns", UID: types.UID("uid-" + id),
				CreationTimestamp: metav1.NewTime(t0),
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
					workspace.LabelUserSub: workspace.UserLabel(owner), workspace.LabelTemplate: "bench",
					workspace.LabelTemplateVersion: workspace.VersionLabel("1.0")},
				Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: "1.0",
					workspace.AnnWorkspaceName: id, workspace.AnnWorkspacePath: "/ws/" + workspace.UserLabel(owner) + "/" + id + "/",
					workspace.AnnWorkspacePort: "8080"},
			},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "ide", Image: "registry.local/ide:v1"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	return pods
}

// BenchmarkListAllMCPvsREST compares, in one run, an admin's list of all 10,000 workspaces
// through REST (GET /api/v1/workspaces?all=true, in one answer and in pages of 1,000) and through
// MCP (list_workspaces with the SDK's client over the Streamable HTTP transport, in pages of
// mcp.MaxListLimit, the most one answer holds), both on loopback from the same views. Compare
// the ratio, not the absolute times (the machine is shared). The -SDK runs list through a handler
// whose answers the SDK encodes (mcp.Options.NoFastList), what every answer was before fastList.
func BenchmarkListAllMCPvsREST(b *testing.B) {
	const n = 10000
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{benchPods(n)}})
	if err != nil {
		b.Fatal(err)
	}
	admin := &auth.Caller{Subject: "root", IsAdmin: true}
	withAdmin := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), admin)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", withAdmin(api.NewREST(svc)))
	mux.Handle("/mcp", withAdmin(mcp.NewHandler(svc, mcp.Options{Version: "bench"})))
	// The SDK's own answer (fastList off), for the same-run comparison: the -SDK runs.
	mux.Handle("/mcp-sdk", withAdmin(mcp.NewHandler(svc, mcp.Options{Version: "bench", NoFastList: true})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	hc := &http.Client{Transport: &bearer{http.DefaultTransport}}

	restPages := func(b *testing.B, limit string) {
		got, path := 0, "/api/v1/workspaces?all=true"+limit
		for {
			resp, err := hc.Get(srv.URL + path)
			if err != nil {
				b.Fatal(err)
			}
			var p struct {
				Workspaces []json.RawMessage `json:"workspaces"`
				Continue   string            `json:"continue"`
			}
			err = json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("status %d: %v", resp.StatusCode, err)
			}
			got += len(p.Workspaces)
			if p.Continue == "" {
				break
			}
			path = "/api/v1/workspaces?all=true" + limit + "&continue=" + p.Continue
		}
		if got != n {
			b.Fatalf("listed %d workspaces, want %d", got, n)
		}
	}
	// REST-raw reads the answer's bytes without parsing them (what figure 4 of make bench
	// times for REST); REST and REST-pages parse it into one raw element per workspace, as a
	// client that uses the list must, and as the go-sdk's client always does with an MCP answer.
	b.Run("REST-raw", func(b *testing.B) {
		for b.Loop() {
			resp, err := hc.Get(srv.URL + "/api/v1/workspaces?all=true")
			if err != nil {
				b.Fatal(err)
			}
			got, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || got < n*100 {
				b.Fatalf("status %d, %d bytes", resp.StatusCode, got)
			}
		}
	})
	b.Run("REST", func(b *testing.B) {
		for b.Loop() {
			restPages(b, "")
		}
	})
	b.Run("REST-pages", func(b *testing.B) {
		for b.Loop() {
			restPages(b, fmt.Sprintf("&limit=%d", mcp.MaxListLimit))
		}
	})
	// MCP-raw is MCP-pages with the answers' bytes read but not parsed, as REST-raw reads REST's:
	// the server's cost and the transfer, without the client's.
	// connect opens an MCP session on path with the SDK's client, closed when b ends.
	connect := func(b *testing.B, path string) *sdk.ClientSession {
		client := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
		session, err := client.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: srv.URL + path, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { session.Close() })
		return session
	}
	for _, ep := range []struct{ name, path string }{{"", "/mcp"}, {"-SDK", "/mcp-sdk"}} {
		b.Run("MCP-raw"+ep.name, func(b *testing.B) {
			session := connect(b, ep.path)
			var buf bytes.Buffer
			for b.Loop() {
				next := ""
				for page := 0; page < n/mcp.MaxListLimit; page++ {
					args := fmt.Sprintf(`{"allUsers":true,"limit":%d,"continue":%q}`, mcp.MaxListLimit, next)
					body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_workspaces","arguments":` + args + `}}`
					req, _ := http.NewRequest(http.MethodPost, srv.URL+ep.path, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Accept", "application/json, text/event-stream")
					req.Header.Set("Mcp-Session-Id", session.ID())
					req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
					resp, err := hc.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					buf.Reset()
					_, _ = buf.ReadFrom(resp.Body)
					resp.Body.Close()
					raw := buf.Bytes()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d: %.300s", resp.StatusCode, raw)
					}
					// The continue value ends the structured content, the answer's last member:
					// look at the tail only (a search of the whole answer was a tenth of the time).
					tail := raw[max(0, len(raw)-512):]
					i := bytes.LastIndex(tail, []byte(`"continue":"`))
					if page == n/mcp.MaxListLimit-1 && i >= 0 {
						b.Fatalf("more than %d pages for %d workspaces", n/mcp.MaxListLimit, n)
					}
					if page < n/mcp.MaxListLimit-1 {
						if i < 0 {
							b.Fatalf("page %d has no continue: %.300s", page, raw[len(raw)-300:])
						}
						rest := tail[i+len(`"continue":"`):]
						next = string(rest[:bytes.IndexByte(rest, '"')])
					}
				}
			}
		})
		b.Run("MCP-pages"+ep.name, func(b *testing.B) {
			ctx := context.Background()
			session := connect(b, ep.path)
			for b.Loop() {
				got, args := 0, map[string]any{"allUsers": true, "limit": mcp.MaxListLimit}
				for {
					res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "list_workspaces", Arguments: args})
					if err != nil || res.IsError {
						b.Fatalf("%v %v", err, res)
					}
					m, _ := res.StructuredContent.(map[string]any)
					ws, _ := m["workspaces"].([]any)
					got += len(ws)
					c, _ := m["continue"].(string)
					if c == "" {
						break
					}
					args["continue"] = c
				}
				if got != n {
					b.Fatalf("listed %d workspaces, want %d", got, n)
				}
			}
		})
	}
}

type bearer struct{ rt http.RoundTripper }

func (t *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer bench")
	return t.rt.RoundTrip(r)
}
