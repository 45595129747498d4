package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nogoo9/no-crd/hack/bench"
	"github.com/nogoo9/no-crd/hack/localcluster"
)

func titleUpgrade(n int) string {
	return fmt.Sprintf("1. Bulk upgrade convergence, side by side (N=%d)", n)
}
func titleRecreate(n int) string {
	return fmt.Sprintf("1b. Bulk upgrade convergence, recreate-style with ReadWriteOncePod claims (N=%d)", n)
}
func titleWrites(n int) string {
	return fmt.Sprintf("2. API writes per upgraded workspace (N=%d)", n)
}
func titleEvents(n int) string {
	return fmt.Sprintf("2b. Event writes per upgraded workspace (N=%d)", n)
}

// Subject names shared by the rows of figures 1 and 2.
const (
	subjDeployDefault = "Deployments, default kcm"
	subjDeployRaised  = "Deployments, raised kcm"
	subjDeployRecr    = "Deployments (Recreate), raised kcm"
	subjFloor         = "floor (bare client, QPS 500)"
	subjFloorRecr     = "floor recreate (bare client, QPS 500)"
	// The floor that first writes nogoo9's intent on each old pod (bench.Floor.Intent): how much
	// of nogoo9's gap is the intent the design requires.
	subjFloorIntent     = "floor + intent (bare client, QPS 500)"
	subjFloorRecrIntent = "floor recreate + intent (bare client, QPS 500)"
	subjNogoo9          = "nogoo9"
	subjNogoo9Recr      = "nogoo9 (Recreate)"
	// The -nogoo9-before binary (BENCH_NOGOO9_BEFORE), measured in the same rounds.
	subjBefore     = "nogoo9 before"
	subjBeforeRecr = "nogoo9 before (Recreate)"
)

// rollout is one subject's measured rollout in a round.
type rollout struct {
	subject string
	roll    func(ctx context.Context) (time.Duration, error)
	tl      func() string
}

// rotated returns subjects in the order of round r (from 1): each round starts one further along,
// so no subject always follows the same one (a rollout leaves work behind on the API server, the
// scheduler and kwok: status writes, Events, garbage) or always comes first.
func rotated(subjects []rollout, r int) []rollout {
	if len(subjects) == 0 {
		return nil
	}
	k := (r - 1) % len(subjects)
	return append(slices.Clone(subjects[k:]), subjects[:k]...)
}

// startCluster starts a fresh local cluster in dir whose controller-manager leaves Deployments to
// the benchmark's own (RolloutKCM).
func startCluster(ctx context.Context, c config, name string) (*localcluster.Cluster, error) {
	logf("starting local cluster %s", name)
	t := time.Now()
	// At --v=1 kube-apiserver logs each watcher it closes for not keeping up, with its selector
	// (whose it was: kwok's, the scheduler's, the benchmark's own); about 125 KB of log per
	// N=1000 run, kept with -keep.
	apiFlags := []string{"--v=1"}
	if os.Getenv("BENCH_PPROF_DIR") != "" {
		// kube-apiserver's /debug/pprof, for its profile of each rollout (measured).
		apiFlags = append(apiFlags, "--profiling=true")
	}
	cl, err := localcluster.Start(ctx, localcluster.Options{
		BinDir:                      c.binDir,
		Dir:                         filepath.Join(c.workDir, name),
		NodePods:                    upgradeNodePods(c),
		KwokPodWorkers:              c.kwokPodWorkers,
		ExtraControllerManagerFlags: bench.ClusterControllerManagerFlags,
		ExtraAPIServerFlags:         apiFlags,
	})
	if err != nil {
		return nil, err
	}
	logf("cluster %s up in %s", name, time.Since(t).Round(100*time.Millisecond))
	return cl, nil
}

