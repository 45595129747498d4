package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// base is the name nogoo9 gives to the first pod of jane's workspace demo; named(suffix) is the
// name of a pod it made from it (an upgrade, a stopped copy, a start: "-up-" and five characters).
// The planner acts only on pods named so (workspace.NameMatchesIdentity).
var base = workspace.PodName("jane", "demo")

func named(suffix string) string { return base + "-up-" + suffix }

func wsPod(name, uid, version string, created time.Time, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID(uid), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo",
				workspace.LabelUserSub: "jane", workspace.LabelTemplate: "python",
				workspace.LabelTemplateVersion: version,
			},
			Annotations: map[string]string{
				workspace.AnnOwner: "jane", workspace.AnnTemplateVersion: version,
				workspace.AnnWorkspacePath: "/ws/jane/demo/",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:" + version}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ann(k, v string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Annotations[k] = v } }

func ready(at time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "127.1.0.1"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	}
}

// restarted is the status a kubelet writes after the container restarted at (its process
// exited: a crash, or on purpose).
func restarted(at time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Ready: true, RestartCount: 1,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
	}
}

// gated makes p a stopped pod as nogoo9 makes one: held by the stop gate, with the UID of the
// pod it was copied from (one long gone, unless an option after it says which).
func gated(p *corev1.Pod) {
	gateOnly(p)
	p.Annotations[workspace.AnnStoppedFromUID] = "uid-long-gone"
}

// gateOnly gives p the stop gate and nothing else: a pod born with it from a template's spec,
// not a stopped pod nogoo9 made.
func gateOnly(p *corev1.Pod) {
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: workspace.GateStopped}}
}

func terminating(p *corev1.Pod) {
	ts := metav1.NewTime(t0)
	p.DeletionTimestamp = &ts
}

func stopIntent(p *corev1.Pod) { p.Annotations[workspace.AnnStopRequested] = "stopped by its owner" }

func maint(p *corev1.Pod) { p.Annotations[workspace.AnnMaintenance] = "disk move" }

// stoppedFrom marks p as the stopped copy of running.
func stoppedFrom(running *corev1.Pod) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		gated(p)
		stopIntent(p)
		p.Annotations[workspace.AnnStoppedFromUID] = string(running.UID)
	}
}

// upgradedFrom marks p as an upgrade of old that is in flight.
func upgradedFrom(old *corev1.Pod) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations[workspace.AnnUpgradeFrom] = old.Name
		p.Annotations[workspace.AnnUpgradeFromUID] = string(old.UID)
		p.Annotations[workspace.AnnUpgradeFromVersion] = workspace.TemplateVersion(old)
	}
}

var v2 = Target{Found: true, Version: "v2"}

