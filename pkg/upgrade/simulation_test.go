package upgrade

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// simWorld is one workspace as the API server would hold it, with a fake kubelet and clock. It
// applies the planner's moves the way the controller does (deterministic names, AlreadyExists is
// done, deletes with a UID precondition, Recreate records signed with the process's key) and may
// crash in the middle of a move; a crash restarts the process, which then holds a new random key
// half of the time (no --integrity-key-file).
type simWorld struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	pods    map[string]*corev1.Pod
	claims  map[string]*corev1.PersistentVolumeClaim
	target  Target
	images  map[string]string // version -> "good" | "bad" | "invalid"
	uid     int
	cfg     Config
	trace   []string
	initial *corev1.Pod
	rv      int
	// last is a person's last write of each setting ("": removed), which the workspace's one pod
	// must carry once it has settled.
	last map[string]string

	// The controller's view lags: snapshots of the world after each change, and the one it sees
	// (a cache only moves forward). reserved is the create it made that its view does not show
	// yet (the controller's gate reservation).
	snapshots  [][]*corev1.Pod
	takenAt    []time.Time
	cursor     int
	reserved   string
	reservedAt time.Time
	// restarted: the process restarted since its last pass; its first view is a fresh list.
	restarted bool
	// unverified counts the moves that failed a Recreate upgrade whose record the process could
	// not verify (signed before a restart with another key) while the old pod held the claim.
	unverified int
}

func newSimWorld(t *testing.T, seed int64) *simWorld {
	rng := rand.New(rand.NewSource(seed))
	w := &simWorld{t: t, rng: rng, now: t0, pods: map[string]*corev1.Pod{}, claims: map[string]*corev1.PersistentVolumeClaim{},
		target: Target{Found: true, Name: "python", Version: "v1"}, images: map[string]string{"v1": "good"},
		cfg: Config{Timeout: 10 * time.Minute, Keys: RandomKeyring()}, last: map[string]string{}}
	first := with(wsPod(workspace.PodName(testOwner, testID), "uid-0", "v1", t0), ready)
	switch rng.Intn(4) {
	case 0: // no claim: side-by-side
	case 1:
		w.claims["data"] = pvc("data", corev1.ReadWriteMany)
		claim("data")(first)
	case 2:
		w.claims["data"] = pvc("data", corev1.ReadWriteOncePod)
		claim("data")(first)
	case 3:
		// Unlike ReadWriteOncePod, two pods on one node may both use it: the kubelet below does
		// not hold the second one, only nogoo9's gate does.
		w.claims["data"] = pvc("data", corev1.ReadWriteOnce)
		claim("data")(first)
	}
	w.touch(first)
	w.pods[first.Name] = first
	w.initial = first.DeepCopy()
	return w
}

// touch gives p a new resourceVersion, as the API server does on every write.
func (w *simWorld) touch(p *corev1.Pod) {
	w.rv++
	p.ResourceVersion = fmt.Sprint(w.rv)
}

// seq is the order in which the pod was created (its UID's number).
func seq(p *corev1.Pod) int {
	var n int
	fmt.Sscanf(string(p.UID), "uid-%d", &n)
	return n
}

// personWrites sets or removes a setting as a person does through the front end: on every live
// pod, or, with a front end whose cache does not show the newer pods yet, on the oldest one only.
func (w *simWorld) personWrites() {
	k := []string{workspace.AnnPinned, workspace.AnnMaintenance, workspace.AnnUpdateWindow}[w.rng.Intn(3)]
	v := ""
	if w.rng.Intn(2) == 0 {
		v = fmt.Sprintf("by hand at %s", w.now.Sub(t0))
	}
	w.last[k] = v
	live := w.live()
	sort.Slice(live, func(i, j int) bool { return seq(live[i]) < seq(live[j]) })
	if w.rng.Intn(2) == 0 {
		live = live[:1]
	}
	for _, p := range live {
		if v == "" {
			delete(p.Annotations, k)
		} else {
			p.Annotations[k] = v
		}
		w.touch(p)
		w.logf("person %s %s=%q", p.Name, k, v)
	}
}

