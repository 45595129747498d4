package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
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

func titleRead(scale int) string {
	return fmt.Sprintf("4. Read path at scale (%d workspace pods)", scale)
}
func titleMemory(scale, other int) string {
	return fmt.Sprintf("5. Memory at scale (%d workspace pods + %d other pods)", scale, other)
}

const (
	scaleNS = "bench-scale"
	otherNS = "bench-other"
	lists   = 30 // list_workspaces calls per round and interface
)

// populate creates scale workspace pods (labels and annotations per the contracts) and other
// plain pods, and waits until kwok runs all of them.
func populate(ctx context.Context, c config, cs kubernetes.Interface, node string) error {
	for _, ns := range []string{scaleNS, otherNS} {
		if err := ensureNS(ctx, cs, ns); err != nil {
			return err
		}
	}
	logf("creating %d workspace pods and %d other pods", c.scale, c.other)
	t := time.Now()
	err := bench.Parallel(ctx, c.scale+c.other, 64, func(ctx context.Context, i int) error {
		var pod *corev1.Pod
		if i < c.scale {
			owner := fmt.Sprintf("user-%d", i%100)
			id := fmt.Sprintf("ws-%d", i)
			pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: workspace.PodName(owner, id), Namespace: scaleNS,
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
					workspace.LabelUserSub: workspace.UserLabel(owner), workspace.LabelTemplate: "bench-scale",
					workspace.LabelTemplateVersion: workspace.VersionLabel("1")},
				Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: "1",
					workspace.AnnWorkspaceName: id, workspace.AnnWorkspacePath: "/ws/" + workspace.UserLabel(owner) + "/" + id + "/",
					workspace.AnnWorkspacePort: "8080", workspace.AnnContext: `{"repo":"https://example.com/r.git"}`},
			}}
		} else {
			pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other-%d", i), Namespace: otherNS,
				Labels: map[string]string{"app": "other"}}}
		}
		pod.Spec = corev1.PodSpec{
			// Bound to the kwok node at creation: thousands of pods need no scheduling here, and
			// the scheduler would only slow the setup down.
			NodeName: node,
			Containers: []corev1.Container{{Name: "ide", Image: "registry.local/bench/ide:v1",
				Env:   []corev1.EnvVar{{Name: "HOME", Value: "/home/user"}, {Name: "LANG", Value: "C.UTF-8"}},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		}
		_, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create pods: %w", err)
	}
	logf("created in %s; waiting for kwok to run them", time.Since(t).Round(time.Second))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for _, p := range []struct {
		ns string
		n  int
	}{{scaleNS, c.scale}, {otherNS, c.other}} {
		err := bench.WaitPods(wctx, cs, p.ns, "", fmt.Sprintf("%d pods Running in %s", p.n, p.ns), func(pods []*corev1.Pod) bool {
			ready := 0
			for _, pod := range pods {
				if workspace.IsReady(pod) {
					ready++
				}
			}
			return ready >= p.n
		})
		if err != nil {
			return err
		}
	}
	logf("all pods Running after %s", time.Since(t).Round(time.Second))
	return nil
}

// heapInuse reads go_memstats_heap_inuse_bytes from a Prometheus endpoint.
func heapInuse(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("%s has no go_memstats_heap_inuse_bytes", url)
}

// measureMemory records RSS and heap of a process after its cache has settled.
func measureMemory(ctx context.Context, res *bench.Results, fig, subject string, pid int, metricsURL string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(3 * time.Second):
	}
	if rss, err := bench.RSSBytes(pid); err != nil {
		res.Fail(fig, "RSS, "+subject, "MiB", err)
	} else {
		res.Add(fig, "RSS, "+subject, "MiB", rss/(1<<20))
	}
	if h, err := heapInuse(ctx, metricsURL); err != nil {
		res.Fail(fig, "Go heap in use, "+subject, "MiB", err)
	} else {
		res.Add(fig, "Go heap in use, "+subject, "MiB", h/(1<<20))
	}
	if dir := os.Getenv("BENCH_PPROF_DIR"); dir != "" {
		saveMemoryBreakdown(ctx, pid, metricsURL, filepath.Join(dir, fmt.Sprintf("mem-%s-%d.txt", strings.ReplaceAll(subject, " ", "-"), time.Now().Unix())))
	}
}

