package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPUByCommand is the CPU time (user and system) used so far by each descendant process of this
// one (the local cluster's etcd, kube-apiserver, scheduler, kwok, the controller-managers and
// nogoo9), summed by command name, from /proc/<pid>/stat. Take one reading before and one after a
// rollout (Sub): which process did the work is what the per-subject comparison cannot show.
func CPUByCommand() map[string]time.Duration {
	type proc struct {
		comm  string
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
		if err != nil {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		procs[pid] = proc{comm: s[open+1 : end], ppid: ppid, ticks: u + st}
	}
	self := os.Getpid()
	out := map[string]time.Duration{}
	if p, ok := procs[self]; ok {
		// The benchmark itself: the floor's client and every subject's watch.
		out["bench (this process)"] = time.Duration(p.ticks) * time.Second / 100
	}
	for _, p := range procs {
		for a, hops := p.ppid, 0; a > 1 && hops < 64; a, hops = procs[a].ppid, hops+1 {
			if a == self {
				out[p.comm] += time.Duration(p.ticks) * time.Second / 100 // USER_HZ
				break
			}
			if _, ok := procs[a]; !ok {
				break
			}
		}
	}
	return out
}

// CPUDelta renders after minus before, largest first, in seconds.
func CPUDelta(before, after map[string]time.Duration) string {
	type kv struct {
		k string
		v time.Duration
	}
	var d []kv
	var total time.Duration
	for k, v := range after {
		if v -= before[k]; v > 0 {
			d = append(d, kv{k, v})
			total += v
		}
	}
	slices.SortFunc(d, func(a, b kv) int { return int(b.v - a.v) })
	parts := []string{fmt.Sprintf("total %.2f", total.Seconds())}
	for _, e := range d {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, e.v.Seconds()))
	}
	return strings.Join(parts, ", ") + " CPU-s"
}