func (w *simWorld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%s ", w.now.Sub(t0))+fmt.Sprintf(format, args...))
}

// snapshot records the world as a cache would hold it: stripped copies.
func (w *simWorld) snapshot() {
	var pods []*corev1.Pod
	for _, p := range w.pods {
		s, _ := workspace.StripPod(p.DeepCopy())
		pods = append(pods, s.(*corev1.Pod))
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name }) // map order must not matter, but keep runs reproducible
	w.snapshots = append(w.snapshots, pods)
	w.takenAt = append(w.takenAt, w.now)
}

// observed is what the controller sees: with lag, a snapshot between its last view and now.
func (w *simWorld) observed(lag bool) Observed {
	w.snapshot()
	last := len(w.snapshots) - 1
	// A cache lags by moments, not minutes (the reservation expires after two): views older than
	// 30 s of simulated time are not offered.
	for w.cursor < last && w.now.Sub(w.takenAt[w.cursor]) > 30*time.Second {
		w.cursor++
	}
	if w.restarted {
		lag, w.restarted = false, false
	}
	if lag && w.cursor < last {
		w.cursor += w.rng.Intn(last - w.cursor + 1)
	} else {
		w.cursor = last
	}
	pods := append([]*corev1.Pod{}, w.snapshots[w.cursor]...)
	w.rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	for _, p := range pods {
		if p.Name == w.reserved {
			w.reserved = ""
		}
	}
	return Observed{Pods: pods, Claims: w.claims}
}

func (w *simWorld) live() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range w.pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func (w *simWorld) create(p *corev1.Pod) {
	if _, ok := w.pods[p.Name]; ok {
		w.logf("create %s: AlreadyExists (done)", p.Name)
		return
	}
	w.uid++
	p.UID = types.UID(fmt.Sprintf("uid-%d", w.uid))
	p.CreationTimestamp = metav1.NewTime(w.now.Truncate(time.Second))
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	w.touch(p)
	w.pods[p.Name] = p
	w.logf("create %s (%s, %s)", p.Name, workspace.TemplateVersion(p), p.Spec.Containers[0].Image)
}

