package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// writeVerbs are the apiserver_request_total verbs that change state.
var writeVerbs = map[string]bool{"POST": true, "CREATE": true, "PUT": true, "UPDATE": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// excludedResources are written by every component on a timer, not by the rollout under test.
var excludedResources = map[string]bool{"leases": true, "events": true}

// SumWrites sums apiserver_request_total samples of the Prometheus text exposition in body whose
// verb is a write and whose resource is not excluded.
func SumWrites(body []byte) (float64, error) {
	return sumWritesOf(body, func(resource string) bool { return !excludedResources[resource] })
}

// sumWritesOf sums the write samples whose resource counts.
func sumWritesOf(body []byte, counts func(resource string) bool) (float64, error) {
	var total float64
	err := eachSample(body, []string{"apiserver_request_total"}, func(_ string, labels map[string]string, v float64) {
		if writeVerbs[labels["verb"]] && counts(labels["resource"]) {
			total += v
		}
	})
	return total, err
}

// Snapshot is what one scrape of kube-apiserver's /metrics says, for a rollout's before and after:
// its writes (SumWrites), its Events' writes, its pods' traffic and its requests by verb and
// resource.
type Snapshot struct {
	Writes, EventWrites float64
	Traffic             PodTraffic
	Requests            Requests
}

// ScrapeSnapshot reads a Snapshot from one scrape of kube-apiserver's /metrics (with the client's
// admin credentials).
func ScrapeSnapshot(ctx context.Context, cs kubernetes.Interface) (Snapshot, error) {
	body, err := scrapeMetrics(ctx, cs)
	if err != nil {
		return Snapshot{}, err
	}
	return parseSnapshot(body)
}

func parseSnapshot(body []byte) (s Snapshot, err error) {
	if s.Writes, err = SumWrites(body); err != nil {
		return s, err
	}
	// Events only (resource "events", core and events.k8s.io): what the components' Event
	// recorders cost the API server.
	if s.EventWrites, err = sumWritesOf(body, func(resource string) bool { return resource == "events" }); err != nil {
		return s, err
	}
	if s.Traffic, err = parsePodTraffic(body); err != nil {
		return s, err
	}
	s.Requests, err = parseRequests(body)
	return s, err
}

// scrapeMetrics reads kube-apiserver's /metrics with the client's (admin) credentials.
func scrapeMetrics(ctx context.Context, cs kubernetes.Interface) ([]byte, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	return body, nil
}

// eachSample calls fn with every labelled sample of the metrics named in names, in the
// Prometheus text exposition body.
func eachSample(body []byte, names []string, fn func(name string, labels map[string]string, v float64)) error {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		open := strings.IndexByte(line, '{')
		if open < 0 || !slices.Contains(names, line[:open]) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < open {
			return fmt.Errorf("malformed metrics line %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return fmt.Errorf("metrics line %q: value: %w", line, err)
		}
		fn(line[:open], parseLabels(line[open+1:end]), v)
	}
	return sc.Err()
}

// parseLabels reads `a="x",b="y"` (label values in the API server's metrics have no escaped quotes
// that matter here; an escaped quote is kept as is).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return out
		}
		key := strings.TrimLeft(s[:eq], ", ")
		rest := s[eq+2:]
		end := 0
		for end < len(rest) && (rest[end] != '"' || (end > 0 && rest[end-1] == '\\')) {
			end++
		}
		out[key] = rest[:end]
		if end+1 > len(rest) {
			return out
		}
		s = rest[end+1:]
	}
	return out
}

// Requests is kube-apiserver's apiserver_request_total by "verb resource[/subresource]" (every
// resource, watches and leases left out): where a rollout's requests went, not only its pods'.
type Requests map[string]float64

func parseRequests(body []byte) (Requests, error) {
	r := Requests{}
	err := eachSample(body, []string{"apiserver_request_total"}, func(_ string, labels map[string]string, v float64) {
		verb, res := labels["verb"], labels["resource"]
		if verb == "WATCH" || res == "leases" || res == "" {
			return
		}
		if sub := labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		r[verb+" "+res] += v
	})
	return r, err
}

// PerUnit is the requests from r to after, divided by n, largest first: "POST pods 2.00, ...".
func (r Requests) PerUnit(after Requests, n int) string {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	for k, a := range after {
		if v := a - r[k]; v > 0 {
			d = append(d, kv{k, v / float64(n)})
		}
	}
	slices.SortFunc(d, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, 0, len(d))
	for _, e := range d {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, e.v))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// PodTraffic is what the API server did for pods, from its own counters: requests by verb (every
