package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// startAPIServer starts a kube-apiserver (with its etcd) for the test, stops it when the test ends,
// and returns its config and an uncached client of it. configure, if any, adjusts the environment
// (the API server's flags, say) before it starts.
func startAPIServer(t *testing.T, configure ...func(*envtest.Environment)) (*rest.Config, client.Client) {
	t.Helper()
	return apiserver.Start(t, configure...)
}

// newTestManager builds a manager on cfg for a test: metrics and health probes off, controller
// names allowed again (go test -count=N, or several managers in one test, build the same
// controller again in this process), and its logs in a buffer shown only when the test fails (a
// global logger would outlive the test and its t). set, if any, fills in the rest of the options
// (the cache, say).
func newTestManager(t *testing.T, cfg *rest.Config, set ...func(*ctrl.Options)) ctrl.Manager {
	t.Helper()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	opts := ctrl.Options{
		Logger:                 zap.New(zap.WriteTo(logs)),
		Scheme:                 clientgoscheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		// As main.go: Pod reads served from the informers' stores, whichever type they hold.
		NewCache: podcache.NewCache,
	}
	for _, f := range set {
		f(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// runManager starts mgr under ctx and stops it when the test ends, or earlier by the stop it
// returns (which waits for the manager to end; calling it again does nothing).
func runManager(t *testing.T, ctx context.Context, mgr ctrl.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// newNamespace creates a namespace named prefix-<nanoseconds> and returns its name.
func newNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// watchClient is a client with Watch on cfg that reads straight from the API server, for tests
// that hook a controller's reads and writes with an interceptor.
func watchClient(t *testing.T, cfg *rest.Config) client.WithWatch {
	t.Helper()
	cw, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cw
}