// saveMemoryBreakdown writes, at the figure-5 sample, where the process's RSS goes: the kernel's
// split (/proc/<pid>/smaps_rollup: anonymous memory against file-backed pages such as the
// binary's text) and the Go runtime's (the go_memstats_* and go_gc_* lines of /metrics: heap in
// use, idle heap not yet returned, stacks, span and GC metadata), to tell RSS beyond the heap
// apart (bench/history.md, "Memory per workspace").
func saveMemoryBreakdown(ctx context.Context, pid int, metricsURL, path string) {
	var out bytes.Buffer
	for _, f := range []string{"smaps_rollup", "status"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			fmt.Fprintf(&out, "# /proc/%d/%s: %v\n", pid, f, err)
			continue
		}
		fmt.Fprintf(&out, "# /proc/%d/%s\n%s\n", pid, f, b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			fmt.Fprintf(&out, "# %s (go_memstats_*, go_gc_*, go_goroutines)\n", metricsURL)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				if l := sc.Text(); strings.HasPrefix(l, "go_memstats_") || strings.HasPrefix(l, "go_gc_") || strings.HasPrefix(l, "go_goroutines") {
					out.WriteString(l + "\n")
				}
			}
			_ = resp.Body.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(&out, "# %s: %v\n", metricsURL, err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		logf("memory breakdown: %v", err)
	}
}

// naiveRound starts the naive-cache baseline, records its cold start and memory, and stops it.
func naiveRound(ctx context.Context, c config, cl *localcluster.Cluster, bin string, res *bench.Results) error {
	figR, figM := titleRead(c.scale), titleMemory(c.scale, c.other)
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return err
	}
	t := time.Now()
	p, err := bench.StartProcess("naivecache", bin, []string{
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1])},
		filepath.Join(cl.Dir, "naivecache.log"), "KUBECONFIG="+cl.Kubeconfig)
	if err != nil {
		return err
	}
	defer p.Stop()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := p.WaitHTTP(sctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), nil); err != nil {
		return err
	}
	logf("naive cache: /readyz answered %s after the process start", time.Since(t).Round(time.Millisecond))
	res.Add(figR, "cold start until cache synced, naive cache of every Pod", "s", time.Since(t).Seconds())
	measureMemory(ctx, res, figM, "naive cache of every Pod", p.PID(), fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]))
	return nil
}

// nogoo9Round starts nogoo9, records its cold start (until /readyz and a list of all workspaces
// answers with every one of them), list latencies through REST and MCP, and its memory.
func nogoo9Round(ctx context.Context, c config, cl *localcluster.Cluster, cs kubernetes.Interface, res *bench.Results) error {
	return nogoo9ScaleRound(ctx, c, cl, res, "nogoo9", true)
}

// beforeRound measures the -nogoo9-before binary like nogoo9Round: its rows are "nogoo9 before",
// its list rows end in ", nogoo9 before".
func beforeRound(ctx context.Context, c config, cl *localcluster.Cluster, res *bench.Results) error {
	c.nogoo9 = c.before
	return nogoo9ScaleRound(ctx, c, cl, res, beforeSubject, true)
}

const beforeSubject = "nogoo9 before"

