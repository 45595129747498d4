// Package apiserver starts a real kube-apiserver (with its etcd, controller-runtime's envtest)
// for the integration tests of several packages, so they share one set-up. Only tests import it.
package apiserver

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Assets is KUBEBUILDER_ASSETS or the repository's bin/ (make tools).
func Assets(t testing.TB) string {
	t.Helper()
	dir, err := assets()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "bin")
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("no kube-apiserver in %s: run `make tools` or set KUBEBUILDER_ASSETS", dir)
	}
	return dir, nil
}

// Main runs a package's tests (call it from TestMain) with one kube-apiserver they all share: it
// starts it, calls run with its config (run calls m.Run and returns its code), stops it and exits
// with run's code. With -short it starts nothing and run gets a nil config (the integration tests
// skip themselves). A failed start exits 1 with the reason. Options adjust when it starts nothing.
func Main(m *testing.M, run func(cfg *rest.Config) int, opts ...Option) {
	flag.Parse()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if testing.Short() || o.benchmarksWithout && noTests() {
		os.Exit(run(nil))
	}
	os.Exit(withAPIServer(run))
}

// Option adjusts Main.
type Option func(*options)

type options struct{ benchmarksWithout bool }

// BenchmarksNeedNone is for a package whose benchmarks do not use the API server: run with
// -run '^$' (benchmarks only), Main starts nothing, as with -short.
func BenchmarksNeedNone(o *options) { o.benchmarksWithout = true }

// noTests tells whether -run selects no test (the "^$" of a benchmarks-only run).
func noTests() bool {
	f := flag.Lookup("test.run")
	return f != nil && f.Value.String() == "^$"
}

func withAPIServer(run func(cfg *rest.Config) int) int {
	dir, err := assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start kube-apiserver (assets in %s): %v\n", dir, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return run(cfg)
}

// Start starts a kube-apiserver (with its etcd) for the test, stops it when the test ends, and
// returns its config and an uncached client of it. configure, if any, adjusts the environment
// (the API server's flags, say) before it starts. With -short the test is skipped.
func Start(t testing.TB, configure ...func(*envtest.Environment)) (*rest.Config, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: Assets(t)}
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
