// Command naivecache is the memory baseline of `make bench` (figure 5): a plain controller-runtime
// manager that caches every Pod in the cluster the naive way, with a full, unfiltered informer and
// no transform, as a controller that does not select or strip would. It serves /readyz once the
// cache has synced and Prometheus metrics (go_memstats_heap_inuse_bytes) like nogoo9 does, so the
// two are measured the same way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	// The manager's metrics registry gets the Go collector (go_memstats_heap_inuse_bytes, as
	// nogoo9 exposes it) from controller-runtime's controller package.
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	fmt.Fprintf(os.Stderr, "%s main\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	metricsAddr := flag.String("metrics-bind-address", "127.0.0.1:0", "Address of /metrics.")
	probeAddr := flag.String("health-probe-bind-address", "127.0.0.1:0", "Address of /readyz (200 once every Pod is cached).")
	qps := flag.Float64("kube-api-qps", 500, "Client QPS (the same as nogoo9's).")
	flag.Parse()
	if err := run(*metricsAddr, *probeAddr, float32(*qps)); err != nil {
		fmt.Fprintln(os.Stderr, "naivecache:", err)
		os.Exit(1)
	}
}

func run(metricsAddr, probeAddr string, qps float32) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	// Every Pod, every namespace, whole objects: the naive cache.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	var synced atomic.Bool
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			synced.Store(true)
			// Read against the harness's start stamp in the log (where the cold start goes).
			fmt.Fprintf(os.Stderr, "%s pod cache synced\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("cache-synced", func(*http.Request) error {
		if !synced.Load() {
			return errors.New("pod cache not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
