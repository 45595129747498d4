package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReconcileCountersSumEachControllersResults reads controller-runtime's counters from a
// /metrics answer: reconciles summed over results, queue adds by queue name, other lines ignored;
// counterDelta prints what changed per workspace.
func TestReconcileCountersSumEachControllersResults(t *testing.T) {
	total := 10.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
controller_runtime_reconcile_total{controller="workspace-phase",result="success"} %g
controller_runtime_reconcile_total{controller="workspace-phase",result="error"} 2
controller_runtime_reconcile_total{controller="workspace-upgrade",result="success"} 7
workqueue_adds_total{controller="workspace-phase",name="workspace-phase"} %g
controller_runtime_reconcile_time_seconds_sum{controller="workspace-phase"} 0.5
`, total, total)
	}))
	defer srv.Close()
	before, err := reconcileCounters(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := before["reconciles workspace-phase"]; got != 12 {
		t.Errorf("phase reconciles: %g, want 12 (both results)", got)
	}
	if got := before["adds workspace-phase"]; got != 10 {
		t.Errorf("phase adds: %g, want 10", got)
	}
	if len(before) != 3 {
		t.Errorf("counters %v: want 3 (the time sum is no counter of these)", before)
	}
	total = 30
	after, err := reconcileCounters(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := counterDelta(before, after, 10), "adds workspace-phase 2.00, reconciles workspace-phase 2.00"; got != want {
		t.Errorf("delta %q, want %q", got, want)
	}
	if got := counterDelta(nil, after, 10); got != "(not scraped)" {
		t.Errorf("delta without a first scrape: %q", got)
	}
}

// TestReconcileCountersRefuseAFailedScrape: an answer other than 200 (its body is no metrics) and
// one the scanner cannot read to its end (a line over 1 MiB) are errors, not partial counters.
func TestReconcileCountersRefuseAFailedScrape(t *testing.T) {
	const line = `controller_runtime_reconcile_total{controller="workspace-phase",result="success"} 3` + "\n"
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"a 503", http.StatusServiceUnavailable, line, "503 Service Unavailable, want 200 OK"},
		{"a 404", http.StatusNotFound, "", "404 Not Found, want 200 OK"},
		{"a line over 1 MiB", http.StatusOK, line + "# " + strings.Repeat("x", 1<<20) + "\n" + line, "read the metrics: bufio.Scanner: token too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			got, err := reconcileCounters(context.Background(), srv.URL)
			if err == nil || !strings.Contains(err.Error(), tc.want) || got != nil {
				t.Errorf("reconcileCounters = %v, %v; want no counters and an error saying %q", got, err, tc.want)
			}
		})
	}
}