// subresource: bindings and status writes too) and the watch events it sent to every pod watcher
// (kube-scheduler, the controller-managers, kwok, nogoo9, the benchmark) with their bytes.
type PodTraffic struct {
	Requests                   map[string]float64
	WatchEvents, WatchEventSum float64
	// TerminatedWatchers is how many pod watchers kube-apiserver closed because they did not
	// keep up (apiserver_terminated_watchers_total): each then watches again from its last
	// resourceVersion, and lists again (a streamed list's events count as sent) if that is too old.
	TerminatedWatchers float64
}

func parsePodTraffic(body []byte) (PodTraffic, error) {
	t := PodTraffic{Requests: map[string]float64{}}
	names := []string{"apiserver_request_total", "apiserver_watch_events_sizes_sum", "apiserver_watch_events_sizes_count", "apiserver_terminated_watchers_total"}
	err := eachSample(body, names, func(name string, labels map[string]string, v float64) {
		if labels["resource"] != "pods" || labels["group"] != "" {
			return
		}
		switch name {
		case "apiserver_request_total":
			if labels["verb"] != "WATCH" {
				t.Requests[labels["verb"]] += v
			}
		case "apiserver_watch_events_sizes_sum":
			t.WatchEventSum += v
		case "apiserver_watch_events_sizes_count":
			t.WatchEvents += v
		case "apiserver_terminated_watchers_total":
			t.TerminatedWatchers += v
		}
	})
	if err != nil {
		return PodTraffic{}, err
	}
	return t, nil
}

// PerUnit is one line describing after minus t divided by n (workspaces): pod requests by verb,
// watch events sent and their mean size.
func (t PodTraffic) PerUnit(after PodTraffic, n int) string {
	var verbs []string
	total := 0.0
	for v, a := range after.Requests {
		if d := a - t.Requests[v]; d > 0 {
			verbs = append(verbs, fmt.Sprintf("%s %.2f", v, d/float64(n)))
			total += d
		}
	}
	slices.Sort(verbs)
	ev, sum := after.WatchEvents-t.WatchEvents, after.WatchEventSum-t.WatchEventSum
	mean := 0.0
	if ev > 0 {
		mean = sum / ev
	}
	out := fmt.Sprintf("pod requests %.2f per workspace (%s); pod watch events sent %.1f per workspace, %.0f bytes each on average, %.1f KB per workspace",
		total/float64(n), strings.Join(verbs, ", "), ev/float64(n), mean, sum/float64(n)/1000)
	if d := after.TerminatedWatchers - t.TerminatedWatchers; d > 0 {
		out += fmt.Sprintf("; %.0f pod watchers closed by kube-apiserver for not keeping up", d)
	}
	return out
}

// AwaitQuiet waits until kube-apiserver has served no write for quiet (leases left out: every
// component renews its own on a timer; Events counted), polling its /metrics, and returns how
// long it waited; quiesced is false when the writes did not stop within limit. A rollout leaves
// work behind (kwok's final status writes and deletes, the scheduler's and the controllers'
// Events, trailing status updates); without the wait that work lands in the next subject's
// rollout, and in its CPU and request counts, whichever subject comes next.
func AwaitQuiet(ctx context.Context, cs kubernetes.Interface, quiet, limit time.Duration) (waited time.Duration, quiesced bool, err error) {
	start := time.Now()
	// limit is checked between scrapes: a scrape that hangs ends with this bound.
	ctx, cancel := context.WithTimeout(ctx, limit+10*time.Second)
	defer cancel()
	count := func() (float64, error) {
		body, err := scrapeMetrics(ctx, cs)
		if err != nil {
			return 0, err
		}
		return sumWritesOf(body, func(resource string) bool { return resource != "leases" })
	}
	last, err := count()
	if err != nil {
		return 0, false, err
	}
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), false, ctx.Err()
		case <-time.After(quiet / 5):
		}
		n, err := count()
		if err != nil {
			return time.Since(start), false, err
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) >= quiet {
			return time.Since(start), true, nil
		}
		if time.Since(start) >= limit {
			return time.Since(start), false, nil
		}
	}
}