// upgradeNodePods is the kwok node's pods capacity for the upgrade cluster: at least the pods its
// figures hold at once, 2 Deployments sets and 4 floor sets of N, 2 workspace sets of N per nogoo9
// binary (the earlier one too), N more while a side-by-side rollout holds a second pod per unit,
// and 1,000 for figure 3's spawns and what a rollout leaves terminating. With too few (as when
// the earlier binary's 2,000 workspaces at N=1000 were not counted) the last pods set up stay
// Pending, the scheduler fails them over and over, and the next rollout cannot place its pods.
func upgradeNodePods(c config) int {
	binaries := 1
	if c.before != "" {
		binaries++
	}
	need := (2+4+2*binaries+1)*c.n + 1000
	return max(need, c.scale+c.other+2*c.n+1000)
}

// fastClient is the clientset of the floor and of the benchmark's own setup: client QPS 500 and
// burst 1000, nogoo9's defaults.
func fastClient(cl *localcluster.Cluster) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.UserAgent = "nogoo9-bench"
	return kubernetes.NewForConfig(cfg)
}

// measured runs one rollout and records its time and its API writes per workspace.
func measured(ctx context.Context, res *bench.Results, c config, cs kubernetes.Interface, fig, subject string, n int,
	roll func(ctx context.Context) (time.Duration, error), tl func() string) {
	// Start from a quiet API server: what the previous rollout left behind must not count
	// against this subject (its CPU, its requests, its time).
	switch waited, quiet, err := bench.AwaitQuiet(ctx, cs, time.Second, 10*time.Second); {
	case err != nil:
		logf("%s: %s: waiting for a quiet API server: %v", fig, subject, err)
		res.Note(fig, "%s: one rollout did not wait for a quiet API server (%v)", subject, err)
	case !quiet:
		logf("%s: %s: the API server still served writes after %s; measuring anyway", fig, subject, waited.Round(100*time.Millisecond))
		res.Note(fig, "%s: one rollout started while the API server still served writes (after waiting %s)", subject, waited.Round(100*time.Millisecond))
	}
	before, err := bench.ScrapeSnapshot(ctx, cs)
	if err != nil {
		res.Fail(fig, subject, "s", err)
		return
	}
	if dir := os.Getenv("BENCH_PPROF_DIR"); dir != "" {
		// kube-apiserver's own CPU profile over the 4 s from the start (the admin credentials may
		// read its /debug/pprof): where its time goes for this subject's requests and events.
		name := strings.NewReplacer(" ", "-", "(", "", ")", "", ",", "").Replace(subject)
		path := filepath.Join(dir, fmt.Sprintf("kube-apiserver-%s-%d.pprof", name, time.Now().Unix()))
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Not cancelled with the rollout (the profile outlives a short one), but bounded.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			saveAPIServerProfile(pctx, cs, path)
		}()
		// One CPU profile at a time: the next rollout starts once this one is saved.
		defer func() { <-done }()
	}
	cpuBefore := bench.CPUByCommand()
	d, err := roll(ctx)
	cpu := bench.CPUDelta(cpuBefore, bench.CPUByCommand())
	if err != nil {
		logf("%s: %s: %v", fig, subject, err)
		res.Fail(fig, subject, "s", err)
		return
	}
	res.Add(fig, subject, "s", d.Seconds())
	logf("%s: %s: %.2f s; CPU of the cluster's processes meanwhile: %s; load average %s", fig, subject, d.Seconds(), cpu, loadAverage())
	if tl != nil {
		logf("%s: %s: timeline (first seen by the benchmark's watch, from the start): %s", fig, subject, tl())
	}
	// Writes that follow the last observable step (status updates, nogoo9's removal of a
	// Recreate's rollback spec) belong to the rollout too.
	select {
	case <-ctx.Done():
		return
	case <-time.After(2 * time.Second):
	}
	if after, err := bench.ScrapeSnapshot(ctx, cs); err == nil {
		logf("%s: %s: API server, until 2 s after the end: %s", fig, subject, before.Traffic.PerUnit(after.Traffic, n))
		logf("%s: %s: API server requests per workspace by verb and resource, until 2 s after the end: %s", fig, subject, before.Requests.PerUnit(after.Requests, n))
	}
	if fig != titleUpgrade(c.n) || !c.figures[2] {
		return
	}
	// Figures 2 and 2b count until the API server is quiet: Events written after the end (by a
	// late or rate-limited Event sink) are the rollout's too.
	switch waited, quiet, err := bench.AwaitQuiet(ctx, cs, time.Second, 30*time.Second); {
	case err != nil:
		logf("%s: %s: waiting for a quiet API server after the end: %v", fig, subject, err)
		res.Note(titleWrites(c.n), "%s: one count did not wait for a quiet API server after the end (%v)", subject, err)
	case !quiet:
		res.Note(titleWrites(c.n), "%s: one count ended while the API server still served writes (2 s after the end, then %s more)", subject, waited.Round(100*time.Millisecond))
	}
	after, err := bench.ScrapeSnapshot(ctx, cs)
	if err != nil {
		res.Fail(titleWrites(c.n), subject, "writes/workspace", err)
		res.Fail(titleEvents(c.n), subject, "events/workspace", err)
		return
	}
	res.Add(titleWrites(c.n), subject, "writes/workspace", (after.Writes-before.Writes)/float64(n))
	res.Add(titleEvents(c.n), subject, "events/workspace", (after.EventWrites-before.EventWrites)/float64(n))
}

