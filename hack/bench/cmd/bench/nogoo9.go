package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nogoo9/no-crd/hack/bench"
	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// nogoo9Proc is bin/nogoo9 running as a process against a local cluster, authenticated callers
// via TokenReview (--auth=kubernetes), the benchmark's service account an admin.
type nogoo9Proc struct {
	proc                       *bench.Process
	api, metrics, ready, proxy string
	token                      string
	namespace                  string
	cs                         kubernetes.Interface
	http                       *http.Client
	sideBySide, recreate       *wsSet
	// pprof is the address of its /debug/pprof endpoints ("": not served).
	pprof string
	// started is when the process was started (after the harness's own set-up: namespaces,
	// token, flag checks), where a cold start begins, as the naive baseline's does.
	started time.Time
}

const benchAdminNS = "bench-admin"

// adminToken mints a token for the benchmark's caller: service account bench-admin/caller, an
// admin for nogoo9 through --admin-group.
func adminToken(ctx context.Context, cl *localcluster.Cluster) (string, error) {
	if err := ensureNS(ctx, cl.Clientset(), benchAdminNS); err != nil {
		return "", err
	}
	return cl.ServiceAccountToken(ctx, benchAdminNS, "caller", cl.IssuerURL, 3*time.Hour)
}

func ensureNS(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	// Pods are refused until the controller-manager has made the namespace's default
	// ServiceAccount (seconds on a loaded machine): wait for it, bounded.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(wctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("namespace %s: no default ServiceAccount after 2m (is kube-controller-manager running?): %w", ns, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startNogoo9 starts the binary on free loopback ports and returns once /readyz answers.
func startNogoo9(ctx context.Context, c config, cl *localcluster.Cluster, ns, logName string, extra ...string) (*nogoo9Proc, error) {
	if err := ensureNS(ctx, cl.Clientset(), ns); err != nil {
		return nil, err
	}
	token, err := adminToken(ctx, cl)
	if err != nil {
		return nil, err
	}
	ports, err := localcluster.FreePorts(4)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	args := []string{
		"--kubeconfig=" + cl.Kubeconfig, "--namespace=" + ns, "--leader-elect=false",
		"--api-bind-address=" + addr(0), "--proxy-bind-address=" + addr(1),
		"--metrics-bind-address=" + addr(2), "--health-probe-bind-address=" + addr(3),
	}
	if nogoo9Supports(c.nogoo9, "--auth") == nil {
		args = append(args, "--auth=kubernetes", "--admin-group=system:serviceaccounts:"+benchAdminNS)
	}
	if nogoo9Supports(c.nogoo9, "--template-policy") == nil {
		// The bench templates are minimal pod specs: no securityContext, no token setting.
		args = append(args, "--template-policy=privileged", "--template-allow-automount-token")
	}
	started := time.Now()
	p, err := bench.StartProcess("nogoo9", c.nogoo9, append(args, extra...), filepath.Join(cl.Dir, logName+".log"))
	if err != nil {
		return nil, err
	}
	n := &nogoo9Proc{proc: p, started: started, api: "http://" + addr(0), proxy: "http://" + addr(1), metrics: "http://" + addr(2) + "/metrics",
		ready: "http://" + addr(3) + "/readyz", token: token, namespace: ns, cs: cl.Clientset(),
		http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := p.WaitHTTP(sctx, n.ready, nil); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return n, nil
}

func (n *nogoo9Proc) stop() {
	if err := n.proc.Stop(); err != nil {
		logf("stopping nogoo9: %v", err)
	}
}

// call does an authenticated REST call and decodes a JSON answer into out (may be nil; a
// *[]byte gets the answer's bytes undecoded).
func (n *nogoo9Proc) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.api+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
		return nil
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// startNogoo9Upgrade starts nogoo9 (the binary c.nogoo9) for figure 1, managing namespace ns
// only, and spawns its N side-by-side and N recreate-style workspaces there through the REST
// API. logName names its log; profile saves a CPU profile of each rollout (BENCH_PPROF_DIR).
func startNogoo9Upgrade(ctx context.Context, c config, cl *localcluster.Cluster, cs kubernetes.Interface, ns, logName string, profile bool) (*nogoo9Proc, error) {
	if !c.figures[1] && !c.figures[2] && !c.figures[3] {
		return nil, fmt.Errorf("not needed")
	}
	if err := nogoo9Supports(c.nogoo9, "--auth"); err != nil {
		return nil, err
	}
	if err := ensureNS(ctx, cs, ns); err != nil {
		return nil, err
	}
	var extra []string
	pprofAddr := ""
	if profile && os.Getenv("BENCH_PPROF_DIR") != "" {
		// A CPU profile of nogoo9 during each of its rollouts (wsSet.roll).
		ports, err := localcluster.FreePorts(1)
		if err != nil {
			return nil, err
		}
		pprofAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		extra = append(extra, "--pprof-bind-address="+pprofAddr)
	}
	n, err := startNogoo9(ctx, c, cl, ns, logName, extra...)
	if err != nil {
		return nil, err
	}
	n.pprof = pprofAddr
	if !c.figures[1] && !c.figures[2] {
		return n, nil
	}
	n.sideBySide = &wsSet{n: n, cs: cs, template: "bench-sbs", count: c.n}
	n.recreate = &wsSet{n: n, cs: cs, template: "bench-rwop", count: c.n, rwopClass: ns + "-rwop"}
	for _, s := range []*wsSet{n.sideBySide, n.recreate} {
		if err := s.setup(ctx); err != nil {
			n.stop()
			return nil, err
		}
	}
	return n, nil
}

// nogoo9Supports checks that the binary has flag (the front end may not be built in yet).
func nogoo9Supports(bin, flag string) error {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(out), flag+" ") && !strings.Contains(string(out), flag+"=") && !strings.Contains(string(out), "-"+strings.TrimLeft(flag, "-")) {
		return fmt.Errorf("%s has no %s flag yet (front end not wired into main.go)", bin, flag)
	}
	return nil
}

// wsSet is N workspaces of one template, upgraded together by upgrade-all.
type wsSet struct {
	n         *nogoo9Proc
	cs        kubernetes.Interface
	template  string
	count     int
	rwopClass string // non-empty: each workspace has a ReadWriteOncePod claim (Recreate)
	rev       int
	// timeline is the last roll's milestones per workspace (bench.Timeline).
	timeline *bench.Timeline
	// specBytes and podBytes are the largest nogoo9/rollback-spec value and the largest new pod
	// carrying one (protobuf, as the API server stores and sends it) the last roll's watch saw.
	specBytes, podBytes int
}

// sizes describes the last roll's rollback specs, for the log.
func (s *wsSet) sizes() string {
	if s.specBytes == 0 {
		return ""
	}
	return fmt.Sprintf("; largest %s %d bytes, on a new pod of %d bytes (protobuf)", workspace.AnnRollbackSpec, s.specBytes, s.podBytes)
}

func (s *wsSet) configMap() *corev1.ConfigMap {
	spec := fmt.Sprintf(`{"containers":[{"name":"ide","image":"registry.local/bench/ide:v%d","ports":[{"containerPort":8080}]}],"terminationGracePeriodSeconds":0}`, s.rev)
	data := map[string]string{workspace.DataSpec: spec}
	if s.rwopClass != "" {
		spec = fmt.Sprintf(`{"containers":[{"name":"ide","image":"registry.local/bench/ide:v%d","ports":[{"containerPort":8080}],"volumeMounts":[{"name":"home","mountPath":"/home"}]}],"terminationGracePeriodSeconds":0}`, s.rev)
		data[workspace.DataSpec] = spec
		data[workspace.DataVolumeClaims] = fmt.Sprintf(`[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOncePod"],"storageClassName":%q,"resources":{"requests":{"storage":"1Gi"}}}}]`, s.rwopClass)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: s.template, Namespace: s.n.namespace,
			Labels:      map[string]string{workspace.LabelPodTemplate: "true"},
			Annotations: map[string]string{workspace.AnnTemplateVersion: strconv.Itoa(s.rev)}},
		Data: data,
	}
}

