package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/proxy"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// cutoverResult is one round of figure 7.
type cutoverResult struct {
	readyToTraffic time.Duration // new pod's Ready status written -> first proxied answer from it
	deleteToClose  time.Duration // old pod deleted -> its open WebSocket closed by the proxy
}

// runCutover measures figure 7 in nogoo9's real code path: a kube-apiserver (envtest, assets in
// assets), the manager's informer cache, proxy.Setup's event handler and route table, and
// backends listening on kwok-style pod IPs. Each round upgrades one workspace side by side.
func runCutover(assets string, rounds int) ([]cutoverResult, error) {
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest with the binaries in %s: %w", assets, err)
	}
	defer func() { _ = env.Stop() }()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache:               podcache.NewCache,
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: podcache.Pods(),
		}},
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := proxy.Setup(mgr, staticAuth{}, proxy.Options{Listener: ln, AllowedOrigins: []string{"*"}}); err != nil {
		return nil, err
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	proxyHost := ln.Addr().String()
	var out []cutoverResult
	for r := 0; r < rounds; r++ {
		res, err := cutoverRound(ctx, k8s, proxyHost, r)
		if err != nil {
			return nil, fmt.Errorf("cutover round %d: %w", r+1, err)
		}
		fmt.Fprintf(os.Stderr, "cutover round %d: ready->traffic %v, delete->WebSocket closed %v\n", r+1, res.readyToTraffic, res.deleteToClose)
		out = append(out, res)
	}
	return out, nil
}

func cutoverRound(ctx context.Context, k8s client.Client, proxyHost string, r int) (cutoverResult, error) {
	var res cutoverResult
	id := fmt.Sprintf("cut%d", r)
	oldIP, newIP := fmt.Sprintf("127.1.201.%d", 2*r+1), fmt.Sprintf("127.1.201.%d", 2*r+2)
	for _, b := range []struct{ ip, name string }{{oldIP, "old"}, {newIP, "new"}} {
		stop, err := namedBackend(b.ip, b.name)
		if err != nil {
			return res, err
		}
		defer stop()
	}
	old, err := createReadyPod(ctx, k8s, id, id+"-pod", oldIP, nil)
	if err != nil {
		return res, err
	}
	path := "/ws/bench/" + id + "/"
	if err := waitFor(30*time.Second, func() bool { return answer(proxyHost, path) == "old" }); err != nil {
		return res, fmt.Errorf("the old pod never got traffic: %w", err)
	}
	ws, err := dialEcho(proxyHost, path+"echo")
	if err != nil {
		return res, err
	}
	defer ws.Close()

	newPod, err := createPod(ctx, k8s, id, id+"-pod-up-1", map[string]string{workspace.AnnUpgradeFrom: old.Name})
	if err != nil {
		return res, err
	}
	// A client polls through the proxy while the new pod turns Ready.
	first := make(chan time.Time, 1)
	pollCtx, stopPoll := context.WithTimeout(ctx, 30*time.Second)
	defer stopPoll()
	go func() {
		for pollCtx.Err() == nil {
			if answer(proxyHost, path) == "new" {
				first <- time.Now()
				return
			}
		}
	}()
	readyAt := time.Now()
	if err := setPodReady(ctx, k8s, newPod, newIP); err != nil {
		return res, err
	}
	select {
	case at := <-first:
		res.readyToTraffic = at.Sub(readyAt)
	case <-pollCtx.Done():
		return res, errors.New("no answer from the new pod within 30s of it turning Ready")
	}

	closed := make(chan time.Time, 1)
	go func() {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		var s string
		_ = websocket.Message.Receive(ws, &s)
		closed <- time.Now()
	}()
	deletedAt := time.Now()
	if err := k8s.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
		return res, err
	}
	at := <-closed
	res.deleteToClose = at.Sub(deletedAt)
	if res.deleteToClose >= 29*time.Second {
		return res, errors.New("the old pod's WebSocket was not closed within 30s of its deletion")
	}
	return res, k8s.Delete(ctx, newPod, client.GracePeriodSeconds(0))
}

// namedBackend answers every GET with its name and echoes WebSocket messages on /echo.
func namedBackend(ip, name string) (func(), error) {
	mux := http.NewServeMux()
	mux.Handle("/echo", websocket.Server{Handler: func(c *websocket.Conn) { _, _ = io.Copy(c, c) }})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, name) })
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "18090"))
	if err != nil {
		return nil, fmt.Errorf("listen on pod IP %s: %w", ip, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

var pollClient = &http.Client{Timeout: 5 * time.Second}

// answer is the body of a GET through the proxy, "" on any failure.
func answer(proxyHost, path string) string {
	req, _ := http.NewRequest(http.MethodGet, "http://"+proxyHost+path, nil)
	req.Header.Set("Authorization", "Bearer "+benchToken)
	res, err := pollClient.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

func dialEcho(proxyHost, path string) (*websocket.Conn, error) {
	cfg, err := websocket.NewConfig("ws://"+proxyHost+path, "http://"+proxyHost)
	if err != nil {
		return nil, err
	}
	cfg.Header.Set("Authorization", "Bearer "+benchToken)
	return websocket.DialConfig(cfg)
}

func waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func createPod(ctx context.Context, k8s client.Client, id, name string, ann map[string]string) (*corev1.Pod, error) {
	a := map[string]string{
		workspace.AnnOwner:         "bench",
		workspace.AnnWorkspacePath: "/ws/bench/" + id + "/",
		workspace.AnnWorkspacePort: "18090",
	}
	for k, v := range ann {
		a[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", Annotations: a,
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return pod, nil
}

func createReadyPod(ctx context.Context, k8s client.Client, id, name, ip string, ann map[string]string) (*corev1.Pod, error) {
	pod, err := createPod(ctx, k8s, id, name, ann)
	if err != nil {
		return nil, err
	}
	return pod, setPodReady(ctx, k8s, pod, ip)
}

// setPodReady writes the status a kubelet would (envtest has none).
func setPodReady(ctx context.Context, k8s client.Client, pod *corev1.Pod, ip string) error {
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("mark pod %s ready: %w", pod.Name, err)
	}
	return nil
}

// envtestAssets finds the kube-apiserver and etcd binaries: KUBEBUILDER_ASSETS, else ./bin.
func envtestAssets() (string, bool) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir, _ = filepath.Abs("bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return dir, false
		}
	}
	return dir, true
}

// cutoverTable formats figure 7.
func cutoverTable(res []cutoverResult) string {
	var b strings.Builder
	ready := make([]float64, len(res))
	closed := make([]float64, len(res))
	for i, r := range res {
		ready[i], closed[i] = ms(r.readyToTraffic), ms(r.deleteToClose)
	}
	fmt.Fprintf(&b, "### Cutover (figure 7): %d rounds through a real kube-apiserver (envtest), the informer cache and the proxy's route table; median (min-max)\n\n", len(res))
	b.WriteString("| event | ms |\n|---|---|\n")
	fmt.Fprintf(&b, "| new pod's Ready status written -> first proxied answer from it | %s |\n", mmm(ready))
	fmt.Fprintf(&b, "| old pod deleted -> its open WebSocket closed by the proxy | %s |\n", mmm(closed))
	b.WriteString("\nBoth include the API server write and the watch event's delivery to the informer; the proxy's own part is a route-table swap (no polling).\n")
	return b.String()
}

func mmm(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.1f (%.1f-%.1f)", s[len(s)/2], s[0], s[len(s)-1])
}
