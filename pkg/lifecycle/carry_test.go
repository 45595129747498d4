package lifecycle

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// actionLines renders a move's actions one per line: kind, pod, a patch's keys set (with values)
// and removed, and the pod kept by a delete. Pod names are shown without the hash of jane's
// workspace demo (base): ws-jane-demo, ws-jane-demo-up-copyr.
func actionLines(m Move) []string {
	short := func(p *corev1.Pod) string { return strings.Replace(p.Name, base, "ws-jane-demo", 1) }
	var out []string
	for _, a := range m.Actions {
		s := string(a.Kind) + " " + short(a.Pod)
		if a.Kind == PatchPod {
			var set []string
			for k, v := range a.Set {
				set = append(set, k+"="+v)
			}
			sort.Strings(set)
			s += fmt.Sprintf(" set=%v remove=%v", set, a.Remove)
		}
		if a.Keep != nil {
			s += " keep=" + short(a.Keep)
		}
		out = append(out, s)
	}
	return out
}

// TestReplacementKeepsWhatAPersonWrote: when a pod of the workspace is replaced by another that
// nogoo9 made from it (its stopped copy, a pod on the latest version), what a person wrote on the
// pod that goes after the other was made (maintenance, pin, update policy and window, a requested
// upgrade where the replacement keeps it, a stop) is written on the pod that stays first; the
// original pod that stays after a stop is undone keeps its own values.
func TestReplacementKeepsWhatAPersonWrote(t *testing.T) {
	created := t0.Add(-time.Hour)
	run := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(base, "uid-run", "v1", created, append([]func(*corev1.Pod){ready(created)}, opts...)...)
	}
	copyOf := func(p *corev1.Pod, opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(named("copyr"), "uid-stop", "v1", t0.Add(-time.Minute), append([]func(*corev1.Pod){stoppedFrom(p)}, opts...)...)
	}
	stoppedS := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(named("stopd"), "uid-s", "v1", created, append([]func(*corev1.Pod){gated}, opts...)...)
	}
	startedN := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		return wsPod(named("newv2"), "uid-n", "v2", t0.Add(-time.Minute), append([]func(*corev1.Pod){ready(t0), ann(workspace.AnnStartedFromUID, "uid-s")}, opts...)...)
	}
	pin := ann(workspace.AnnPinned, "true")
	cases := []struct {
		name   string
		pods   []*corev1.Pod
		target Target
		want   []string
	}{
		{"stop: a maintenance set on the running pod after its stopped copy was made goes to the copy before the running pod is deleted",
			[]*corev1.Pod{run(stopIntent, maint), copyOf(run())}, v2,
			[]string{"PatchPod ws-jane-demo-up-copyr set=[nogoo9/maintenance=disk move] remove=[]", "DeletePod ws-jane-demo keep=ws-jane-demo-up-copyr"}},
		{"stop: a pin lifted on the running pod after its copy was made is lifted on the copy",
			[]*corev1.Pod{run(stopIntent), copyOf(run(), pin)}, v2,
			[]string{"PatchPod ws-jane-demo-up-copyr set=[] remove=[nogoo9/pinned]", "DeletePod ws-jane-demo keep=ws-jane-demo-up-copyr"}},
		{"stop: an update policy, window and upgrade request written on the running pod go to the copy (the start honours the request)",
			[]*corev1.Pod{run(stopIntent, ann(workspace.AnnUpdatePolicy, "window"), ann(workspace.AnnUpdateWindow, "Sat 02:00-04:00 UTC"), ann(workspace.AnnUpgradeRequested, "true")), copyOf(run())}, v2,
			[]string{"PatchPod ws-jane-demo-up-copyr set=[nogoo9/update-policy=window nogoo9/update-window=Sat 02:00-04:00 UTC nogoo9/upgrade-requested=true] remove=[]", "DeletePod ws-jane-demo keep=ws-jane-demo-up-copyr"}},
		{"stop: the copy already agrees: only the delete",
			[]*corev1.Pod{run(stopIntent, maint), copyOf(run(), maint)}, v2,
			[]string{"DeletePod ws-jane-demo keep=ws-jane-demo-up-copyr"}},
		{"stop: a stop written again on the running pod after a start removed it from the copy goes to the copy",
			[]*corev1.Pod{run(stopIntent), copyOf(run(), func(p *corev1.Pod) { delete(p.Annotations, workspace.AnnStopRequested) })}, v2,
			[]string{"PatchPod ws-jane-demo-up-copyr set=[nogoo9/stop-requested=stopped by its owner] remove=[]", "DeletePod ws-jane-demo keep=ws-jane-demo-up-copyr"}},
		{"start on the latest version: a pin written on the stopped pod after the new pod was built goes to the new pod before the stopped pod is deleted",
			[]*corev1.Pod{stoppedS(pin), startedN()}, v2,
			[]string{"PatchPod ws-jane-demo-up-newv2 set=[nogoo9/pinned=true] remove=[]", "DeletePod ws-jane-demo-up-stopd keep=ws-jane-demo-up-newv2"}},
		{"start on the latest version: the upgrade request that made it is not carried (the new pod answers it)",
			[]*corev1.Pod{stoppedS(ann(workspace.AnnUpgradeRequested, "true")), startedN()}, v2,
			[]string{"DeletePod ws-jane-demo-up-stopd keep=ws-jane-demo-up-newv2"}},
		{"stop undone: the running pod is the original and keeps its own values; its copy just goes",
			[]*corev1.Pod{run(), wsPod(named("copyr"), "uid-stop", "v1", t0.Add(-time.Minute), gated, maint, ann(workspace.AnnStoppedFromUID, "uid-run"))}, v2,
			[]string{"DeletePod ws-jane-demo-up-copyr keep=ws-jane-demo"}},
		{"stop during a start on the latest version, the intent written only on the stopped pod: it is copied onto the new pod that serves",
			[]*corev1.Pod{stoppedS(stopIntent), startedN()}, v2,
			[]string{"PatchPod ws-jane-demo-up-newv2 set=[nogoo9/stop-requested=stopped by its owner] remove=[]"}},
		{"stop during a start on the latest version, once the new pod has the intent: its stopped copy is made",
			[]*corev1.Pod{stoppedS(stopIntent), startedN(stopIntent)}, v2,
			[]string{"CreateStoppedPod ws-jane-demo-up-newv2"}},
		{"two stopped pods: the newest takes the older one's maintenance and stop, then the older goes",
			[]*corev1.Pod{stoppedS(stopIntent, maint), wsPod(named("copyn"), "uid-c", "v2", t0, gated, ann(workspace.AnnStoppedFromUID, "uid-n"))}, v2,
			[]string{"PatchPod ws-jane-demo-up-copyn set=[nogoo9/maintenance=disk move nogoo9/stop-requested=stopped by its owner] remove=[]", "DeletePod ws-jane-demo-up-stopd keep=ws-jane-demo-up-copyn"}},
		{"two stopped pods created in the same second: the copy of the new pod stays (lineage, not the name, says which is older)",
			[]*corev1.Pod{stoppedS(stopIntent, maint, func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t0) }),
				wsPod(named("acopy"), "uid-c", "v2", t0, gated, ann(workspace.AnnStoppedFromUID, "uid-n"), ann(workspace.AnnStartedFromUID, "uid-s"))}, v2,
			[]string{"PatchPod ws-jane-demo-up-acopy set=[nogoo9/maintenance=disk move nogoo9/stop-requested=stopped by its owner] remove=[]", "DeletePod ws-jane-demo-up-stopd keep=ws-jane-demo-up-acopy"}},
		{"node lost: a maintenance written on the lost pod after its copy was made goes to the copy before the lost pod is deleted",
			[]*corev1.Pod{run(maint, ann(workspace.AnnNodeLost, "gone"), func(p *corev1.Pod) { p.Spec.NodeName = "n1" }),
				wsPod(named("copyr"), "uid-stop", "v1", t0.Add(-time.Minute), gated, ann(workspace.AnnStoppedFromUID, "uid-run"))},
			Target{Found: true, Version: "v1", GoneNodes: map[string]bool{"n1": true}},
			[]string{"PatchPod ws-jane-demo-up-copyr set=[nogoo9/maintenance=disk move] remove=[]", "DeletePod ws-jane-demo keep=ws-jane-demo-up-copyr"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Plan(tc.pods, tc.target, t0, Config{})
			if got := actionLines(m); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("actions (state %s):\n got  %q\n want %q", m.State, got, tc.want)
			}
			if !m.Hold {
				t.Errorf("Hold = false: the upgrade planner would run during the move")
			}
			for i, a := range m.Actions {
				if a.Kind == PatchPod && i+1 < len(m.Actions) && m.Actions[i+1].Kind == DeletePod && m.Actions[i+1].Keep != a.Pod {
					t.Errorf("the patch goes to %s but the delete keeps %s", a.Pod.Name, m.Actions[i+1].Keep.Name)
				}
				if a.Kind == PatchPod && strings.Contains(fmt.Sprint(a.Remove), workspace.AnnStopRequested) {
					t.Errorf("a stop intent was removed: while any live pod carries it the workspace is stopped")
				}
			}
		})
	}
}