// figuresUpgrade measures figures 1, 1b and 2 (and 3, which needs nogoo9's API on the same
// cluster) on one cluster, interleaving the subjects round by round.
func figuresUpgrade(ctx context.Context, c config, res *bench.Results) error {
	cl, err := startCluster(ctx, c, "upgrade")
	if err != nil {
		return err
	}
	defer func() {
		if err := cl.Stop(); err != nil {
			logf("stopping cluster: %v", err)
		}
	}()
	cs, err := fastClient(cl)
	if err != nil {
		return err
	}
	kcm := &bench.RolloutKCM{Bin: filepath.Join(c.binDir, "kube-controller-manager"), Kubeconfig: cl.Kubeconfig,
		Dir: cl.Dir, Client: cs}
	defer kcm.Stop()
	ports := func() (int, error) {
		p, err := localcluster.FreePorts(1)
		if err != nil {
			return 0, err
		}
		return p[0], nil
	}
	fig, figR, figW := titleUpgrade(c.n), titleRecreate(c.n), titleWrites(c.n)
	res.Note(fig, "time from the template change (or upgrade-all call) until every workspace runs the new version, is Ready, and no old pod is left; Deployments also report 1 updated, available replica")
	res.Note(fig, "kcm = kube-controller-manager running only the deployment and replicaset controllers; raised = %v", bench.RaisedKCMFlags)
	res.Note(fig, "kwok, the simulated kubelet of the cluster's one node, plays %d pod stages (a Ready status, a deletion) at once", kwokWorkers(c))
	res.Note(figR, "recreate-style: each workspace (and Deployment) mounts a ReadWriteOncePod claim on a pre-created PV, so the old pod must be gone before the new one can run; Deployments use strategy Recreate")
	res.Note(figW, "create, update, patch and delete requests counted by kube-apiserver's apiserver_request_total (leases and events excluded), including the scheduler's bindings and kwok's status writes, from 2 s after the end until the API server has served no write (leases aside) for 1 s, at most 30 s more, divided by N")

	do1 := c.figures[1] || c.figures[2]
	deploy := &bench.Deployments{Client: cs, Namespace: "bench-deploy", N: c.n}
	deployR := &bench.Deployments{Client: cs, Namespace: "bench-deploy-recreate", N: c.n, Recreate: true}
	floor := &bench.Floor{Client: cs, Namespace: "bench-floor", N: c.n}
	floorR := &bench.Floor{Client: cs, Namespace: "bench-floor-recreate", N: c.n, Recreate: true}
	floorI := &bench.Floor{Client: cs, Namespace: "bench-floor-intent", N: c.n, Intent: true}
	floorRI := &bench.Floor{Client: cs, Namespace: "bench-floor-recreate-intent", N: c.n, Recreate: true, Intent: true}

	if do1 {
		logf("setting up %d Deployments (x2) and %d floor pods (x4)", c.n, c.n)
		if err := kcm.Start(ctx, bench.RaisedKCMFlags, ports); err != nil {
			return fmt.Errorf("start rollout controller-manager: %w", err)
		}
		for _, s := range []interface{ Setup(context.Context) error }{deploy, deployR, floor, floorR, floorI, floorRI} {
			if err := s.Setup(ctx); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
		}
		if err := kcm.Stop(); err != nil {
			return err
		}
	}
	nog, nogErr := startNogoo9Upgrade(ctx, c, cl, cs, "bench-ws", "nogoo9-upgrade", true)
	if nogErr != nil {
		logf("nogoo9 candidate unavailable: %v", nogErr)
		res.Fail(fig, subjNogoo9, "s", nogErr)
	} else {
		defer nog.stop()
	}
	// The earlier binary, if any, in a namespace of its own (each nogoo9 watches only its
	// namespace, so neither sees the other's pods), measured in the same rounds.
	var before *nogoo9Proc
	if c.before != "" && do1 {
		bc := c
		bc.nogoo9 = c.before
		b, err := startNogoo9Upgrade(ctx, bc, cl, cs, "bench-ws-before", "nogoo9-upgrade-before", false)
		if err != nil {
			logf("nogoo9 before unavailable: %v", err)
			res.Fail(fig, subjBefore, "s", err)
		} else {
			before = b
			defer before.stop()
			res.Note(fig, "nogoo9 before: %s, in namespace bench-ws-before; floor, nogoo9 and nogoo9 before run in an order that rotates from round to round (figure 1b too)", c.before)
		}
	}

	timeout := time.Duration(c.n)*time.Second + 2*time.Minute
	for r := 1; do1 && r <= c.rounds && ctx.Err() == nil; r++ {
		logf("figure 1: round %d of %d", r, c.rounds)
		// Side by side: default kcm, raised kcm, floor, nogoo9.
		for _, flags := range []struct {
			subject string
			flags   []string
		}{{subjDeployDefault, nil}, {subjDeployRaised, bench.RaisedKCMFlags}} {
			if flags.subject == subjDeployDefault && c.skipDefaultKCM {
				continue
			}
			if err := kcm.Start(ctx, flags.flags, ports); err != nil {
				res.Fail(fig, flags.subject, "s", err)
				continue
			}
			measured(ctx, res, c, cs, fig, flags.subject, c.n, func(ctx context.Context) (time.Duration, error) {
				return deploy.Roll(ctx, timeout)
			}, nil)
			if err := kcm.Stop(); err != nil {
				return err
			}
		}
		sbs := []rollout{{subjFloor, func(ctx context.Context) (time.Duration, error) {
			return floor.Roll(ctx, timeout)
		}, func() string { return floor.Timeline.String() }}, {subjFloorIntent, func(ctx context.Context) (time.Duration, error) {
			return floorI.Roll(ctx, timeout)
		}, func() string { return floorI.Timeline.String() }}}
		recr := []rollout{{subjFloorRecr, func(ctx context.Context) (time.Duration, error) {
			return floorR.Roll(ctx, timeout)
		}, func() string { return floorR.Timeline.String() }}, {subjFloorRecrIntent, func(ctx context.Context) (time.Duration, error) {
			return floorRI.Roll(ctx, timeout)
		}, func() string { return floorRI.Timeline.String() }}}
		for _, p := range []struct {
			n         *nogoo9Proc
			sbs, recr string
		}{{nog, subjNogoo9, subjNogoo9Recr}, {before, subjBefore, subjBeforeRecr}} {
			if p.n == nil {
				continue
			}
			n := p.n
			sbs = append(sbs, rollout{p.sbs, func(ctx context.Context) (time.Duration, error) {
				return n.sideBySide.roll(ctx, timeout)
			}, func() string { return n.sideBySide.timeline.String() }})
			if n.recreate != nil {
				recr = append(recr, rollout{p.recr, func(ctx context.Context) (time.Duration, error) {
					return n.recreate.roll(ctx, timeout)
				}, func() string { return n.recreate.timeline.String() + n.recreate.sizes() }})
			}
		}
		for _, s := range rotated(sbs, r) {
			measured(ctx, res, c, cs, fig, s.subject, c.n, s.roll, s.tl)
		}
		// Recreate-style: Deployments with strategy Recreate (raised kcm), floor, nogoo9.
		if err := kcm.Start(ctx, bench.RaisedKCMFlags, ports); err != nil {
			res.Fail(figR, subjDeployRecr, "s", err)
		} else {
			measured(ctx, res, c, cs, figR, subjDeployRecr, c.n, func(ctx context.Context) (time.Duration, error) {
				return deployR.Roll(ctx, timeout)
			}, nil)
			if err := kcm.Stop(); err != nil {
				return err
			}
		}
		for _, s := range rotated(recr, r) {
			measured(ctx, res, c, cs, figR, s.subject, c.n, s.roll, s.tl)
		}
	}
	if c.skipDefaultKCM {
		res.Note(fig, "%s: left out (-skip-default-kcm)", subjDeployDefault)
	} else {
		res.Compare(fig, subjDeployRaised, subjDeployDefault)
	}
	res.Compare(fig, subjFloor, subjDeployRaised)
	res.Compare(fig, subjNogoo9, subjFloor, subjDeployRaised)
	res.Compare(figR, subjFloorRecr, subjDeployRecr)
	res.Compare(figR, subjNogoo9Recr, subjFloorRecr, subjDeployRecr)
	res.Compare(fig, subjFloorIntent, subjFloor)
	res.Compare(fig, subjNogoo9, subjFloorIntent)
	res.Compare(figR, subjFloorRecrIntent, subjFloorRecr)
	res.Compare(figR, subjNogoo9Recr, subjFloorRecrIntent)
	res.Compare(figW, subjFloorIntent, subjFloor)
	res.Compare(titleEvents(c.n), subjFloorIntent, subjFloor)
	res.Note(fig, "floor + intent: the floor that first merge-patches nogoo9's intent (the two annotations upgrade-all writes) on each old pod, then does the floor's work, in the same worker (figure 1b too); the aim's ratio stays against the plain floor")
	if before != nil {
		res.Compare(fig, subjBefore, subjFloor, subjDeployRaised)
		res.Compare(fig, subjNogoo9, subjBefore)
		res.Compare(figR, subjBeforeRecr, subjFloorRecr, subjDeployRecr)
		res.Compare(figR, subjNogoo9Recr, subjBeforeRecr)
		res.Compare(figW, subjBefore, subjFloor)
		res.Compare(titleEvents(c.n), subjBefore, subjFloor)
	}
	res.Compare(figW, subjNogoo9, subjFloor, subjDeployRaised)
	res.Compare(figW, subjDeployDefault, subjFloor)
	res.Compare(figW, subjDeployRaised, subjFloor)
	figE := titleEvents(c.n)
	res.Note(figE, "Event create and patch requests (core and events.k8s.io) counted by kube-apiserver's apiserver_request_total over the same window as figure 2, from every component (the scheduler's Scheduled Event included), divided by N")
	res.Note(figE, "aim: nogoo9's Events bounded: one at the start and one at the end of each workspace's upgrade, on top of the floor's")
	res.Compare(figE, subjNogoo9, subjFloor, subjDeployRaised)
	res.Compare(figE, subjDeployRaised, subjFloor)
	res.Note(fig, "aim: nogoo9 within 1.3x of the floor and at most 0.5x the raised-kcm Deployments")
	res.Note(figW, "aim: nogoo9 at most the floor plus one intent write per workspace")

	if c.figures[3] && nog != nil {
		if err := figureSpawn(ctx, c, res, cl, cs, nog); err != nil {
			res.Note(titleSpawn(), "stopped early: %v", err)
		}
	}
	return nil
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// saveAPIServerProfile saves a 4 s CPU profile of kube-apiserver to path.
func saveAPIServerProfile(ctx context.Context, cs kubernetes.Interface, path string) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "4").DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		logf("kube-apiserver profile: %v", err)
		return
	}
	logf("profile of kube-apiserver written to %s", path)
}

// kwokWorkers is the pod stage workers of the benchmark's clusters' kwok.
func kwokWorkers(c config) int {
	if c.kwokPodWorkers > 0 {
		return c.kwokPodWorkers
	}
	return localcluster.DefaultKwokPodWorkers
}