func TestPlan(t *testing.T) {
	created := t0.Add(-time.Hour)
	run := wsPod(base, "uid-run", "v1", created, ready(created))
	runStop := wsPod(base, "uid-run", "v1", created, ready(created), stopIntent)
	stopped := wsPod(named("stop1"), "uid-stop", "v1", t0.Add(-time.Minute), stoppedFrom(run))
	stoppedNoIntent := wsPod(named("stop1"), "uid-stop", "v1", t0.Add(-time.Minute), gated)
	upNew := wsPod(named("new02"), "uid-up", "v2", t0.Add(-time.Minute), upgradedFrom(run))

	type want struct {
		kind   ActionKind // "" for no action
		pod    string     // target pod of the first action
		hold   bool
		inName string // substring of Action.Name
	}
	cases := []struct {
		name   string
		pods   []*corev1.Pod
		target Target
		cfg    Config
		want   want
	}{
		{"a running workspace without intent or idle timeout is left to the upgrade planner",
			[]*corev1.Pod{run}, v2, Config{}, want{}},
		{"a stop intent on the running pod creates its stopped copy first (the record exists before the node is released)",
			[]*corev1.Pod{runStop}, v2, Config{}, want{kind: CreateStoppedPod, pod: run.Name, hold: true, inName: "-up-"}},
		{"after a crash between create and delete, the stopped copy is found and the running pod is deleted",
			[]*corev1.Pod{runStop, stopped}, v2, Config{}, want{kind: DeletePod, pod: run.Name, hold: true}},
		{"a stopped workspace whose running pod is terminating holds and writes nothing",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), stopIntent, terminating), stopped}, v2, Config{}, want{hold: true}},
		{"a stopped workspace holds: no upgrade starts on it",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, stoppedFrom(run), ann(workspace.AnnUpgradeRequested, "true"))}, v2, Config{}, want{hold: true}},
		{"removing the intent starts the workspace on its own version by removing the gate",
			[]*corev1.Pod{stoppedNoIntent}, v2, Config{}, want{kind: Ungate, pod: stoppedNoIntent.Name, hold: true}},
		{"start with update policy on-start on the template creates a pod on the latest version",
			[]*corev1.Pod{stoppedNoIntent}, Target{Found: true, Version: "v2", Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}, Config{},
			want{kind: CreateStartedPod, pod: stoppedNoIntent.Name, hold: true, inName: "-up-"}},
		{"the pod's update policy overrides the template's on-start",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, gated, ann(workspace.AnnUpdatePolicy, "manual"))}, Target{Found: true, Version: "v2", Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}, Config{},
			want{kind: Ungate, pod: stopped.Name, hold: true}},
		{"a pinned workspace starts on its own version even with the template's on-start",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, gated, ann(workspace.AnnPinned, "true"))}, Target{Found: true, Version: "v2", Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}, Config{},
			want{kind: Ungate, pod: stopped.Name, hold: true}},
		{"an unreadable update policy starts the workspace on its own version",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, gated, ann(workspace.AnnUpdatePolicy, "sometimes"))}, Target{Found: true, Version: "v2", Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}, Config{},
			want{kind: Ungate, pod: stopped.Name, hold: true}},
		{"start with on-start but the template gone stays on its version",
			[]*corev1.Pod{stoppedNoIntent}, Target{Annotations: map[string]string{workspace.AnnUpdatePolicy: "on-start"}}, Config{}, want{kind: Ungate, pod: stoppedNoIntent.Name, hold: true}},
		{"stop x upgrade requested before the stop: the stop goes first, the start honours the request on the latest version",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, gated, ann(workspace.AnnUpgradeRequested, "true"))}, v2, Config{},
			want{kind: CreateStartedPod, pod: stopped.Name, hold: true}},
		{"stop x upgrade requested, not started: the running pod is stopped, the upgrade planner does not run",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), stopIntent, ann(workspace.AnnUpgradeRequested, "true"))}, v2, Config{},
			want{kind: CreateStoppedPod, pod: run.Name, hold: true}},
		{"stop x upgrade in flight: the intent is copied onto the upgraded pod so it survives the cutover",
			[]*corev1.Pod{runStop, upNew}, v2, Config{}, want{kind: PatchPod, pod: upNew.Name, hold: true}},
		{"stop x upgrade in flight, both pods carry the intent: the upgrade ends first",
			[]*corev1.Pod{runStop, wsPod(upNew.Name, "uid-up", "v2", t0.Add(-time.Minute), upgradedFrom(run), stopIntent)}, v2, Config{}, want{}},
		{"start x upgrade in flight cannot happen: a started pod with its stopped pod still there deletes the stopped pod",
			[]*corev1.Pod{wsPod(named("start"), "uid-new", "v2", t0, ann(workspace.AnnStartedFromUID, "uid-stop")), stoppedNoIntent}, v2, Config{},
			want{kind: DeletePod, pod: stoppedNoIntent.Name, hold: true}},
		{"stop x maintenance: the stop goes on (it frees the node and keeps the maintenance)",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), stopIntent, maint)}, v2, Config{}, want{kind: CreateStoppedPod, pod: run.Name, hold: true}},
		{"start x maintenance: the start waits for the maintenance to end and says so",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, gated, maint)}, v2, Config{}, want{kind: EventOnly, pod: stopped.Name, hold: true}},
		{"stop x delete: every pod terminating, nothing is created",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), stopIntent, terminating)}, v2, Config{}, want{}},
		{"start x delete: the stopped pod terminating is not started",
			[]*corev1.Pod{wsPod(stopped.Name, "uid-stop", "v1", created, gated, terminating)}, v2, Config{}, want{hold: true}},
		{"a stop undone before the running pod went deletes the stopped copy and keeps the running pod",
			[]*corev1.Pod{run, stoppedNoIntent}, v2, Config{}, want{kind: DeletePod, pod: stoppedNoIntent.Name, hold: true}},
		{"a pod born with the stop gate from its template's spec (an upgrade's new pod, no stop lineage) is not a stopped pod: it is neither deleted nor carried from, the upgrade planner runs",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), maint), wsPod(named("gate2"), "uid-up", "v2", t0.Add(-time.Minute), gateOnly, upgradedFrom(run))}, v2, Config{}, want{}},
		{"two stopped pods: the older goes",
			[]*corev1.Pod{stopped, wsPod(named("old01"), "uid-old", "v1", created, stoppedFrom(run))}, v2, Config{}, want{kind: DeletePod, pod: named("old01"), hold: true}},
		{"idle past the default timeout: the stop intent is written with the reason",
			[]*corev1.Pod{run}, v2, Config{IdleTimeout: 30 * time.Minute}, want{kind: PatchPod, pod: run.Name, hold: true}},
		{"idle culling x maintenance: never culled",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), maint)}, v2, Config{IdleTimeout: 30 * time.Minute}, want{}},
		{"idle culling x upgrade in flight: not culled until the upgrade ends",
			[]*corev1.Pod{run, upNew}, v2, Config{IdleTimeout: 30 * time.Minute}, want{}},
		{"the template's idle timeout overrides the default",
			[]*corev1.Pod{run}, Target{Found: true, Version: "v1", Annotations: map[string]string{workspace.AnnIdleTimeout: "2h"}}, Config{IdleTimeout: 30 * time.Minute}, want{}},
		{"the template's idle timeout 0 turns culling off",
			[]*corev1.Pod{run}, Target{Found: true, Version: "v1", Annotations: map[string]string{workspace.AnnIdleTimeout: "0"}}, Config{IdleTimeout: 30 * time.Minute}, want{}},
		{"recent activity keeps a workspace running",
			[]*corev1.Pod{wsPod(run.Name, "uid-run", "v1", created, ready(created), ann(workspace.AnnLastActivity, t0.Add(-time.Minute).Format(time.RFC3339)))}, v2, Config{IdleTimeout: 30 * time.Minute}, want{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Plan(tc.pods, tc.target, t0, tc.cfg)
			if m.Hold != tc.want.hold {
				t.Errorf("Hold = %v, want %v (state %s)", m.Hold, tc.want.hold, m.State)
			}
			if tc.want.kind == "" {
				if len(m.Actions) != 0 {
					t.Fatalf("actions = %+v, want none", m.Actions)
				}
				return
			}
			if len(m.Actions) == 0 {
				t.Fatalf("no actions, want %s on %s (state %s)", tc.want.kind, tc.want.pod, m.State)
			}
			a := m.Actions[0]
			if a.Kind != tc.want.kind || a.Pod.Name != tc.want.pod {
				t.Fatalf("first action = %s on %s, want %s on %s", a.Kind, a.Pod.Name, tc.want.kind, tc.want.pod)
			}
			if !strings.Contains(a.Name, tc.want.inName) {
				t.Errorf("name = %q, want it to contain %q", a.Name, tc.want.inName)
			}
			if a.Kind == DeletePod && (a.Keep == nil || a.Keep.UID == a.Pod.UID) {
				t.Errorf("delete of %s without another pod to keep: %+v", a.Pod.Name, a.Keep)
			}
		})
	}
}

