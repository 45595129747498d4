package bench

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		samples []float64
		want    Stats
	}{
		{name: "no samples gives empty stats", samples: nil, want: Stats{}},
		{name: "one sample is min, median and max", samples: []float64{3}, want: Stats{N: 1, Min: 3, Median: 3, Max: 3, HasSamples: true}},
		{name: "odd count takes the middle value whatever the order", samples: []float64{9, 1, 4}, want: Stats{N: 3, Min: 1, Median: 4, Max: 9, HasSamples: true}},
		{name: "even count averages the two middle values", samples: []float64{4, 1, 3, 10}, want: Stats{N: 4, Min: 1, Median: 3.5, Max: 10, HasSamples: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.samples); got != tt.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tt.samples, got, tt.want)
			}
		})
	}
}

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted on purpose
	}
	tests := []struct {
		name    string
		samples []float64
		p       float64
		want    float64
	}{
		{name: "p50 of 1..100 is 50", samples: hundred, p: 50, want: 50},
		{name: "p99 of 1..100 is 99", samples: hundred, p: 99, want: 99},
		{name: "p100 is the maximum", samples: hundred, p: 100, want: 100},
		{name: "p99 of three samples is the largest", samples: []float64{2, 7, 5}, p: 99, want: 7},
		{name: "tiny p is the minimum", samples: []float64{2, 7, 5}, p: 0.001, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of no samples should be NaN")
	}
}

func TestSumWritesCountsWriteVerbsExceptLeasesAndEvents(t *testing.T) {
	body := []byte(`# HELP apiserver_request_total Counter
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1000
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 500
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 400
apiserver_request_duration_seconds_count{verb="POST",resource="pods"} 99
`)
	got, err := SumWrites(body)
	if err != nil {
		t.Fatal(err)
	}
	if got != 20 {
		t.Errorf("SumWrites = %v, want 20 (10 creates + 5 patches + 2 deletes + 3 updates)", got)
	}
	if _, err := SumWrites([]byte(`apiserver_request_total{verb="POST",resource="pods"} notanumber`)); err == nil {
		t.Error("SumWrites accepted a malformed value")
	}
}

// TestSnapshotReadsEveryCountFromOneScrape: one scrape gives the writes, the Events' writes, the
// pods' traffic and the requests, each as its own parser reads it.
func TestSnapshotReadsEveryCountFromOneScrape(t *testing.T) {
	body := []byte(`apiserver_request_total{code="201",group="",resource="pods",subresource="",verb="POST"} 10
apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST"} 4
apiserver_request_total{code="201",group="events.k8s.io",resource="events",subresource="",verb="PATCH"} 2
apiserver_request_total{code="200",group="coordination.k8s.io",resource="leases",subresource="",verb="PUT"} 100
apiserver_watch_events_sizes_count{group="",resource="pods"} 3
`)
	s, err := parseSnapshot(body)
	if err != nil {
		t.Fatal(err)
	}
	if s.Writes != 10 || s.EventWrites != 6 {
		t.Errorf("writes %v, Event writes %v; want 10 (Events and leases left out) and 6", s.Writes, s.EventWrites)
	}
	if s.Traffic.Requests["POST"] != 10 || s.Traffic.WatchEvents != 3 {
		t.Errorf("pod traffic %+v, want POST 10 and 3 watch events", s.Traffic)
	}
	if len(s.Requests) != 3 {
		t.Errorf("requests %v, want POST pods, POST events and PATCH events (leases left out)", s.Requests)
	}
	if _, err := parseSnapshot([]byte(`apiserver_request_total{verb="POST",resource="pods"} notanumber`)); err == nil {
		t.Error("a malformed scrape was accepted")
	}
}