// nogoo9ScaleRound runs c.nogoo9 once: cold start, memory (rows named after subject) and, with
// lists, the list latencies.
func nogoo9ScaleRound(ctx context.Context, c config, cl *localcluster.Cluster, res *bench.Results, subject string, withLists bool) error {
	figR, figM := titleRead(c.scale), titleMemory(c.scale, c.other)
	hasAPI := nogoo9Supports(c.nogoo9, "--auth") == nil
	var extra []string
	pprofAddr := ""
	if dir := os.Getenv("BENCH_PPROF_DIR"); dir != "" {
		ports, err := localcluster.FreePorts(1)
		if err != nil {
			return err
		}
		pprofAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		extra = append(extra, "--pprof-bind-address="+pprofAddr)
	}
	n, err := startNogoo9(ctx, c, cl, scaleNS, strings.ReplaceAll(subject, " ", "-")+"-scale", extra...)
	if err != nil {
		return err
	}
	defer n.stop()
	// The cold start counts from the process start, like the naive baseline's: the harness's
	// set-up before it (namespaces, the caller's token, `--help` for flags) is not nogoo9's.
	t := n.started
	var cpu chan struct{}
	if pprofAddr != "" {
		cpu = make(chan struct{})
		go func() {
			defer close(cpu)
			saveProfile(ctx, pprofAddr, "profile?seconds=4", filepath.Join(os.Getenv("BENCH_PPROF_DIR"), fmt.Sprintf("cpu-start-%s-%d-%d.pprof", strings.ReplaceAll(subject, " ", "-"), c.scale, time.Now().Unix())))
		}()
	}
	ready := time.Since(t)
	end, coldLists := time.Now(), 0
	if hasAPI {
		for {
			var out struct {
				Workspaces []json.RawMessage `json:"workspaces"`
			}
			// The cold start ends when the answer has arrived: decoding 10,000 workspaces here
			// (tens of ms) is the harness's work, as the naive baseline's has none.
			var b []byte
			err := n.call(ctx, http.MethodGet, "/api/v1/workspaces?all=true", nil, &b)
			end, coldLists = time.Now(), coldLists+1
			if err == nil {
				err = json.Unmarshal(b, &out)
			}
			if err == nil && len(out.Workspaces) >= c.scale {
				break
			}
			if ctx.Err() != nil || time.Since(t) > 3*time.Minute {
				return fmt.Errorf("nogoo9 never listed %d workspaces (last: %d, %v)", c.scale, len(out.Workspaces), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	logf("%s: /readyz answered %s after the process start, a list returned every workspace after %s (%d list calls)", subject, ready.Round(time.Millisecond), end.Sub(t).Round(time.Millisecond), coldLists)
	res.Add(figR, "cold start until ready and cache synced, "+subject, "s", end.Sub(t).Seconds())
	// 3 s after the cold start ended (the first list that returned every workspace), before the
	// timed list calls add their garbage; the baseline 3 s after its cache synced.
	measureMemory(ctx, res, figM, subject, n.proc.PID(), n.metrics)
	if pprofAddr != "" {
		<-cpu // the start-up's CPU profile: 4 s from ready, before the heap profile's forced GC
		saveProfile(ctx, pprofAddr, "heap?gc=1", filepath.Join(os.Getenv("BENCH_PPROF_DIR"), fmt.Sprintf("heap-%s-%d-%d.pprof", strings.ReplaceAll(subject, " ", "-"), c.scale, time.Now().Unix())))
	}
	if hasAPI && withLists {
		var rest, viaMCP, viaMCPRaw, pairs []float64
		// The bytes rows read every answer into this one buffer, REST's and MCP's alike: a
		// fresh buffer per answer (io.ReadAll) made this process zero and return memory for
		// most of its CPU (a profile of the twenty-fourth round: 31% memclr, 16% madvise), the
		// benchmark measuring its own allocator more than nogoo9.
		var buf bytes.Buffer
		session, err := n.mcpSession(ctx)
		if err != nil {
			return err
		}
		defer session.Close()
		// REST's and MCP's bytes rows in pairs, in turn first, so that whatever else the machine
		// does while they run (kwok, kube-apiserver, the collector of either process) falls on
		// both rows alike: in blocks one after the other the ratio of their p50s moved by 40%
		// from round to round (twenty-fourth round).
		timed := func(fn func() error) (float64, error) {
			s := time.Now()
			err := fn()
			return float64(time.Since(s).Microseconds()) / 1000, err
		}
		restCall := func() error { return n.readInto(ctx, "/api/v1/workspaces?all=true", &buf) }
		rawCall := func() error { return n.listAllViaMCPRaw(ctx, session, c.scale, &buf) }
		for i := 0; i < lists; i++ {
			first, second := restCall, rawCall
			if i%2 == 1 {
				first, second = rawCall, restCall
			}
			d1, err := timed(first)
			if err != nil {
				return err
			}
			d2, err := timed(second)
			if err != nil {
				return err
			}
			if i%2 == 1 {
				d1, d2 = d2, d1
			}
			rest, viaMCPRaw = append(rest, d1), append(viaMCPRaw, d2)
			pairs = append(pairs, d2/d1)
		}
		for i := 0; i < lists; i++ {
			d, err := timed(func() error { return listAllViaMCP(ctx, session, c.scale) })
			if err != nil {
				return err
			}
			viaMCP = append(viaMCP, d)
		}
		if pprofAddr != "" { // the raw MCP lists' CPU profile, not timed: they take about a second
			cpuDone := make(chan struct{})
			go func() {
				defer close(cpuDone)
				saveProfile(ctx, pprofAddr, "profile?seconds=2", filepath.Join(os.Getenv("BENCH_PPROF_DIR"), fmt.Sprintf("cpu-mcp-raw-%s-%d-%d.pprof", strings.ReplaceAll(subject, " ", "-"), c.scale, time.Now().Unix())))
			}()
			// The client's side of the same lists: this process's CPU while it reads them.
			stop := profileSelf(filepath.Join(os.Getenv("BENCH_PPROF_DIR"), fmt.Sprintf("cpu-client-mcp-raw-%s-%d-%d.pprof", strings.ReplaceAll(subject, " ", "-"), c.scale, time.Now().Unix())))
			for !closed(cpuDone) {
				if err := rawCall(); err != nil {
					stop()
					return err
				}
			}
			stop()
		}
		// Memory again after the lists: an MCP list keeps each view's escaped values (the text
		// copy's), which the sample before the lists does not hold.
		measureMemory(ctx, res, figM, subject+afterListsSuffix, n.proc.PID(), n.metrics)
		sfx := listRowSuffix(subject)
		res.Add(figR, "p50 "+restListRow+sfx, "ms", bench.Percentile(rest, 50))
		res.Add(figR, "p99 "+restListRow+sfx, "ms", bench.Percentile(rest, 99))
		res.Add(figR, "p50 "+mcpListRow+sfx, "ms", bench.Percentile(viaMCP, 50))
		res.Add(figR, "p99 "+mcpListRow+sfx, "ms", bench.Percentile(viaMCP, 99))
		res.Add(figR, "p50 "+mcpRawListRow+sfx, "ms", bench.Percentile(viaMCPRaw, 50))
		res.Add(figR, "p99 "+mcpRawListRow+sfx, "ms", bench.Percentile(viaMCPRaw, 99))
		res.Add(figR, mcpPairRow+sfx, "x", bench.Percentile(pairs, 50))
	}
	return nil
}

// mcpListPage is the most workspaces one list_workspaces answer holds (pkg/mcp.MaxListLimit): the
// whole list through MCP is every page, each continuing where the previous one ended.
const (
	mcpListPage = 1000
	mcpListRow  = "list_workspaces via MCP (all users, pages of 1000)"
	restListRow = "list_workspaces via REST (all users)"
	// mcpRawListRow is the same pages with each answer's bytes read and not parsed, as the REST
	// row reads REST's answer: nogoo9's cost and the transfer, without the go-sdk client's parse.
	mcpRawListRow = "list_workspaces via MCP, bytes read (all users, pages of 1000)"
	// afterListsSuffix ends the memory rows sampled after the timed lists.
	afterListsSuffix = ", after the timed lists"
	// mcpPairRow is the median, over the pairs of calls made one after the other, of the MCP
	// bytes row's time over REST's.
	mcpPairRow = "MCP bytes read / REST, median of paired calls"
)

// closed reports whether c is closed.
func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// listRowSuffix ends the list rows of subject: none for nogoo9, ", nogoo9 before" for the
// binary it is compared with.
func listRowSuffix(subject string) string {
	if subject == "nogoo9" {
		return ""
	}
	return ", " + subject
}

// listAllViaMCP lists every workspace through list_workspaces, page by page, and checks that
// want workspaces came back.
func listAllViaMCP(ctx context.Context, s *mcp.ClientSession, want int) error {
	got, args := 0, map[string]any{"allUsers": true, "limit": mcpListPage}
	for pages := 1; ; pages++ {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "list_workspaces", Arguments: args})
		if err != nil {
			return fmt.Errorf("MCP list_workspaces: %w", err)
		}
		m, _ := res.StructuredContent.(map[string]any)
		if res.IsError || m == nil {
			return fmt.Errorf("MCP list_workspaces answered an error or no structured content (page %d)", pages)
		}
		ws, _ := m["workspaces"].([]any)
		got += len(ws)
		next, _ := m["continue"].(string)
		if next == "" {
			break
		}
		if pages > want/mcpListPage+1 {
			return fmt.Errorf("MCP list_workspaces: more than %d pages for %d workspaces", pages, want)
		}
		args["continue"] = next
	}
	if got < want {
		return fmt.Errorf("MCP list_workspaces listed %d workspaces, want %d", got, want)
	}
	return nil
}

// listAllViaMCPRaw lists every workspace through list_workspaces on session s, page by page,
// as raw JSON-RPC posts whose answers are read whole but not parsed (the continue value is taken
// from the end of the structured content). want/mcpListPage pages, the last without continue.
func (n *nogoo9Proc) listAllViaMCPRaw(ctx context.Context, s *mcp.ClientSession, want int, buf *bytes.Buffer) error {
	next, pages := "", (want+mcpListPage-1)/mcpListPage
	for page := 1; page <= pages; page++ {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_workspaces","arguments":{"allUsers":true,"limit":%d,"continue":%q}}}`, page, mcpListPage, next)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.api+"/mcp", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+n.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", s.ID())
		req.Header.Set("Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion)
		resp, err := n.http.Do(req)
		if err != nil {
			return fmt.Errorf("MCP list_workspaces (raw) page %d: %w", page, err)
		}
		buf.Reset()
		_, rerr := buf.ReadFrom(resp.Body)
		resp.Body.Close()
		b := buf.Bytes()
		if rerr != nil {
			return fmt.Errorf("MCP list_workspaces (raw) page %d: read the answer: %w", page, rerr)
		}
		if resp.StatusCode != http.StatusOK || bytes.Contains(b[max(0, len(b)-200):], []byte(`"isError":true`)) {
			return fmt.Errorf("MCP list_workspaces (raw) page %d: %s: %.300s", page, resp.Status, b)
		}
		// The continue value ends the structured content, the answer's last member: only the
		// tail is searched, as a client that knows where it is would (a search of the whole
		// answer was about a tenth of the client's time).
		const key = `"continue":"`
		tail := b[max(0, len(b)-512):]
		i := bytes.LastIndex(tail, []byte(key))
		switch {
		case page < pages && i < 0:
			return fmt.Errorf("MCP list_workspaces (raw): page %d of %d has no continue value", page, pages)
		case page == pages && i >= 0:
			return fmt.Errorf("MCP list_workspaces (raw): more than %d pages for %d workspaces", pages, want)
		case i >= 0:
			rest := tail[i+len(key):]
			next = string(rest[:max(0, bytes.IndexByte(rest, '"'))])
		}
	}
	return nil
}

// readInto GETs path from nogoo9's API as its admin into buf (reset first), and fails unless
// the answer is 200.
func (n *nogoo9Proc) readInto(ctx context.Context, path string, buf *bytes.Buffer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.api+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	resp, err := n.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("GET %s: read the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, buf.Bytes())
	}
	return nil
}

// apiListRound is the read-path baseline: listing the workspace pods straight from kube-apiserver
// with their label selector, as `kubectl get pods -l nogoo9/type=workspace` does.
func apiListRound(ctx context.Context, c config, cs kubernetes.Interface, res *bench.Results) error {
	var lat []float64
	for i := 0; i < lists; i++ {
		s := time.Now()
		l, err := cs.CoreV1().Pods(scaleNS).List(ctx, metav1.ListOptions{LabelSelector: workspace.LabelType + "=" + workspace.TypeWorkspace})
		if err != nil {
			return err
		}
		if len(l.Items) < c.scale {
			return fmt.Errorf("kube-apiserver listed %d workspace pods, want %d", len(l.Items), c.scale)
		}
		lat = append(lat, float64(time.Since(s).Microseconds())/1000)
	}
	fig := titleRead(c.scale)
	res.Add(fig, "p50 pod list from kube-apiserver (label selector)", "ms", bench.Percentile(lat, 50))
	res.Add(fig, "p99 pod list from kube-apiserver (label selector)", "ms", bench.Percentile(lat, 99))
	return nil
}

// figuresScale measures figures 4 and 5 on a fresh cluster with scale workspace pods and other
// pods, interleaving the naive-cache baseline, the API-server list baseline and nogoo9.
func figuresScale(ctx context.Context, c config, res *bench.Results) error {
	figR, figM := titleRead(c.scale), titleMemory(c.scale, c.other)
	res.Note(figR, "cold start: process start until /readyz answers and a list of all workspaces returns every one of them (nogoo9), or until the Pod cache has synced (naive cache)")
	res.Note(figM, "both processes run against the same cluster in turn, one at a time")
	naiveBin := filepath.Join(c.workDir, "naivecache")
	build := exec.CommandContext(ctx, "go", "build", "-o", naiveBin, "./hack/bench/naivecache")
	build.Dir = c.root
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build hack/bench/naivecache: %w", err)
	}
	cl, err := startCluster(ctx, c, "scale")
	if err != nil {
		return err
	}
	defer func() {
		if err := cl.Stop(); err != nil {
			logf("stopping cluster: %v", err)
		}
	}()
	cs, err := fastClient(cl)
	if err != nil {
		return err
	}
	if err := populate(ctx, c, cs, cl.NodeNames[0]); err != nil {
		return err
	}
	for r := 1; r <= c.rounds && ctx.Err() == nil; r++ {
		logf("figures 4-5: round %d of %d", r, c.rounds)
		if err := naiveRound(ctx, c, cl, naiveBin, res); err != nil {
			res.Fail(figM, "RSS, naive cache of every Pod", "MiB", err)
		}
		if err := apiListRound(ctx, c, cs, res); err != nil {
			res.Fail(figR, "p50 pod list from kube-apiserver (label selector)", "ms", err)
		}
		if err := nogoo9Round(ctx, c, cl, cs, res); err != nil {
			res.Fail(figM, "RSS, nogoo9", "MiB", err)
		}
		if c.before != "" {
			if err := beforeRound(ctx, c, cl, res); err != nil {
				res.Fail(figM, "RSS, "+beforeSubject, "MiB", err)
			}
		}
	}
	for _, p := range []string{"p50 ", "p99 "} {
		res.Compare(figR, p+restListRow, p+"pod list from kube-apiserver (label selector)")
		res.Compare(figR, p+mcpListRow, p+restListRow, p+"pod list from kube-apiserver (label selector)")
		res.Compare(figR, p+mcpRawListRow, p+restListRow)
		if c.before != "" {
			b := listRowSuffix(beforeSubject)
			res.Compare(figR, p+mcpListRow+b, p+restListRow+b)
			res.Compare(figR, p+mcpRawListRow+b, p+restListRow+b)
			res.Compare(figR, p+mcpListRow, p+mcpListRow+b)
			res.Compare(figR, p+mcpRawListRow, p+mcpRawListRow+b)
		}
	}
	res.Compare(figR, "cold start until ready and cache synced, nogoo9", "cold start until cache synced, naive cache of every Pod")
	res.Compare(figM, "RSS, nogoo9", "RSS, naive cache of every Pod")
	res.Compare(figM, "Go heap in use, nogoo9", "Go heap in use, naive cache of every Pod")
	res.Compare(figM, "RSS, nogoo9"+afterListsSuffix, "RSS, naive cache of every Pod", "RSS, nogoo9")
	res.Compare(figM, "Go heap in use, nogoo9"+afterListsSuffix, "Go heap in use, naive cache of every Pod", "Go heap in use, nogoo9")
	if c.before != "" {
		res.Compare(figR, "cold start until ready and cache synced, "+beforeSubject, "cold start until cache synced, naive cache of every Pod")
		res.Compare(figM, "RSS, "+beforeSubject, "RSS, naive cache of every Pod")
		res.Compare(figM, "Go heap in use, "+beforeSubject, "Go heap in use, naive cache of every Pod")
		res.Compare(figM, "RSS, "+beforeSubject+afterListsSuffix, "RSS, naive cache of every Pod", "RSS, "+beforeSubject)
		res.Compare(figM, "Go heap in use, "+beforeSubject+afterListsSuffix, "Go heap in use, naive cache of every Pod", "Go heap in use, "+beforeSubject)
		res.Note(figM, "nogoo9 before: %s, measured after nogoo9 in each round, the same way", c.before)
	}
	res.Note(figR, "list latency is the caller's round trip on loopback for the whole list as an admin (all users' workspaces), %d calls per round; nogoo9 serves it from its cache; through MCP the whole list is every page of %d (one answer holds at most that many), read with the go-sdk client (which parses every answer) and, like REST's, as bytes (raw JSON-RPC posts on the same session; REST's and these answers read into one reused buffer, since the twenty-fourth round; since the twenty-fifth, REST's and these calls made in pairs, in turn first, and the median of each pair's ratio a row of its own)", lists, mcpListPage)
	if c.scale != 10000 {
		res.Note(figR, "scale %d (BENCH_SCALE=10000 for the issue's figure)", c.scale)
	}
	res.Note(figM, "RSS from /proc/<pid>/status VmRSS, heap from go_memstats_heap_inuse_bytes, 3 s after the cold start ended (for nogoo9, its first list that returned every workspace; for the baseline, its cache synced), before the timed list calls (the rows \"after the timed lists\": again 3 s after them, since the twenty-fifth round); baseline: hack/bench/naivecache, a controller-runtime manager with a full, unfiltered Pod informer")
	return nil
}

// profileSelf starts a CPU profile of the benchmark's own process into path and returns what
// stops it and writes the file.
func profileSelf(path string) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		logf("profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		logf("profile: %v", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			logf("profile: %v", err)
			return
		}
		logf("profile of the benchmark's client written to %s", path)
	}
}

// saveProfile writes one of nogoo9's pprof profiles to path: BENCH_PPROF_DIR asks for the heap
// after a GC, to see where the memory of figure 5 goes (go tool pprof -sample_index=inuse_space),
// and the CPU of the start-up's first 4 s after /readyz, to see where the cold start goes.
func saveProfile(ctx context.Context, addr, profile, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/"+profile, nil)
	if err != nil {
		logf("profile: %v", err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		logf("profile: %v", err)
		return
	}
	logf("profile of nogoo9 written to %s", path)
}
