package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// reconcileCounters reads nogoo9's /metrics and returns controller-runtime's per-controller
// counters that say how much work a rollout made it do: reconciles
// (controller_runtime_reconcile_total, all results) and queue adds (workqueue_adds_total), keyed
// "reconciles <controller>" and "adds <controller>". An answer other than 200, or one cut short
// (a line longer than 1 MiB, a broken connection), is an error: partial counters would make a
// wrong delta.
func reconcileCounters(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s, want 200 OK", url, resp.Status)
	}
	out, err := parseReconcileCounters(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return out, nil
}

// parseReconcileCounters is reconcileCounters' reading of a /metrics answer.
func parseReconcileCounters(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var kind string
		switch {
		case strings.HasPrefix(line, "controller_runtime_reconcile_total{"):
			kind = "reconciles"
		case strings.HasPrefix(line, "workqueue_adds_total{"):
			kind = "adds"
		default:
			continue
		}
		name := labelValue(line, "controller")
		if name == "" {
			name = labelValue(line, "name")
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		out[kind+" "+name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the metrics: %w", err)
	}
	return out, nil
}

func labelValue(line, label string) string {
	i := strings.Index(line, label+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(label)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// counterDelta formats after-before per unit (per workspace), the non-zero ones, sorted by key.
func counterDelta(before, after map[string]float64, n int) string {
	if before == nil || after == nil {
		return "(not scraped)"
	}
	var keys []string
	for k := range after {
		if after[k]-before[k] != 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f", k, (after[k]-before[k])/float64(n))
	}
	return b.String()
}
