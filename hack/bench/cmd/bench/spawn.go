package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/hack/bench"
	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

const spawns = 200

func titleSpawn() string {
	return fmt.Sprintf("3. Spawn latency (%d spawns, one at a time, per round)", spawns)
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// mcpSession connects the official go-sdk client to nogoo9's /mcp.
func (n *nogoo9Proc) mcpSession(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "nogoo9-bench", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: n.api + "/mcp", DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{token: n.token, next: http.DefaultTransport}}}
	s, err := client.Connect(ctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connect MCP client to %s/mcp: %w", n.api, err)
	}
	return s, nil
}

func callTool(ctx context.Context, s *mcp.ClientSession, name string, args map[string]any) error {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return fmt.Errorf("MCP %s: %w", name, err)
	}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, t.Text)
			}
		}
		return fmt.Errorf("MCP %s: tool error: %s", name, strings.Join(msg, " "))
	}
	return nil
}

// readyTracker records when each pod of a namespace is first seen Ready, keyed by key(pod).
type readyTracker struct {
	mu    sync.Mutex
	ready map[string]time.Time
}

func (t *readyTracker) observe(pods []*corev1.Pod, key func(*corev1.Pod) string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range pods {
		if k := key(p); k != "" && workspace.IsReady(p) {
			if _, ok := t.ready[k]; !ok {
				t.ready[k] = now
			}
		}
	}
}

// spawnRound creates spawns workspaces one at a time with create(i) and returns the request
// latencies and the times from request start to the pod seen Ready, in milliseconds.
func spawnRound(ctx context.Context, cs kubernetes.Interface, ns, selector string, key func(*corev1.Pod) string, id func(i int) string,
	create func(ctx context.Context, i int) error) (lat, ready []float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	tr := &readyTracker{ready: map[string]time.Time{}}
	starts := make([]time.Time, spawns)
	done := make(chan error, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		done <- bench.WaitPods(wctx, cs, ns, selector, "spawned pods Ready", func(pods []*corev1.Pod) bool {
			tr.observe(pods, key)
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return len(tr.ready) >= spawns
		})
	}()
	for i := 0; i < spawns; i++ {
		starts[i] = time.Now()
		if err := create(ctx, i); err != nil {
			return nil, nil, err
		}
		lat = append(lat, float64(time.Since(starts[i]).Microseconds())/1000)
	}
	if err := <-done; err != nil {
		return nil, nil, err
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := 0; i < spawns; i++ {
		if at, ok := tr.ready[id(i)]; ok {
			ready = append(ready, float64(at.Sub(starts[i]).Microseconds())/1000)
		}
	}
	return lat, ready, nil
}

// cleanup deletes every pod of ns matching selector and waits until they are gone.
func cleanup(ctx context.Context, cs kubernetes.Interface, ns, selector string) error {
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: selector}); err != nil {
		return fmt.Errorf("delete pods %s in %s: %w", selector, ns, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return bench.WaitPods(cctx, cs, ns, selector, "spawned pods gone", func(p []*corev1.Pod) bool { return len(p) == 0 })
}

// figureSpawn measures figure 3: spawn_workspace through REST and MCP against a bare pod create
// (the floor of any spawn), and the time until the pod is Ready on kwok.
func figureSpawn(ctx context.Context, c config, res *bench.Results, cl *localcluster.Cluster, cs kubernetes.Interface, n *nogoo9Proc) error {
	fig := titleSpawn()
	const tmpl = "bench-spawn"
	set := &wsSet{n: n, cs: cs, template: tmpl, count: 0}
	if _, err := cs.CoreV1().ConfigMaps(n.namespace).Create(ctx, set.configMap(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create template %s: %w", tmpl, err)
	}
	if err := set.waitTemplate(ctx); err != nil {
		return err
	}
	session, err := n.mcpSession(ctx)
	if err != nil {
		return err
	}
	defer session.Close()
	const bareNS = "bench-spawn-bare"
	if err := ensureNS(ctx, cs, bareNS); err != nil {
		return err
	}
	wsSel := workspace.LabelTemplate + "=" + tmpl
	wsKey := func(p *corev1.Pod) string { return p.Labels[workspace.LabelWorkspaceID] }
	record := func(subject string, lat, ready []float64) {
		res.Add(fig, "p50 "+subject, "ms", bench.Percentile(lat, 50))
		res.Add(fig, "p99 "+subject, "ms", bench.Percentile(lat, 99))
		res.Add(fig, "p50 until Ready, "+subject, "ms", bench.Percentile(ready, 50))
		res.Add(fig, "p99 until Ready, "+subject, "ms", bench.Percentile(ready, 99))
	}
	for r := 1; r <= c.rounds && ctx.Err() == nil; r++ {
		logf("figure 3: round %d of %d", r, c.rounds)
		// Baseline: a bare client creating an equivalent pod straight on the API server.
		lat, ready, err := spawnRound(ctx, cs, bareNS, "bench.nogoo9/spawn=bare", func(p *corev1.Pod) string { return p.Name },
			func(i int) string { return fmt.Sprintf("bare-%d-%d", r, i) },
			func(ctx context.Context, i int) error {
				_, err := cs.CoreV1().Pods(bareNS).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bare-%d-%d", r, i), Labels: map[string]string{"bench.nogoo9/spawn": "bare"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "registry.local/bench/ide:v0"}},
						TerminationGracePeriodSeconds: ptr.To[int64](0)},
				}, metav1.CreateOptions{})
				return err
			})
		if err != nil {
			res.Fail(fig, "p50 bare pod create", "ms", err)
		} else {
			record("bare pod create", lat, ready)
		}
		if err := cleanup(ctx, cs, bareNS, "bench.nogoo9/spawn=bare"); err != nil {
			return err
		}
		for _, via := range []string{"REST", "MCP"} {
			id := func(i int) string { return fmt.Sprintf("s%d-%s-%d", r, strings.ToLower(via), i) }
			lat, ready, err := spawnRound(ctx, cs, n.namespace, wsSel, wsKey, id, func(ctx context.Context, i int) error {
				if via == "REST" {
					return n.call(ctx, http.MethodPost, "/api/v1/workspaces", map[string]any{"template": tmpl, "id": id(i)}, nil)
				}
				return callTool(ctx, session, "spawn_workspace", map[string]any{"template": tmpl, "id": id(i)})
			})
			subject := "spawn_workspace via " + via
			if err != nil {
				res.Fail(fig, "p50 "+subject, "ms", err)
			} else {
				record(subject, lat, ready)
			}
			if err := cleanup(ctx, cs, n.namespace, wsSel); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{"p50 ", "p99 "} {
		res.Compare(fig, p+"spawn_workspace via REST", p+"bare pod create")
		res.Compare(fig, p+"spawn_workspace via MCP", p+"bare pod create")
		res.Compare(fig, p+"until Ready, spawn_workspace via REST", p+"until Ready, bare pod create")
		res.Compare(fig, p+"until Ready, spawn_workspace via MCP", p+"until Ready, bare pod create")
	}
	res.Note(fig, "latency is the caller's round trip on loopback (nogoo9 authenticates every call with a TokenReview); 'until Ready' runs from the request to the pod seen Ready through a watch")
	return nil
}
