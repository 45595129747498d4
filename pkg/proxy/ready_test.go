package proxy_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/proxy"
)

// A replica whose /readyz passes takes proxy connections: the proxy binds its port only after
// its pod handler has the initial list, so without its own readiness check /readyz passed before
// the port was open (with the start-up gate, by one informer poll of 100 ms in most starts).
func TestReadyzWaitsForTheProxysListener(t *testing.T) {
	g := integration(t)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	proxyAddr := free.Addr().String()
	g.Expect(free.Close()).To(Succeed())
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	probeAddr := probe.Addr().String()
	g.Expect(probe.Close()).To(Succeed())

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	mgr, err := ctrl.NewManager(envCfg, ctrl.Options{
		NewCache:               podcache.NewCache,
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probeAddr,
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	// main.go's own check, which passes at once.
	g.Expect(mgr.AddReadyzCheck("readyz", healthz.Ping)).To(Succeed())
	g.Expect(proxy.Setup(mgr, stubAuth{}, proxy.Options{BindAddress: proxyAddr})).To(Succeed())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	// The first /readyz that passes: the proxy's port must take a connection then.
	poll := &http.Client{Timeout: 2 * time.Second}
	g.Eventually(func() int {
		resp, err := poll.Get("http://" + probeAddr + "/readyz")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}, 30*time.Second, time.Millisecond).Should(Equal(http.StatusOK))
	conn, err := net.DialTimeout("tcp", proxyAddr, 2*time.Second)
	g.Expect(err).NotTo(HaveOccurred(), "/readyz passed while the proxy's port was closed")
	_ = conn.Close()
}