// TestPlanActsOnlyOnPodsNogoo9MadeForOneOwner: labels and annotations are input (a kubectl user
// with patch pods can relabel any pod into a workspace); the name nogoo9 gave a pod cannot change.
// A workspace with a live pod nogoo9 did not name for the owner and id it carries, or with pods of
// two owners, gets at most a Warning: nothing is created, deleted or patched on its strength.
func TestPlanActsOnlyOnPodsNogoo9MadeForOneOwner(t *testing.T) {
	created := t0.Add(-time.Hour)
	run := wsPod(base, "uid-run", "v1", created, ready(created))
	stopped := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(named("stop1"), "uid-stop", "v1", created.Add(time.Minute), append([]func(*corev1.Pod){stoppedFrom(run)}, opts...)...)
	}
	noIntent := func(p *corev1.Pod) { delete(p.Annotations, workspace.AnnStopRequested) }
	ownedBy := func(owner string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations[workspace.AnnOwner], p.Labels[workspace.LabelUserSub] = owner, owner
		}
	}
	// Mallory's own running pod (nogoo9 made it for her workspace "mine"), relabelled into demo.
	mallorys := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(workspace.PodName("mallory", "mine"), "uid-x", "v1", t0.Add(-10*time.Minute), append([]func(*corev1.Pod){ready(t0), ownedBy("mallory")}, opts...)...)
	}
	// The stopped copy nogoo9 made of it (its name is one nogoo9 gives to mallory's demo).
	mallorysCopy := wsPod(workspace.UpgradePodName("mallory", "demo", "stop@uid-x"), "uid-c", "v1", t0.Add(-5*time.Minute),
		ownedBy("mallory"), gated, stopIntent, ann(workspace.AnnStoppedFromUID, "uid-x"))
	cases := []struct {
		name string
		pods []*corev1.Pod
		cfg  Config
		// warnOn is the pod the Warning is recorded on; "" for no action at all.
		warnOn string
	}{
		{"jane's stopped workspace and mallory's running pod relabelled into it: no stop intent is written on mallory's pod (nor a copy made next)",
			[]*corev1.Pod{stopped(), mallorys()}, Config{}, workspace.PodName("mallory", "mine")},
		{"jane's stopped pod and the stopped copy of mallory's relabelled pod: jane's is not deleted as the older of two stopped pods",
			[]*corev1.Pod{stopped(), mallorysCopy}, Config{}, mallorysCopy.Name},
		{"a start: jane's stopped pod without its intent beside mallory's relabelled running pod is not deleted",
			[]*corev1.Pod{stopped(noIntent), mallorys()}, Config{}, workspace.PodName("mallory", "mine")},
		{"the same with mallory's pod re-annotated with jane as its owner: its name still says it is not jane's",
			[]*corev1.Pod{stopped(noIntent), mallorys(ownedBy("jane"))}, Config{}, workspace.PodName("mallory", "mine")},
		{"a stop undone: jane's running pod beside a gated pod of mallory's claiming to be its copy keeps running, neither is deleted",
			[]*corev1.Pod{run, wsPod(workspace.UpgradePodName("mallory", "demo", "x"), "uid-m", "v1", t0, ownedBy("mallory"), gated, ann(workspace.AnnStoppedFromUID, "uid-run"))}, Config{}, workspace.UpgradePodName("mallory", "demo", "x")},
		{"a lone pod relabelled into a workspace with a stop intent is neither copied nor deleted",
			[]*corev1.Pod{mallorys(ownedBy("jane"), stopIntent)}, Config{}, workspace.PodName("mallory", "mine")},
		{"a lone stopped pod nogoo9 did not name is not released from its gate",
			[]*corev1.Pod{wsPod("db-0", "uid-db", "v1", created, gated)}, Config{}, "db-0"},
		{"a relabelled pod beside jane's idle running pod: nothing is culled (the upgrade planner reports the pod)",
			[]*corev1.Pod{run, mallorys()}, Config{IdleTimeout: time.Minute}, ""},
		{"a pod of the original product (a name nogoo9 did not give) with nothing to do is left to the upgrade planner, which adopts and upgrades it",
			[]*corev1.Pod{wsPod("legacy-pod-1", "uid-legacy", "v1", created, ready(created))}, Config{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Plan(tc.pods, v2, t0, tc.cfg)
			if tc.warnOn == "" {
				if len(m.Actions) != 0 || m.Hold {
					t.Fatalf("got %s hold=%v %q, want no action and no hold", m.State, m.Hold, actionLines(m))
				}
				return
			}
			if len(m.Actions) != 1 || !m.Hold {
				t.Fatalf("got %s hold=%v %q, want one Warning and a hold", m.State, m.Hold, actionLines(m))
			}
			a := m.Actions[0]
			if a.Kind != EventOnly || a.EventType != corev1.EventTypeWarning || a.Reason != ReasonUntrustedAnnotations || a.Pod.Name != tc.warnOn {
				t.Fatalf("got %s %s %s on %s, want a Warning %s on %s", a.Kind, a.EventType, a.Reason, a.Pod.Name, ReasonUntrustedAnnotations, tc.warnOn)
			}
			if !strings.Contains(a.Message, a.Pod.Name) || !strings.Contains(a.Message, workspace.LabelWorkspaceID) {
				t.Errorf("message %q does not name the pod and the label to remove", a.Message)
			}
		})
	}
}