func TestWriteMarkdownRatiosAgainstBaselines(t *testing.T) {
	r := &Results{}
	const fig = "1. Bulk upgrade"
	for _, v := range []float64{2, 4, 3} {
		r.Add(fig, "floor", "s", v)
	}
	for _, v := range []float64{30, 36} {
		r.Add(fig, "deployments", "s", v)
	}
	r.Add(fig, "nogoo9", "s", 3.9)
	r.Fail(fig, "nogoo9", "s", errors.New("timed out | waiting"))
	r.Compare(fig, "nogoo9", "floor", "deployments")
	r.Add(fig, "broken", "s", 5)
	r.Compare(fig, "broken", "missing")
	r.Compare(fig, "never run", "floor")
	r.Note(fig, "N=%d", 100)
	// A figure not asked for: its rows are only named by Compare.
	r.Compare("2. Writes", "nogoo9", "floor")
	r.Note("2. Writes", "counted until quiet")
	var buf bytes.Buffer
	r.WriteMarkdown(&buf)
	out := buf.String()
	for _, absent := range []string{"never run", "2. Writes", "counted until quiet"} {
		if strings.Contains(out, absent) {
			t.Errorf("markdown shows %q, which nothing measured:\n%s", absent, out)
		}
	}
	for _, want := range []string{
		"### 1. Bulk upgrade",
		"| floor | 3 | 2.00 | 3.00 | 4.00 | s | baseline |",
		"| deployments | 2 | 30.0 | 33.0 | 36.0 | s | baseline |",
		"| nogoo9 | 1 (+1 failed) | 3.90 | 3.90 | 3.90 | s | 1.30x vs floor; 0.12x vs deployments |",
		"| broken | 1 | 5.00 | 5.00 | 5.00 | s | n/a vs missing |",
		"- nogoo9 failed: timed out / waiting",
		"- N=100",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{{1234.5, "1234"}, {36.71, "36.7"}, {1.404, "1.40"}, {0.0123, "0.012"}, {0, "0.00"}, {math.NaN(), "n/a"}}
	for _, tt := range tests {
		if got := FormatNumber(tt.v); got != tt.want {
			t.Errorf("FormatNumber(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestPodTrafficCountsOnlyCorePodsAndSubtracts(t *testing.T) {
	before, err := parsePodTraffic([]byte(`# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 5
apiserver_request_total{code="0",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="WATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="PATCH",version="v1"} 99
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 1000
apiserver_watch_events_sizes_count{group="",resource="pods",version="v1"} 4
apiserver_watch_events_sizes_sum{group="policy",resource="pods",version="v1"} 5000
`))
	if err != nil {
		t.Fatal(err)
	}
	if before.Requests["POST"] != 15 || len(before.Requests) != 1 || before.WatchEvents != 4 || before.WatchEventSum != 1000 {
		t.Fatalf("parsed %+v, want POST 15 only (watches and other resources left out), 4 events of 1000 bytes", before)
	}
	after := PodTraffic{Requests: map[string]float64{"POST": 35, "PATCH": 10}, WatchEvents: 24, WatchEventSum: 41000}
	want := "pod requests 3.00 per workspace (PATCH 1.00, POST 2.00); pod watch events sent 2.0 per workspace, 2000 bytes each on average, 4.0 KB per workspace"
	if got := before.PerUnit(after, 10); got != want {
		t.Errorf("PerUnit =\n%s\nwant\n%s", got, want)
	}
}

// TestDescribePods: a wait that times out names how many pods of each revision are Ready,
// unscheduled or deleting.
func TestDescribePods(t *testing.T) {
	pod := func(rev, node string, ready, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelRev: rev}}, Spec: corev1.PodSpec{NodeName: node}}
		if ready {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	ws := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workspace.LabelTemplateVersion: "3"}}}
	got := describePods([]*corev1.Pod{pod("1", "n", true, false), pod("1", "", false, false), pod("0", "n", true, true), pod("1", "n", false, false), ws})
	want := "rev 0: 1 pods (Ready 0, unscheduled 0, deleting 1, other 0); rev 1: 3 pods (Ready 1, unscheduled 1, deleting 0, other 1); rev 3: 1 pods (Ready 0, unscheduled 1, deleting 0, other 0)"
	if got != want {
		t.Errorf("describePods = %q, want %q", got, want)
	}
	if got := describePods(nil); got != "no pods" {
		t.Errorf("describePods(nil) = %q", got)
	}
}

// TestRequestsPerUnit: requests by verb and resource (subresources apart; watches and leases
// left out), the difference divided by N, largest first.
func TestRequestsPerUnit(t *testing.T) {
	before, err := parseRequests([]byte(`apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 10
apiserver_request_total{code="201",resource="events",subresource="",verb="POST"} 5
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 100
`))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseRequests([]byte(`apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 30
apiserver_request_total{code="201",resource="pods",subresource="binding",verb="POST"} 20
apiserver_request_total{code="201",resource="events",subresource="",verb="POST"} 45
apiserver_request_total{code="200",resource="pods",subresource="",verb="WATCH"} 7
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 300
`))
	if err != nil {
		t.Fatal(err)
	}
	want := "POST events 4.00, POST pods 2.00, POST pods/binding 2.00"
	if got := before.PerUnit(after, 10); got != want {
		t.Errorf("PerUnit = %q, want %q", got, want)
	}
	if got := after.PerUnit(after, 10); got != "none" {
		t.Errorf("no change: %q", got)
	}
}

// TestPodTrafficNamesTerminatedWatchers: a pod watcher that kube-apiserver closed during the
// window (it then lists again, and a streamed list's events count as sent) is named.
func TestPodTrafficNamesTerminatedWatchers(t *testing.T) {
	before, err := parsePodTraffic([]byte(`apiserver_terminated_watchers_total{group="",resource="pods"} 1
apiserver_terminated_watchers_total{group="",resource="configmaps"} 3
`))
	if err != nil {
		t.Fatal(err)
	}
	after := before
	after.TerminatedWatchers = 3
	if got := before.PerUnit(after, 10); !strings.HasSuffix(got, "; 2 pod watchers closed by kube-apiserver for not keeping up") {
		t.Errorf("PerUnit = %q", got)
	}
	if got := before.PerUnit(before, 10); strings.Contains(got, "watchers closed") {
		t.Errorf("no watcher closed: %q", got)
	}
}
