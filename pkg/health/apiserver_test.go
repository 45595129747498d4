package health

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The check passes while a real API server serves and fails once the API server is gone (bounded
// by its timeout, so /readyz never hangs).
func TestAPIServerCheckFollowsTheAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real API server (envtest)")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if abs, err := filepath.Abs("../../bin"); err == nil {
			t.Setenv("KUBEBUILDER_ASSETS", abs)
		}
	}
	te := &envtest.Environment{}
	cfg, err := te.Start()
	if err != nil {
		t.Fatalf("start envtest (set KUBEBUILDER_ASSETS=<repo>/bin): %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = te.Stop()
		}
	})
	check, err := APIServer(cfg, DefaultAPIServerTimeout)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check(req); err != nil {
		t.Fatalf("check with the API server up: %v", err)
	}
	if err := te.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := check(req); err == nil {
		t.Fatal("check passed with the API server stopped")
	}
}