// waitTemplate waits until nogoo9 serves version rev of the template.
func (s *wsSet) waitTemplate(ctx context.Context) error {
	want := strconv.Itoa(s.rev)
	var last string
	for {
		var out struct {
			Templates []struct {
				Name           string `json:"name"`
				ServingVersion string `json:"servingVersion"`
				Version        string `json:"version"`
				Error          string `json:"error"`
			} `json:"templates"`
		}
		if err := s.n.call(ctx, http.MethodGet, "/api/v1/templates", nil, &out); err != nil {
			return err
		}
		for _, t := range out.Templates {
			if t.Name == s.template {
				last = fmt.Sprintf("version %q serving %q %s", t.Version, t.ServingVersion, t.Error)
				if t.ServingVersion == want || (t.ServingVersion == "" && t.Version == want && t.Error == "") {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nogoo9 never served template %s version %s (last: %s): %w", s.template, want, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *wsSet) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if s.rwopClass != "" {
		// Two volumes per workspace: one more than the claims, never needed, is harmless.
		if err := bench.CreatePVs(ctx, s.cs, s.rwopClass, s.count); err != nil {
			return err
		}
	}
	if _, err := s.cs.CoreV1().ConfigMaps(s.n.namespace).Create(ctx, s.configMap(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create template %s: %w", s.template, err)
	}
	if err := s.waitTemplate(ctx); err != nil {
		return err
	}
	err := bench.Parallel(ctx, s.count, 16, func(ctx context.Context, i int) error {
		return s.n.call(ctx, http.MethodPost, "/api/v1/workspaces",
			map[string]any{"template": s.template, "id": fmt.Sprintf("%s-%d", s.template, i)}, nil)
	})
	if err != nil {
		return fmt.Errorf("spawn %d workspaces of %s: %w", s.count, s.template, err)
	}
	return s.waitAll(ctx)
}

func (s *wsSet) waitAll(ctx context.Context) error {
	return bench.WaitPods(ctx, s.cs, s.n.namespace, workspace.LabelTemplate+"="+s.template,
		fmt.Sprintf("%d workspaces of %s at version %d", s.count, s.template, s.rev),
		func(pods []*corev1.Pod) bool {
			if len(pods) != s.count {
				return false
			}
			want := strconv.Itoa(s.rev)
			for _, p := range pods {
				if workspace.TemplateVersion(p) != want || !workspace.IsReady(p) {
					return false
				}
			}
			return true
		})
}

// roll raises the template version, waits until nogoo9 serves it, then times upgrade-all until
// every workspace runs the new version and no old pod is left.
func (s *wsSet) roll(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s.rev++
	cm := s.configMap()
	if _, err := s.cs.CoreV1().ConfigMaps(s.n.namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("update template %s: %w", s.template, err)
	}
	if err := s.waitTemplate(ctx); err != nil {
		return 0, err
	}
	// The watch that sees the end is started before the clock, as the floor's is.
	w, err := bench.StartWatch(ctx, s.cs, s.n.namespace, workspace.LabelTemplate+"="+s.template)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	want, prev := strconv.Itoa(s.rev), strconv.Itoa(s.rev-1)
	// What the goroutines below report is this rollout's, read now: s is the next rollout's by the
	// time they run.
	tmpl, rev, count, pprofAddr, metricsURL := s.template, s.rev, s.count, s.n.pprof, s.n.metrics
	if pprofAddr != "" {
		// The allocations of the CPU profile's 4 s: the difference of two cumulative profiles
		// (go tool pprof -diff_base=allocs-before-... allocs-after-...), the first fetched before
		// the CPU profile starts, so the fetch is in neither.
		allocs := func(when string) string {
			return filepath.Join(os.Getenv("BENCH_PPROF_DIR"), fmt.Sprintf("allocs-%s-%s-%d-%d.pprof", when, tmpl, rev, time.Now().Unix()))
		}
		saveProfile(ctx, pprofAddr, "allocs", allocs("before"))
		// Four seconds from the clock's start: the rollout (2-4 s at N=100) and a little after.
		path := filepath.Join(os.Getenv("BENCH_PPROF_DIR"), fmt.Sprintf("cpu-rollout-%s-%d-%d.pprof", tmpl, rev, time.Now().Unix()))
		go saveProfile(context.WithoutCancel(ctx), pprofAddr, "profile?seconds=4", path)
		go func() {
			time.Sleep(4 * time.Second)
			saveProfile(context.WithoutCancel(ctx), pprofAddr, "allocs", allocs("after"))
		}()
		// nogoo9's reconciles and queue adds per workspace, until 2 s after the end (with the
		// profiles only: the scrapes are nogoo9's CPU too).
		counters, err := reconcileCounters(ctx, metricsURL)
		if err != nil {
			logf("nogoo9 %s rollout %d: reconcile counters before: %v", tmpl, rev, err)
		}
		defer func() {
			go func() {
				time.Sleep(2 * time.Second)
				after, err := reconcileCounters(context.Background(), metricsURL)
				if err != nil {
					logf("nogoo9 %s rollout %d: reconcile counters after: %v", tmpl, rev, err)
				}
				logf("nogoo9 %s rollout %d: per workspace, until 2 s after the end: %s", tmpl, rev, counterDelta(counters, after, count))
			}()
		}()
	}
	start := time.Now()
	tl := bench.NewTimeline(start, "upgrade-all answered", "intent", "created", "old deleting", "old gone", "ungated", "scheduled", "Ready")
	s.timeline = tl
	s.specBytes, s.podBytes = 0, 0
	answered := make(chan error, 1)
	go func() {
		answered <- s.n.call(ctx, http.MethodPost, "/api/v1/upgrade-all", nil, nil)
		w.Poke()
	}()
	done := false
	err = w.Wait(ctx, fmt.Sprintf("%d workspaces of %s at version %d", s.count, s.template, s.rev), func(pods []*corev1.Pod) bool {
		now := time.Now()
		if !done {
			select {
			case err := <-answered:
				if err != nil {
					answered <- err
					return true
				}
				done = true
				tl.Mark("upgrade-all answered", "call", now)
			default:
			}
		}
		old := map[string]bool{}
		for _, p := range pods {
			id := workspace.ID(p)
			switch workspace.TemplateVersion(p) {
			case prev:
				old[id] = true
				if p.Annotations[workspace.AnnUpgradeRequested] != "" {
					tl.Mark("intent", id, now)
				}
				if p.DeletionTimestamp != nil {
					tl.Mark("old deleting", id, now)
				}
			case want:
				tl.Mark("created", id, now)
				if n := len(p.Annotations[workspace.AnnRollbackSpec]); n > s.specBytes {
					s.specBytes, s.podBytes = n, p.Size()
				}
				if len(p.Spec.SchedulingGates) == 0 {
					tl.Mark("ungated", id, now)
				}
				if p.Spec.NodeName != "" {
					tl.Mark("scheduled", id, now)
				}
				if workspace.IsReady(p) {
					tl.Mark("Ready", id, now)
				}
			}
		}
		for _, p := range pods {
			if id := workspace.ID(p); workspace.TemplateVersion(p) == want && !old[id] {
				tl.Mark("old gone", id, now)
			}
		}
		if len(pods) != s.count || !done {
			return false
		}
		for _, p := range pods {
			if workspace.TemplateVersion(p) != want || !workspace.IsReady(p) {
				return false
			}
		}
		return true
	})
	if err == nil && !done {
		err = <-answered // the watch's condition ended on the call's error
	}
	if err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
