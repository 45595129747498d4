package health

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	// A success is remembered for DefaultAPIServerFresh: the check must fail once that has passed
	// (bounded: the freshness plus the check's own timeout, with margin).
	deadline := time.Now().Add(DefaultAPIServerFresh + 2*DefaultAPIServerTimeout + 5*time.Second)
	for check(req) == nil {
		if time.Now().After(deadline) {
			t.Fatal("check still passed with the API server stopped, after the remembered success expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Fresh remembers a success for maxAge and never a failure.
func TestFreshRemembersOnlySuccess(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	runs, fail := 0, false
	check := Fresh(func(*http.Request) error {
		runs++
		if fail {
			return errors.New("down")
		}
		return nil
	}, time.Second, clock)
	req := httptest.NewRequest("GET", "/readyz", nil)
	step := func(advance time.Duration, wantErr bool, wantRuns int) {
		t.Helper()
		now = now.Add(advance)
		err := check(req)
		if (err != nil) != wantErr || runs != wantRuns {
			t.Fatalf("at +%s: err %v (want error: %v), check ran %d times, want %d", advance, err, wantErr, runs, wantRuns)
		}
	}
	step(0, false, 1)                    // first probe runs the check
	step(500*time.Millisecond, false, 1) // within a second of the success: remembered
	step(600*time.Millisecond, false, 2) // 1.1 s after: runs again (and succeeds)
	fail = true
	step(999*time.Millisecond, false, 2) // still within the new success's second
	step(2*time.Millisecond, true, 3)    // expired: runs and fails
	step(time.Millisecond, true, 4)      // a failure is not remembered
	fail = false
	step(time.Millisecond, false, 5)
	fail = true
	step(-time.Hour, true, 6) // the clock stepped back after a success: not taken as fresh
}
