package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// row is one way of reaching the backend.
type row struct {
	name    string
	httpURL string
	wsURL   string
	// proc is the listen address of the process whose CPU time the row reports: the proxy (nginx:
	// its master and worker), for direct the backend.
	proc string
}

// sample is one run: rate, latencies (ms) and, where the row has its own process, that
// process's CPU time per request or round trip in microseconds (0: not measured).
type sample struct{ rps, p50, p99, cpuUS float64 }

func runBench(args []string) error {
	fs := flag.NewFlagSet("proxybench", flag.ExitOnError)
	rounds := fs.Int("rounds", 3, "interleaved rounds per row (the median is reported)")
	dur := fs.Duration("duration", 5*time.Second, "wrk duration per HTTP run")
	wsDur := fs.Duration("ws-duration", 3*time.Second, "duration per WebSocket run")
	conns := fs.Int("conns", 32, "connections")
	podIP := fs.String("pod-ip", "127.1.200.1", "loopback IP the backend listens on, like a kwok pod IP")
	out := fs.String("out", "", "also write the markdown table to this file")
	only := fs.String("rows", "direct,nogoo9,nginx,httputil,nogoo9std,nogoo9rp,nogoo9srv", "rows to measure (comma-separated: direct, nogoo9, nginx, httputil, nogoo9std, nogoo9rp, nogoo9srv)")
	cutRounds := fs.Int("cutover-rounds", 5, "rounds of figure 7 (cutover; needs kube-apiserver and etcd in $KUBEBUILDER_ASSETS or ./bin); 0 skips it")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of nogoo9's proxy (all rounds) to this file")
	base := fs.String("base", "", "other proxybench binaries, comma-separated (e.g. one built from main): the nogoo9 proxy of each is measured in the same rounds, as the row \"nogoo9 proxy (base N: file name)\", always")
	_ = fs.Parse(args)

	for _, tool := range []string{"wrk", "nginx", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not on PATH: run hack/install-bench-tools.sh (make bench does; or apt-get install wrk nginx util-linux), and add /usr/sbin to PATH for nginx if you are not root", tool)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	backend := net.JoinHostPort(*podIP, "18080")
	var (
		procsMu sync.Mutex
		procs   []*exec.Cmd
	)
	stopAll := func() {
		procsMu.Lock()
		defer procsMu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			stopProc(procs[i])
		}
		procs = nil
	}
	defer stopAll()
	// make bench stops us with SIGTERM: stop the backend and proxies we started first.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sigc
		stopAll()
		killChildren()
		os.Exit(1)
	}()
	pgids := map[string]int{} // listen address -> process group of what serves it
	start := func(addr string, name string, args ...string) error {
		// A port already taken (another proxybench, e.g. from make bench) would make us measure
		// someone else's servers: refuse instead.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s is in use (another proxybench or make bench running?): %w", addr, err)
		}
		_ = ln.Close()
		cmd := exec.Command("taskset", append([]string{"-c", "1", name}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		procsMu.Lock()
		procs = append(procs, cmd)
		procsMu.Unlock()
		pgids[addr] = cmd.Process.Pid
		return waitListening(addr)
	}
	if err := start(backend, self, "backend", "-addr", backend); err != nil {
		return err
	}
	nogooArgs := []string{"nogoo9", "-listen", "127.0.0.1:18081", "-backend", backend}
	if *cpuProfile != "" {
		abs, err := filepath.Abs(*cpuProfile)
		if err != nil {
			return err
		}
		nogooArgs = append(nogooArgs, "-cpuprofile", abs)
	}
	if err := start("127.0.0.1:18081", self, nogooArgs...); err != nil {
		return err
	}
	if err := start("127.0.0.1:18082", self, "baseline", "-listen", "127.0.0.1:18082", "-backend", backend); err != nil {
		return err
	}
	if err := start("127.0.0.1:18084", self, "nogoo9", "-listen", "127.0.0.1:18084", "-backend", backend, "-std-transport"); err != nil {
		return err
	}
	if err := start("127.0.0.1:18085", self, "nogoo9", "-listen", "127.0.0.1:18085", "-backend", backend, "-no-fast-path"); err != nil {
		return err
	}
	if err := start("127.0.0.1:18086", self, "nogoo9", "-listen", "127.0.0.1:18086", "-backend", backend, "-standard-server"); err != nil {
		return err
	}
	var baseRows []row
	if *base != "" {
		for i, bin := range strings.Split(*base, ",") {
			addr := fmt.Sprintf("127.0.0.1:%d", 18087+i)
			if err := start(addr, bin, "nogoo9", "-listen", addr, "-backend", backend); err != nil {
				return fmt.Errorf("-base %s: %w", bin, err)
			}
			baseRows = append(baseRows, row{fmt.Sprintf("nogoo9 proxy (base %d: %s)", i+1, filepath.Base(bin)), "http://" + addr + "/ws/bench/demo/", "ws://" + addr + "/ws/bench/demo/echo", addr})
		}
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(dir, backend)), 0o644); err != nil {
		return err
	}
	if err := start("127.0.0.1:18083", "nginx", "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")); err != nil {
		return err
	}

	all := []row{
		{"direct", "http://" + backend + "/", "ws://" + backend + "/echo", backend},
		{"nogoo9 proxy", "http://127.0.0.1:18081/ws/bench/demo/", "ws://127.0.0.1:18081/ws/bench/demo/echo", "127.0.0.1:18081"},
		{"nginx", "http://127.0.0.1:18083/", "ws://127.0.0.1:18083/echo", "127.0.0.1:18083"},
		{"httputil.ReverseProxy", "http://127.0.0.1:18082/", "ws://127.0.0.1:18082/echo", "127.0.0.1:18082"},
		{"nogoo9 with http.Transport", "http://127.0.0.1:18084/ws/bench/demo/", "ws://127.0.0.1:18084/ws/bench/demo/echo", "127.0.0.1:18084"},
		{"nogoo9 without fast path", "http://127.0.0.1:18085/ws/bench/demo/", "ws://127.0.0.1:18085/ws/bench/demo/echo", "127.0.0.1:18085"},
		{"nogoo9 on net/http's server", "http://127.0.0.1:18086/ws/bench/demo/", "ws://127.0.0.1:18086/ws/bench/demo/echo", "127.0.0.1:18086"},
	}
	var rows []row
	for i, key := range []string{"direct", "nogoo9", "nginx", "httputil", "nogoo9std", "nogoo9rp", "nogoo9srv"} {
		if strings.Contains(","+*only+",", ","+key+",") {
			rows = append(rows, all[i])
		}
	}
	rows = append(rows, baseRows...)
	if len(rows) == 0 {
		return fmt.Errorf("-rows %q names no row: use some of direct,nogoo9,nginx,httputil,nogoo9std,nogoo9rp,nogoo9srv (rows of -base binaries are always measured)", *only)
	}
	httpS := map[string][]sample{}
	idleS := map[string][]sample{}
	wsS := map[string][]sample{}
	for r := 0; r < *rounds; r++ {
		// Each round starts one row further on: a row measured right after another (after
		// direct, which leaves the shared CPU's caches full of the backend) is not always the same.
		for i := range rows {
			rw := rows[(i+r)%len(rows)]
			cpu0 := groupCPU(pgids[rw.proc])
			s, err := wrk(rw.httpURL, *conns, *dur)
			if err != nil {
				return fmt.Errorf("%s: %w", rw.name, err)
			}
			s.cpuUS = perOp(groupCPU(pgids[rw.proc])-cpu0, s.rps*dur.Seconds())
			httpS[rw.name] = append(httpS[rw.name], s)
			s, err = wrk(rw.httpURL, 1, 2*time.Second)
			if err != nil {
				return fmt.Errorf("%s unloaded: %w", rw.name, err)
			}
			idleS[rw.name] = append(idleS[rw.name], s)
			cpu0 = groupCPU(pgids[rw.proc])
			s, err = wsload(self, rw.wsURL, *conns, *wsDur)
			if err != nil {
				return fmt.Errorf("%s websocket: %w", rw.name, err)
			}
			s.cpuUS = perOp(groupCPU(pgids[rw.proc])-cpu0, s.rps*wsDur.Seconds())
			wsS[rw.name] = append(wsS[rw.name], s)
			fmt.Fprintf(os.Stderr, "round %d %-22s http %.0f req/s (%.1f us CPU each), websocket %.0f round trips/s (%.1f us CPU each)\n",
				r+1, rw.name, httpS[rw.name][r].rps, httpS[rw.name][r].cpuUS, s.rps, s.cpuUS)
		}
	}

	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "### Proxy (figure 6): %d interleaved rounds, median (min-max); wrk -t1 -c%d -d%s, 1 KiB bodies; load on CPU 0, backend and proxy on CPU 1; backend on %s; load average at the end: %s\n\n", *rounds, *conns, *dur, *podIP, strings.Join(strings.Fields(string(load))[:3], " "))
	b.WriteString("\"vs direct\" and \"vs nginx\" are medians over rounds of each round's ratio (rows of a round run back to back, starting one row further on each round, so a busy machine slows both sides of a ratio alike). \"added\" is the unloaded (1 connection) p50 minus direct's. \"CPU\" is the user+system CPU time of the row's own process (nginx: master and worker; direct: the backend) per request or round trip, in microseconds, median over rounds.\n\n")
	b.WriteString("| path | HTTP req/s | vs direct | vs nginx | CPU us/req | p50 ms | p99 ms | unloaded p50 ms (added) | WebSocket round trips/s | vs direct | vs nginx | CPU us/round trip | WS p50 ms | WS p99 ms |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	dI := median(idleS["direct"], p50)
	for _, rw := range rows {
		h, i, w := httpS[rw.name], idleS[rw.name], wsS[rw.name]
		fmt.Fprintf(&b, "| %s | %.0f (%.0f-%.0f) | %s | %s | %.1f | %.2f | %.2f | %.3f (%+.3f) | %.0f (%.0f-%.0f) | %s | %s | %.1f | %.2f | %.2f |\n",
			rw.name, median(h, rps), minOf(h, rps), maxOf(h, rps), ratio(h, httpS["direct"]), ratio(h, httpS["nginx"]), median(h, cpu),
			median(h, p50), median(h, p99),
			median(i, p50), median(i, p50)-dI,
			median(w, rps), minOf(w, rps), maxOf(w, rps), ratio(w, wsS["direct"]), ratio(w, wsS["nginx"]), median(w, cpu),
			median(w, p50), median(w, p99))
	}
	if _, ok := httpS["nginx"]; ok {
		b.WriteString(cpuRatioTable(rows, httpS, wsS))
	}
	if *cutRounds > 0 {
		b.WriteString("\n")
		if assets, ok := envtestAssets(); !ok {
			fmt.Fprintf(&b, "### Cutover (figure 7): skipped: no kube-apiserver and etcd in %s (run hack/build-tools.sh or set KUBEBUILDER_ASSETS)\n", assets)
		} else {
			res, err := runCutover(assets, *cutRounds)
			if err != nil {
				return err
			}
			b.WriteString(cutoverTable(res))
		}
	}
	fmt.Print(b.String())
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(*out, []byte(b.String()), 0o644)
	}
	return nil
}