// apply applies a move's actions; with crash it stops after a random prefix.
func (w *simWorld) apply(m Move, crash bool) {
	n := len(m.Actions)
	if crash && n > 0 {
		n = w.rng.Intn(n)
		w.logf("crash after %d of %d actions", n, len(m.Actions))
		defer w.restart()
	}
	for _, a := range m.Actions[:n] {
		switch a.Kind {
		case CreateUpgradePod:
			if w.reserved != "" && w.reserved != a.Name && w.now.Sub(w.reservedAt) < 2*time.Minute {
				w.logf("create %s: waits, the view does not show %s yet", a.Name, w.reserved)
				return
			}
			src := w.pods[a.Pod.Name]
			if src == nil {
				w.logf("create from %s: source gone", a.Pod.Name)
				continue
			}
			p := wsPod(a.Name, "", w.target.Version, w.now)
			p.Labels[workspace.LabelWorkspaceID] = "wrong-by-template"
			p.Annotations[workspace.AnnOwner] = "the-admin-who-asked"
			p.Spec.Containers[0].Image = w.images[w.target.Version] + ":" + w.target.Version
			p.Spec.Volumes = src.Spec.Volumes
			// From the pod as the controller's view shows it (a person may have written on it
			// since): the cutover carries what changed.
			PreserveIdentity(p, a.Pod)
			for k, v := range a.Annotations {
				p.Annotations[k] = v
			}
			if a.Strategy == Recreate {
				spec, err := RollbackSpec(src)
				if err != nil {
					w.t.Fatal(err)
				}
				p.Annotations[workspace.AnnRollbackSpec] = spec
				p.Annotations[workspace.AnnUpgradeHMAC] = w.cfg.Keys.Sign(p.Namespace, p.Name, p.Annotations, spec)
			}
			if a.Gate != "" {
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: a.Gate}}
			}
			w.create(p)
			w.reserved, w.reservedAt = a.Name, w.now
		case CreateRollbackPod:
			src := w.pods[a.Pod.Name]
			if src == nil {
				w.logf("rollback from %s: source gone", a.Pod.Name)
				continue
			}
			p, err := RollbackPod(src, a.Name, a.Annotations)
			if err != nil {
				w.t.Fatalf("rollback pod: %v", err)
			}
			w.create(p)
		case DeletePod:
			if k := a.Keep; k != nil {
				if real := w.pods[k.Name]; real == nil || !sameKeep(real, k) || real.DeletionTimestamp != nil {
					w.logf("delete %s: %s is not live: move stopped", a.Pod.Name, k.Name)
					return
				}
			}
			p := w.pods[a.Pod.Name]
			if p == nil || p.UID != a.Pod.UID {
				w.logf("delete %s: NotFound/Conflict (done)", a.Pod.Name)
				continue
			}
			if a.MatchVersion && p.ResourceVersion != a.Pod.ResourceVersion {
				w.logf("delete %s: changed since the plan (resourceVersion): move stopped", a.Pod.Name)
				return
			}
			if p.DeletionTimestamp == nil {
				ts := metav1.NewTime(w.now)
				p.DeletionTimestamp = &ts
				w.touch(p)
				w.logf("delete %s", p.Name)
			}
		case PatchPod:
			p := w.pods[a.Pod.Name]
			if p == nil || p.UID != a.Pod.UID {
				w.logf("patch %s: NotFound/Conflict: move stopped", a.Pod.Name)
				return
			}
			for _, k := range a.Remove {
				delete(p.Annotations, k)
			}
			for k, v := range a.Annotations {
				p.Annotations[k] = v
			}
			w.touch(p)
			w.logf("patch %s +%v -%v", p.Name, keys(a.Annotations), a.Remove)
		case RemoveGate:
			p := w.pods[a.Pod.Name]
			if p == nil || p.UID != a.Pod.UID || len(p.Spec.SchedulingGates) == 0 {
				w.logf("ungate %s: NotFound/test failed: move ended", a.Pod.Name)
				return
			}
			p.Spec.SchedulingGates = nil
			for k, v := range a.Annotations {
				p.Annotations[k] = v
			}
			w.touch(p)
			w.logf("ungate %s +%v", p.Name, keys(a.Annotations))
		case Event:
		default:
			w.t.Fatalf("unknown action %s", a.Kind)
		}
	}
}

// restart is the process coming back after a crash: its memory (the reservation) is gone, it
// lists everything, and without --integrity-key-file it signs and verifies with a new random key.
func (w *simWorld) restart() {
	w.reserved, w.restarted = "", true
	if w.rng.Intn(2) == 0 {
		w.cfg.Keys = RandomKeyring()
		w.logf("restart with a new random key")
	} else {
		w.logf("restart with the same key")
	}
}

// sameKeep is the controller's check that real is the pod Keep names: same UID, or, for the pod
// the same move created (no UID yet), the upgrade of the same pod.
func sameKeep(real, keep *corev1.Pod) bool {
	if keep.UID == "" {
		return real.Annotations[workspace.AnnUpgradeFromUID] == keep.Annotations[workspace.AnnUpgradeFromUID]
	}
	return real.UID == keep.UID
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// kubelet moves one random pod one step: finalises a deletion, starts a pod (if its volume is
// free: a ReadWriteOncePod claim holds a second pod until the first is gone), or fails it.
func (w *simWorld) kubelet() {
	names := keys(podNames(w.pods))
	if len(names) == 0 {
		return
	}
	p := w.pods[names[w.rng.Intn(len(names))]]
	w.kubeletStep(p)
}

func podNames(m map[string]*corev1.Pod) map[string]string {
	out := map[string]string{}
	for k := range m {
		out[k] = k
	}
	return out
}

func (w *simWorld) kubeletStep(p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		delete(w.pods, p.Name)
		w.logf("kubelet: %s gone", p.Name)
		return
	}
	if workspace.IsReady(p) || len(p.Status.ContainerStatuses) > 0 || len(p.Spec.SchedulingGates) > 0 {
		return // the scheduler leaves a gated pod alone
	}
	for _, v := range p.Spec.Volumes {
		if c := w.claims[v.PersistentVolumeClaim.ClaimName]; c != nil && c.Spec.AccessModes[0] == corev1.ReadWriteOncePod {
			for _, o := range w.pods {
				if o != p && usesClaim(o, c.Name) {
					return // the scheduler holds it
				}
			}
		}
	}
	w.touch(p)
	switch kind := strings.SplitN(p.Spec.Containers[0].Image, ":", 2)[0]; kind {
	case "bad":
		waiting("ErrImagePull", "pull access denied")(p)
	case "invalid":
		waiting("InvalidImageName", "bad reference")(p)
	default:
		ready(p)
	}
	w.logf("kubelet: %s %s", p.Name, p.Status.Phase)
}