// TestRetireKeepsToOneOwner: what one owner wrote never goes onto another owner's pod, and no pod
// is deleted in favour of another owner's.
func TestRetireKeepsToOneOwner(t *testing.T) {
	jane := wsPod(named("stop1"), "uid-stop", "v1", t0, gated, maint)
	mallory := wsPod(workspace.UpgradePodName("mallory", "demo", "x"), "uid-m", "v1", t0, gated)
	mallory.Annotations[workspace.AnnOwner], mallory.Labels[workspace.LabelUserSub] = "mallory", "mallory"
	if got := retire(jane, mallory, workspace.PersonSettingKeys, Action{}); len(got) != 0 {
		t.Fatalf("retire of jane's pod for mallory's = %q, want nothing", actionLines(Move{Actions: got}))
	}
}

func TestPlanNamesAreDeterministic(t *testing.T) {
	run := wsPod(base, "uid-run", "v1", t0, ready(t0), stopIntent)
	a := Plan([]*corev1.Pod{run}, v2, t0, Config{}).Actions[0]
	b := Plan([]*corev1.Pod{run}, v2, t0.Add(time.Hour), Config{}).Actions[0]
	if a.Name != b.Name || a.Name != StoppedPodName(run) {
		t.Fatalf("stopped pod names %q and %q differ: a repeated create after a crash would make a second pod", a.Name, b.Name)
	}
	if a.Set[workspace.AnnStoppedFromUID] != "uid-run" || a.Set[workspace.AnnStopRequested] == "" {
		t.Fatalf("stopped pod annotations = %v, want the running pod's UID and the intent", a.Set)
	}

	// A start planned again from a cache that does not show the first start's pod, after the
	// template moved on: the same name, so the create fails with AlreadyExists instead of making
	// a second running pod on the stopped pod's claims.
	stopped := wsPod(named("stop1"), "uid-stop", "v1", t0, gated, ann(workspace.AnnUpgradeRequested, "true"))
	first := Plan([]*corev1.Pod{stopped}, v2, t0, Config{}).Actions[0]
	again := Plan([]*corev1.Pod{stopped}, Target{Found: true, Version: "v3"}, t0.Add(time.Minute), Config{}).Actions[0]
	if first.Kind != CreateStartedPod || again.Kind != CreateStartedPod {
		t.Fatalf("got %s and %s, want two CreateStartedPod", first.Kind, again.Kind)
	}
	if first.Name != again.Name || first.Name != StartedPodName(stopped) {
		t.Fatalf("started pod names %q (v2) and %q (v3) differ: a start repeated from a lagging cache after a template change makes a second running pod", first.Name, again.Name)
	}
}