func nginxConf(dir, backend string) string {
	return fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  upstream backend { server %[2]s; keepalive 256; }
  server {
    listen 127.0.0.1:18083;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`, dir, backend)
}

var (
	reRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reP50 = regexp.MustCompile(`\s50%\s+([0-9.]+)(us|ms|s)`)
	reP99 = regexp.MustCompile(`\s99%\s+([0-9.]+)(us|ms|s)`)
	// Socket errors: connect 0, read 0, write 0, timeout 6
	reSockErr = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// wrk runs wrk on CPU 0 and parses req/s and the p50/p99 latencies (ms).
func wrk(u string, conns int, d time.Duration) (sample, error) {
	out, err := exec.Command("taskset", "-c", "0", "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+d.String(), "--latency",
		"-H", "Authorization: Bearer "+benchToken, u).CombinedOutput()
	if err != nil {
		return sample{}, fmt.Errorf("wrk %s: %v: %s", u, err, out)
	}
	s := string(out)
	// Failed requests void the run; wrk's "timeout" count (answers slower than 2 s) is what a
	// machine busy with other work produces, and shows in p99 instead.
	if m := reSockErr.FindStringSubmatch(s); strings.Contains(s, "Non-2xx") || (m != nil && (m[1] != "0" || m[2] != "0" || m[3] != "0")) {
		return sample{}, fmt.Errorf("wrk %s reported errors:\n%s", u, s)
	}
	if m := reSockErr.FindStringSubmatch(s); m != nil && m[4] != "0" {
		fmt.Fprintf(os.Stderr, "wrk %s: %s requests slower than 2s (busy machine)\n", u, m[4])
	}
	m := reRPS.FindStringSubmatch(s)
	a, b := reP50.FindStringSubmatch(s), reP99.FindStringSubmatch(s)
	if m == nil || a == nil || b == nil {
		return sample{}, fmt.Errorf("unexpected wrk output:\n%s", s)
	}
	rps, _ := strconv.ParseFloat(m[1], 64)
	return sample{rps: rps, p50: toMS(a[1], a[2]), p99: toMS(b[1], b[2])}, nil
}

func toMS(v, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return f / 1000
	case "s":
		return f * 1000
	}
	return f
}

func wsload(self, u string, conns int, d time.Duration) (sample, error) {
	out, err := exec.Command("taskset", "-c", "0", self, "wsload", "-url", u, "-conns", strconv.Itoa(conns), "-duration", d.String()).Output()
	if err != nil {
		return sample{}, fmt.Errorf("wsload %s: %v", u, err)
	}
	var m map[string]float64
	if err := json.Unmarshal(out, &m); err != nil {
		return sample{}, fmt.Errorf("wsload %s: %v: %s", u, err, out)
	}
	return sample{rps: m["rps"], p50: m["p50_ms"], p99: m["p99_ms"]}, nil
}

func waitListening(addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s after 15s", addr)
}

// stopProc sends SIGTERM to the process group it started, then SIGKILL after 5 s.
func stopProc(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func rps(s sample) float64 { return s.rps }
func p50(s sample) float64 { return s.p50 }
func p99(s sample) float64 { return s.p99 }
func cpu(s sample) float64 { return s.cpuUS }

func values(ss []sample, f func(sample) float64) []float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	sort.Float64s(v)
	return v
}

func median(ss []sample, f func(sample) float64) float64 {
	v := values(ss, f)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}
func minOf(ss []sample, f func(sample) float64) float64 { v := values(ss, f); return v[0] }
func maxOf(ss []sample, f func(sample) float64) float64 { v := values(ss, f); return v[len(v)-1] }

// ratio is the median over rounds of row/direct req/s, with min and max: "0.52x (0.41-0.60)".
func ratio(row, direct []sample) string {
	if len(direct) != len(row) || len(row) == 0 {
		return "n/a"
	}
	r := make([]float64, len(row))
	for i := range row {
		r[i] = row[i].rps / direct[i].rps
	}
	sort.Float64s(r)
	return fmt.Sprintf("%.2fx (%.2f-%.2f)", r[len(r)/2], r[0], r[len(r)-1])
}

// cpuRatioTable compares each row's CPU per request and per WebSocket round trip with nginx's
// round by round (the rows of a round run back to back, so a busy machine moves both sides of a
// ratio alike): the median of the per-round ratios, their range, and in how many rounds the row
// used at most nginx's CPU. The medians of the main table come from different rounds and scatter
// more.
func cpuRatioTable(rows []row, httpS, wsS map[string][]sample) string {
	var b strings.Builder
	b.WriteString("\nCPU against nginx's in the same round: median of the per-round ratios (min-max), and the rounds at or below nginx's.\n\n")
	b.WriteString("| path | CPU per request vs nginx | rounds <= nginx | CPU per round trip vs nginx | rounds <= nginx |\n|---|---|---|---|---|\n")
	for _, rw := range rows {
		if rw.name == "nginx" || rw.name == "direct" {
			continue
		}
		hr, hn := cpuRatios(httpS[rw.name], httpS["nginx"])
		wr, wn := cpuRatios(wsS[rw.name], wsS["nginx"])
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", rw.name, hr, hn, wr, wn)
	}
	return b.String()
}

// cpuRatios is the median (min-max) of row's per-round CPU per operation over base's, and in how
// many of the rounds it was at most 1.
func cpuRatios(row, base []sample) (string, string) {
	var r []float64
	for i := range row {
		if i < len(base) && row[i].cpuUS > 0 && base[i].cpuUS > 0 {
			r = append(r, row[i].cpuUS/base[i].cpuUS)
		}
	}
	if len(r) == 0 {
		return "n/a", "n/a"
	}
	sort.Float64s(r)
	below := 0
	for _, x := range r {
		if x <= 1 {
			below++
		}
	}
	return fmt.Sprintf("%.2fx (%.2f-%.2f)", r[len(r)/2], r[0], r[len(r)-1]), fmt.Sprintf("%d of %d", below, len(r))
}

// groupCPU is the CPU time (user and system) used so far by the processes of process group
// pgid, from /proc/<pid>/stat; a process that exited is no longer counted, so take both readings
// while the group runs. 0 for pgid 0.
func groupCPU(pgid int) time.Duration {
	if pgid == 0 {
		return 0
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// Fields after the command name (which may contain spaces) in parentheses: state is
		// the first, pgrp the third, utime and stime the 12th and 13th.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 13 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		s, _ := strconv.ParseInt(fields[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux architecture Go
// supports.
const clockTicks = 100

// perOp is cpu divided over ops, in microseconds (0 when nothing was done).
func perOp(cpu time.Duration, ops float64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(cpu) / float64(time.Microsecond) / ops
}

// killChildren SIGKILLs every process whose parent is this one: what stopAll did not stop, the
// cutover's etcd and kube-apiserver (envtest starts them in process groups of their own). The
// signal handler exits without running deferred calls, so without this they outlived
// proxybench after make bench's timeout, holding the machine lock it had taken (2026-12-05:
// every later test on the machine waited behind them).
func killChildren() {
	self := strconv.Itoa(os.Getpid())
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after
		// the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && f[1] == self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
