// Command bench measures nogoo9 against baselines measured in the same run, on local clusters
// (etcd, kube-apiserver, scheduler, controller-manager, kwok), and prints one markdown table per
// figure, also written to bench/results.md. `make bench` runs it; docs/performance.md explains the
// figures.
//
// Scale comes from flags or the environment: BENCH_N (workspaces upgraded, default 100),
// BENCH_SCALE (workspace pods for the read-path and memory figures, default 2000; 10000 is the
// issue's figure), BENCH_ROUNDS (default 3).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nogoo9/no-crd/hack/bench"
	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/envvar"
)

type config struct {
	n, scale, other, rounds int
	// kwokPodWorkers is the local clusters' kwok pod stage workers (0: localcluster's default).
	kwokPodWorkers      int
	binDir, nogoo9, out string
	// before is an earlier nogoo9 binary measured beside nogoo9 in figures 1-2 (its own
	// workspaces, in the same rounds) and 4-5 (cold start and memory only), so a change is
	// compared in one run, on one cluster, round by round.
	before  string
	workDir string
	root    string // the module root (where go.mod is): go build/run run there
	figures map[int]bool
	timeout time.Duration
	keep    bool
	// skipDefaultKCM leaves out figure 1's "Deployments, default kcm" rollouts (about a third of
	// an N=100 run, six of seventeen minutes at N=1000); no aim is a ratio against them.
	skipDefaultKCM bool
}