func usesClaim(p *corev1.Pod, name string) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name {
			return true
		}
	}
	return false
}

// check asserts the invariants on the world as it is now.
func (w *simWorld) check(step int) {
	fail := func(format string, args ...any) {
		w.t.Fatalf("step %d: %s\ntrace:\n%s", step, fmt.Sprintf(format, args...), strings.Join(w.trace, "\n"))
	}
	live := w.live()
	if len(live) == 0 {
		fail("no live pod: the workspace vanished")
	}
	if len(live) > 2 {
		fail("%d live pods: more than one new pod", len(live))
	}
	readyOnRWOP := 0
	for _, p := range w.pods {
		for _, k := range identityLabels {
			if p.Labels[k] != w.initial.Labels[k] {
				fail("pod %s label %s = %q, want %q", p.Name, k, p.Labels[k], w.initial.Labels[k])
			}
		}
		for _, k := range identityAnnotations {
			if slices.Contains(workspace.PersonSettingKeys, k) {
				continue // a person's to change (personWrites); checked once settled
			}
			if p.Annotations[k] != w.initial.Annotations[k] {
				fail("pod %s annotation %s = %q, want %q", p.Name, k, p.Annotations[k], w.initial.Annotations[k])
			}
		}
		for c := range w.claims {
			if !usesClaim(p, c) {
				fail("pod %s lost claim %s", p.Name, c)
			}
			if w.claims[c].Spec.AccessModes[0] == corev1.ReadWriteOncePod && workspace.IsReady(p) {
				readyOnRWOP++
			}
		}
	}
	if readyOnRWOP > 1 {
		fail("two Ready pods on a ReadWriteOncePod claim")
	}
	// Never two pods that may both be started on one single-writer claim, a terminating one
	// included (its process runs until its grace period ends): a restored pod waits behind the
	// gate too.
	for c, pvc := range w.claims {
		if m := pvc.Spec.AccessModes[0]; m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			continue
		}
		var free []string
		for _, p := range w.pods {
			if len(p.Spec.SchedulingGates) == 0 && usesClaim(p, c) {
				free = append(free, p.Name)
			}
		}
		if len(free) > 1 {
			sort.Strings(free)
			fail("live pods %v may all be started on single-writer claim %s: none is held by a scheduling gate", free, c)
		}
	}
}

// settled reports whether the kubelet has nothing left to do.
func (w *simWorld) settled() bool {
	for _, p := range w.pods {
		if p.DeletionTimestamp != nil || (!workspace.IsReady(p) && len(p.Status.ContainerStatuses) == 0) {
			return false
		}
	}
	return true
}

func (w *simWorld) reconcile(crash, lag bool) Move {
	obs := w.observed(lag)
	m := Plan(obs, w.target, w.now, w.cfg)
	if len(m.Actions) > 0 {
		var seen []string
		for _, p := range obs.Pods {
			seen = append(seen, fmt.Sprintf("%s(ready=%v,deleting=%v)", p.Name, workspace.IsReady(p), p.DeletionTimestamp != nil))
		}
		sort.Strings(seen)
		w.logf("plan %s from view %d/%d %v", m.State, w.cursor, len(w.snapshots)-1, seen)
	}
	for _, a := range m.Actions {
		if strings.Contains(a.Annotations[workspace.AnnLastUpgradeError], "UpgradeRecordNotVerified") {
			w.unverified++
		}
	}
	w.apply(m, crash)
	return m
}

