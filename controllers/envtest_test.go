package controllers

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// envtestAssets is KUBEBUILDER_ASSETS or the repository's bin/ (make tools).
func envtestAssets(t *testing.T) string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "bin")
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		t.Fatalf("no kube-apiserver in %s: run `make tools` or set KUBEBUILDER_ASSETS", dir)
	}
	return dir
}

// startAPIServer starts a kube-apiserver (with its etcd) for the test, stops it when the test ends,
// and returns its config and an uncached client of it. configure, if any, adjusts the environment
// (the API server's flags, say) before it starts.
func startAPIServer(t *testing.T, configure ...func(*envtest.Environment)) (*rest.Config, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: envtestAssets(t)}
	for _, f := range configure {
		f(env)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}