func main() {
	var c config
	var figs string
	bench.Logf = logf
	flag.IntVar(&c.n, "n", envvar.OrExit(envvar.Int("BENCH_N", 100)), "Workspaces (and Deployments, floor pods) upgraded in figures 1 and 2 (env BENCH_N).")
	flag.IntVar(&c.scale, "scale", envvar.OrExit(envvar.Int("BENCH_SCALE", 2000)), "Workspace pods in the cluster for figures 4 and 5 (env BENCH_SCALE; the issue's figure is 10000).")
	flag.IntVar(&c.other, "other-pods", envvar.OrExit(envvar.Int("BENCH_OTHER_PODS", 5000)), "Non-workspace pods in the cluster for figures 4 and 5, so label filtering matters (env BENCH_OTHER_PODS).")
	flag.IntVar(&c.rounds, "rounds", envvar.OrExit(envvar.Int("BENCH_ROUNDS", 3)), "Rounds per figure, interleaved baseline/candidate (env BENCH_ROUNDS).")
	flag.IntVar(&c.kwokPodWorkers, "kwok-pod-workers", envvar.OrExit(envvar.Int("BENCH_KWOK_POD_WORKERS", 0)), fmt.Sprintf("Pod stages kwok, the simulated kubelet, plays at once in the benchmark's clusters (env BENCH_KWOK_POD_WORKERS; 0: the local cluster's default, %d; kwok's own default and the layout of rounds before the twentieth is 4).", localcluster.DefaultKwokPodWorkers))
	flag.StringVar(&c.binDir, "bin", "bin", "Directory with etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok (make tools).")
	flag.StringVar(&c.nogoo9, "nogoo9", "bin/nogoo9", "The nogoo9 binary (make build).")
	flag.StringVar(&c.before, "nogoo9-before", os.Getenv("BENCH_NOGOO9_BEFORE"), "An earlier nogoo9 binary that figures 1-2 (bulk upgrades of workspaces of its own) and 4-5 (cold start and memory) also measure, interleaved, as \"nogoo9 before\" (env BENCH_NOGOO9_BEFORE; empty: none).")
	flag.StringVar(&c.out, "out", "bench/results.md", "Markdown file the results are written to.")
	flag.StringVar(&c.workDir, "work-dir", "", "Directory for cluster data and logs (default: a new temporary directory, removed unless -keep).")
	flag.BoolVar(&c.keep, "keep", false, "Keep the work directory (logs) after the run.")
	flag.StringVar(&figs, "figures", envvar.String("BENCH_FIGURES", "1,2,3,4,5,6,7"), "Comma-separated figures to run (env BENCH_FIGURES).")
	flag.BoolVar(&c.skipDefaultKCM, "skip-default-kcm", envvar.OrExit(envvar.Bool("BENCH_SKIP_DEFAULT_KCM", false)), "Leave out figure 1's \"Deployments, default kcm\" rollouts, the slowest subject, against which no aim is measured (env BENCH_SKIP_DEFAULT_KCM=1).")
	flag.DurationVar(&c.timeout, "timeout", envvar.OrExit(envvar.Duration("BENCH_TIMEOUT", 20*time.Minute)), "Bound on the whole run; what is unfinished is reported as failed (env BENCH_TIMEOUT).")
	flag.Parse()
	if err := c.validate(figs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// errInterrupted is run's answer when a signal stopped it: what was measured is written, but
// the run is not whole, so the command must not exit 0 (a script would take it for complete).
var errInterrupted = errors.New("interrupted: the results written are partial")

func (c *config) validate(figs string) error {
	if c.n < 1 {
		return fmt.Errorf("-n (BENCH_N) = %d: use a positive number of workspaces, e.g. 100", c.n)
	}
	if c.rounds < 1 {
		return fmt.Errorf("-rounds (BENCH_ROUNDS) = %d: use at least 1 (3 or more for a meaningful median)", c.rounds)
	}
	if c.kwokPodWorkers < 0 {
		return fmt.Errorf("-kwok-pod-workers (BENCH_KWOK_POD_WORKERS) = %d: use a positive number, or 0 for the default (%d)", c.kwokPodWorkers, localcluster.DefaultKwokPodWorkers)
	}
	if c.scale < 1 || c.other < 0 {
		return fmt.Errorf("-scale = %d, -other-pods = %d: use a positive scale and a non-negative count of other pods", c.scale, c.other)
	}
	c.figures = map[int]bool{}
	for _, f := range strings.Split(figs, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 || k > 7 {
			return fmt.Errorf("-figures (BENCH_FIGURES): %q is not a figure number: use numbers 1 to 7, e.g. 1,2,5", f)
		}
		c.figures[k] = true
	}
	if len(c.figures) == 0 {
		return errors.New("-figures (BENCH_FIGURES) is empty: name at least one figure, e.g. 1")
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	c.root = root
	for _, p := range []*string{&c.binDir, &c.nogoo9, &c.out} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if c.before != "" {
		if c.before, err = filepath.Abs(c.before); err != nil {
			return err
		}
		if _, err := os.Stat(c.before); err != nil {
			return fmt.Errorf("-nogoo9-before (BENCH_NOGOO9_BEFORE) %q: %w: give the path of an earlier nogoo9 binary, or leave it empty", c.before, err)
		}
	}
	return nil
}

func run(c config) error {
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, c.timeout)
	defer cancel()

	if c.workDir == "" {
		d, err := os.MkdirTemp("", "nogoo9-bench-")
		if err != nil {
			return err
		}
		c.workDir = d
		if !c.keep {
			defer os.RemoveAll(d)
		}
	}
	logf("work directory %s (logs of every process; -keep keeps it)", c.workDir)
	started := time.Now()
	res := &bench.Results{}
	var extra []string // markdown sections appended after the tables (proxybench's own table)
	// failed lists what failed: the results are written all the same, and the exit status is 1.
	var failed []string

	if c.figures[1] || c.figures[2] || c.figures[3] {
		if err := figuresUpgrade(ctx, c, res); err != nil {
			logf("figures 1-3 stopped early: %v", err)
			res.Note(titleUpgrade(c.n), "stopped early: %v", err)
			failed = append(failed, "figures 1-3 stopped early")
		}
	}
	if c.figures[4] || c.figures[5] {
		if err := figuresScale(ctx, c, res); err != nil {
			logf("figures 4-5 stopped early: %v", err)
			res.Note(titleRead(c.scale), "stopped early: %v", err)
			failed = append(failed, "figures 4-5 stopped early")
		}
	}
	if c.figures[6] || c.figures[7] {
		section, err := figuresProxy(ctx, c)
		if err != nil {
			logf("figures 6-7: %v", err)
			section += fmt.Sprintf("\n- figures 6 and 7 failed: %v\n", err)
			failed = append(failed, "figures 6-7 failed")
		}
		extra = append(extra, section)
	}
	// A row none of whose rounds produced a sample is a figure that failed too.
	for _, f := range res.Figures {
		for _, row := range f.Rows {
			if len(row.Samples) == 0 && row.Failures > 0 {
				failed = append(failed, fmt.Sprintf("%q: every round of %q failed", f.Title, row.Subject))
			}
		}
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# nogoo9 benchmark results\n\n")
	fmt.Fprintf(&buf, "- date: %s\n- machine: %d cores (%s), %s, %s/%s\n- run: N=%d, scale=%d workspace pods + %d other pods, %d rounds, took %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cpuModel(), memTotal(), runtime.GOOS, runtime.GOARCH,
		c.n, c.scale, c.other, c.rounds, time.Since(started).Round(time.Second))
	fmt.Fprintf(&buf, "Ratios divide a row's median by its baseline's median (lower is better for times, writes and memory; higher for rates). Rounds are interleaved: baseline, candidate, baseline, ...\n\n")
	res.WriteMarkdown(&buf)
	for _, s := range extra {
		buf.WriteString(s)
		buf.WriteString("\n")
	}
	os.Stdout.Write(buf.Bytes())
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(c.out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", c.out, err)
	}
	logf("results written to %s", c.out)
	if sigCtx.Err() != nil {
		return errInterrupted
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s; the results in %s say why (-keep keeps the logs of every process)", strings.Join(failed, "; "), c.out)
	}
	return nil
}

// figuresProxy builds and runs the proxy benchmark hack/bench/proxybench (owned by the proxy
// work) and returns its markdown.
func figuresProxy(ctx context.Context, c config) (string, error) {
	section := "### 6-7. Proxy throughput, latency and cutover (hack/bench/proxybench)\n\n"
	if _, err := os.Stat(filepath.Join(c.root, "hack", "bench", "proxybench")); err != nil {
		return section, fmt.Errorf("hack/bench/proxybench is not there yet: %w", err)
	}
	bin := filepath.Join(c.workDir, "proxybench")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hack/bench/proxybench")
	build.Dir, build.Stderr = c.root, os.Stderr
	if err := build.Run(); err != nil {
		return section, fmt.Errorf("build hack/bench/proxybench: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, proxyBenchLimit(c.rounds))
	defer cancel()
	logf("figures 6-7: %s -rounds %d", bin, c.rounds)
	cmd := exec.CommandContext(pctx, bin, "-rounds", strconv.Itoa(c.rounds))
	cmd.Dir, cmd.Stderr = c.root, os.Stderr
	// SIGTERM first so proxybench stops its own backend and proxies; SIGKILL 15 s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	out, err := cmd.Output()
	return section + string(out), err
}

// proxyBenchLimit bounds proxybench's run: a round of its seven rows took 70 s on 2 cores
// (2026-12-05) and the cutover figure about a minute, so 90 s a round and 3 minutes more. A fixed
// 6 minutes cut a run of 5 rounds short after its last round, and the figures failed.
func proxyBenchLimit(rounds int) time.Duration {
	return time.Duration(rounds)*90*time.Second + 3*time.Minute
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown memory"
	}
	var kb float64
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb)
		}
	}
	return fmt.Sprintf("%.0f GiB RAM", kb/1024/1024)
}

// moduleRoot is the nearest directory upwards from the working directory that has go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or above: run the benchmark from the nogoo9 repository (make bench)", dir)
		}
	}
}