func TestSimulation(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 100
	}
	ungated := 0    // Recreate upgrades let through nogoo9's scheduling gate, over all seeds
	unverified := 0 // Recreate upgrades failed on a record signed before a restart
	defer func() {
		if ungated == 0 && !t.Failed() {
			t.Errorf("no seed removed a scheduling gate: the gated Recreate path was never exercised")
		}
		if unverified == 0 && !t.Failed() {
			t.Errorf("no seed failed an upgrade whose record a restart left unverifiable: the restart path was never exercised")
		}
	}()
	for seed := int64(1); seed <= int64(seeds); seed++ {
		w := newSimWorld(t, seed)
		defer func() {
			for _, l := range w.trace {
				if strings.Contains(l, " ungate ") {
					ungated++
				}
			}
			unverified += w.unverified
		}()
		version := 1
		for step := 0; step < 150; step++ {
			switch r := w.rng.Intn(100); {
			case r < 35:
				w.reconcile(w.rng.Intn(8) == 0, w.rng.Intn(3) == 0)
			case r < 65:
				w.kubelet()
			case r < 72:
				version++
				v := fmt.Sprintf("v%d", version)
				w.images[v] = []string{"good", "good", "good", "bad", "invalid"}[w.rng.Intn(5)]
				w.target.Version = v
				w.logf("template -> %s (%s)", v, w.images[v])
			case r < 84:
				live := w.live()
				p := live[w.rng.Intn(len(live))]
				val := []string{"true", "true", "2026-11-29T09:00:00Z", "please", "false", "TRUE"}[w.rng.Intn(6)]
				p.Annotations[workspace.AnnUpgradeRequested] = val
				if w.rng.Intn(3) == 0 {
					p.Annotations[workspace.AnnUpgradePod] = workspace.UpgradePodName(testOwner, testID, fmt.Sprint("api", step))
				}
				w.touch(p)
				w.logf("intent %s=%q", p.Name, val)
			case r < 89:
				w.personWrites()
			case r < 94:
				w.now = w.now.Add(time.Duration(w.rng.Intn(int(12*time.Minute/time.Second))) * time.Second)
			default:
				w.target.Found = !w.target.Found
				w.logf("template found=%v", w.target.Found)
			}
			w.check(step)
		}
		// Settle: no more intents or template changes; everything must converge to one Ready pod
		// with no upgrade in flight and no intent left.
		w.target.Found = true
		for i := 0; i < 200; i++ {
			m := w.reconcile(false, false)
			for _, p := range w.pods {
				w.kubeletStep(p)
			}
			w.now = w.now.Add(3 * time.Minute)
			w.check(1000 + i)
			if len(m.Actions) == 0 && m.RequeueAfter == 0 && len(w.pods) == 1 && w.settled() {
				break
			}
		}
		live := w.live()
		p := live[0]
		if len(w.pods) != 1 || !workspace.IsReady(p) || InFlight(p, live) {
			t.Fatalf("seed %d did not converge: %d pods, ready=%v\ntrace:\n%s", seed, len(w.pods), workspace.IsReady(p), strings.Join(w.trace, "\n"))
		}
		if _, ok := p.Annotations[workspace.AnnUpgradeRequested]; ok && ParseIntent(p.Annotations[workspace.AnnUpgradeRequested]).Valid &&
			workspace.TemplateVersion(p) != w.target.Version {
			// A valid intent left on the only pod means an upgrade would still start: not converged.
			t.Fatalf("seed %d: intent left on %s\ntrace:\n%s", seed, p.Name, strings.Join(w.trace, "\n"))
		}
		for k, want := range w.last {
			if got := p.Annotations[k]; got != want {
				t.Fatalf("seed %d: settled with pod %s %s=%q, want the person's last write %q\ntrace:\n%s", seed, p.Name, k, got, want, strings.Join(w.trace, "\n"))
			}
		}
	}
}