func TestCullDecision(t *testing.T) {
	created := t0.Add(-3 * time.Hour)
	cases := []struct {
		name        string
		pod         *corev1.Pod
		timeout     time.Duration
		wantCull    bool
		wantRequeue time.Duration
	}{
		{"never used since it became ready 2h ago, timeout 1h: culled", wsPod(base, "u", "v1", created, ready(t0.Add(-2*time.Hour))), time.Hour, true, 0},
		{"started 10m ago (released from the stop gate) with an old last activity: not idle yet", wsPod(base, "u", "v1", created, ready(t0.Add(-8*time.Minute)), ann(workspace.AnnStartedAt, t0.Add(-10*time.Minute).Format(time.RFC3339)), ann(workspace.AnnLastActivity, created.Format(time.RFC3339))), time.Hour, false, 50 * time.Minute},
		{"started a minute ago after 5h stopped, not scheduled yet (no status): not idle yet", wsPod(base, "u", "v1", t0.Add(-5*time.Hour), ann(workspace.AnnStartedAt, t0.Add(-time.Minute).Format(time.RFC3339)), ann(workspace.AnnLastActivity, t0.Add(-6*time.Hour).Format(time.RFC3339))), 30 * time.Minute, false, 29 * time.Minute},
		{"created a minute ago (a spawn, an upgrade, a start on the latest version), not ready yet: not idle yet", wsPod(base, "u", "v1", t0.Add(-time.Minute), ann(workspace.AnnLastActivity, t0.Add(-5*time.Hour).Format(time.RFC3339))), 30 * time.Minute, false, 29 * time.Minute},
		{"unused for 5h, its readiness probe failed once a minute ago (Ready flipped False then True): culled, its own process cannot fake activity", wsPod(base, "u", "v1", t0.Add(-10*time.Hour), ready(t0.Add(-time.Minute)), ann(workspace.AnnLastActivity, t0.Add(-5*time.Hour).Format(time.RFC3339))), 30 * time.Minute, true, 0},
		{"unused for 5h, its container restarted a minute ago: culled", wsPod(base, "u", "v1", t0.Add(-10*time.Hour), ready(t0.Add(-time.Minute)), restarted(t0.Add(-time.Minute)), ann(workspace.AnnLastActivity, t0.Add(-5*time.Hour).Format(time.RFC3339))), 30 * time.Minute, true, 0},
		{"activity 59m ago, timeout 1h: pass again in 1m", wsPod(base, "u", "v1", created, ready(created), ann(workspace.AnnLastActivity, t0.Add(-59*time.Minute).Format(time.RFC3339))), time.Hour, false, time.Minute},
		{"activity exactly the timeout ago: culled", wsPod(base, "u", "v1", created, ready(created), ann(workspace.AnnLastActivity, t0.Add(-time.Hour).Format(time.RFC3339))), time.Hour, true, 0},
		{"a malformed last-activity is ignored (the start counts)", wsPod(base, "u", "v1", created, ready(t0.Add(-30*time.Minute)), ann(workspace.AnnStartedAt, t0.Add(-30*time.Minute).Format(time.RFC3339)), ann(workspace.AnnLastActivity, "yesterday")), time.Hour, false, 30 * time.Minute},
		{"a pod that never became ready is idle from its creation", wsPod(base, "u", "v1", created), time.Hour, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Plan([]*corev1.Pod{tc.pod}, Target{Found: true, Version: "v1"}, t0, Config{IdleTimeout: tc.timeout})
			culled := len(m.Actions) == 1 && m.Actions[0].Culled
			if culled != tc.wantCull {
				t.Fatalf("culled = %v, want %v (%+v)", culled, tc.wantCull, m)
			}
			if culled && !strings.Contains(m.Actions[0].Set[workspace.AnnStopRequested], "without activity") {
				t.Errorf("cull reason = %q, want it to say why", m.Actions[0].Set[workspace.AnnStopRequested])
			}
			if m.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %s, want %s", m.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

func TestActivityDecisions(t *testing.T) {
	const minute = time.Minute
	t.Run("ShouldRecord", func(t *testing.T) {
		cases := []struct {
			name                  string
			seen, recorded, wrote time.Time
			want                  bool
		}{
			{"nothing recorded yet: write", t0, time.Time{}, time.Time{}, true},
			{"another replica wrote 30s ago: skip (replicas share the once-a-minute budget)", t0, t0.Add(-30 * time.Second), time.Time{}, false},
			{"this replica wrote 30s ago, the cache has not seen it yet: skip", t0, t0.Add(-5 * minute), t0.Add(-30 * time.Second), false},
			{"recorded a minute ago: write", t0, t0.Add(-minute), time.Time{}, true},
			{"a recorded value in the future (clock skew) is never overwritten with an older one", t0, t0.Add(5 * minute), time.Time{}, false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if got := ShouldRecord(tc.seen, tc.recorded, tc.wrote, minute); got != tc.want {
					t.Fatalf("ShouldRecord = %v, want %v", got, tc.want)
				}
			})
		}
	})
	t.Run("WebSocketCounts", func(t *testing.T) {
		cases := []struct {
			name   string
			opened time.Time
			maxAge time.Duration
			want   bool
		}{
			{"no maximum: an open WebSocket counts however old", t0.Add(-48 * time.Hour), 0, true},
			{"younger than the maximum: counts", t0.Add(-10 * minute), time.Hour, true},
			{"older than the maximum (a forgotten terminal tab): does not count", t0.Add(-2 * time.Hour), time.Hour, false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if got := WebSocketCounts(tc.opened, t0, tc.maxAge); got != tc.want {
					t.Fatalf("WebSocketCounts = %v, want %v", got, tc.want)
				}
			})
		}
	})
	t.Run("IdleTimeout parsing says which annotation is wrong", func(t *testing.T) {
		if _, err := IdleTimeout(map[string]string{workspace.AnnIdleTimeout: "soon"}, time.Hour); err == nil || !strings.Contains(err.Error(), workspace.AnnIdleTimeout) {
			t.Fatalf("err = %v, want one naming %s", err, workspace.AnnIdleTimeout)
		}
		if _, err := WebSocketMaxAge(map[string]string{workspace.AnnWebSocketMaxAge: "-1h"}); err == nil {
			t.Fatal("a negative maximum age was accepted")
		}
	})
}

func TestStoppedPodKeepsIdentity(t *testing.T) {
	run := wsPod(base, "uid-run", "v1", t0, ready(t0), stopIntent, ann(workspace.AnnUpgradeRequested, "true"), ann(workspace.AnnUpgradeHMAC, "x"),
		ann(workspace.AnnStartedAt, t0.Format(time.RFC3339)))
	run.Spec.NodeName = "node-1"
	run.Spec.Volumes = []corev1.Volume{
		{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-home"}}},
		{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
	}
	run.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "home", MountPath: "/home"}, {Name: "kube-api-access-abcde", MountPath: "/var/run/secrets"}}
	p, err := StoppedPod(run, "stopped-name", map[string]string{workspace.AnnStoppedFromUID: "uid-run"})
	if err != nil {
		t.Fatal(err)
	}
	if !workspace.IsStoppedPod(p) || p.Spec.NodeName != "" || p.Name != "stopped-name" || p.UID != "" {
		t.Fatalf("stopped pod not gated or still bound: gates %v node %q name %q", p.Spec.SchedulingGates, p.Spec.NodeName, p.Name)
	}
	for _, k := range []string{workspace.AnnOwner, workspace.AnnWorkspacePath, workspace.AnnTemplateVersion, workspace.AnnUpgradeRequested, workspace.AnnStopRequested} {
		if p.Annotations[k] != run.Annotations[k] {
			t.Errorf("annotation %s = %q, want %q", k, p.Annotations[k], run.Annotations[k])
		}
	}
	if _, ok := p.Annotations[workspace.AnnUpgradeHMAC]; ok {
		t.Error("upgrade bookkeeping was copied onto the stopped pod")
	}
	if _, ok := p.Annotations[workspace.AnnStartedAt]; ok {
		t.Error("the running pod's start time was copied onto the stopped pod")
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "claim-home" || len(p.Spec.Containers[0].VolumeMounts) != 1 {
		t.Fatalf("volumes = %+v mounts = %+v, want only the claim", p.Spec.Volumes, p.Spec.Containers[0].VolumeMounts)
	}
	if run.Spec.NodeName != "node-1" || len(run.Spec.Volumes) != 2 {
		t.Fatal("StoppedPod changed the running pod it copied")
	}
}
