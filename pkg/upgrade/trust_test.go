package upgrade

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestForgedBookkeepingNeverCreatesOrDeletes: upgrade annotations a person wrote by hand (kubectl
// annotate) on workspace pods produce at most a Warning Event: no pod is created and none deleted.
func TestForgedBookkeepingNeverCreatesOrDeletes(t *testing.T) {
	cfg := Config{Timeout: 10 * time.Minute, Keys: testKeys}
	target := Target{Found: true, Name: "python", Version: "v2"}
	now := t0.Add(time.Minute)
	real := func(opts ...podOpt) *corev1.Pod {
		return with(wsPod(workspace.PodName(testOwner, testID), "uid-real", "v1", t0.Add(-time.Hour)), append([]podOpt{ready}, opts...)...)
	}
	genuineSBS := func(opts ...podOpt) *corev1.Pod {
		r := real()
		return with(upgraded(r, workspace.NextPodName(r, "v2"), "uid-new", "v2", SideBySide, t0), opts...)
	}
	// Mallory's own Ready pod, relabelled and re-annotated into Jane's workspace.
	mallory := func(opts ...podOpt) *corev1.Pod {
		p := with(wsPod(workspace.PodName("mallory", "mine"), "uid-mallory", "v2", t0), ready)
		return with(p, opts...)
	}
	tests := []struct {
		name string
		pods []*corev1.Pod
		now  time.Time
	}{
		{name: "a pod annotated as the upgrade of the real pod (upgrade-from, -uid, strategy, started-at) whose name nogoo9 did not derive",
			pods: []*corev1.Pod{real(), mallory(
				ann(workspace.AnnUpgradeFrom, workspace.PodName(testOwner, testID)), ann(workspace.AnnUpgradeFromUID, "uid-real"),
				ann(workspace.AnnUpgradeStrategy, "SideBySide"), ann(workspace.AnnUpgradeStartedAt, t0.Format(time.RFC3339)))}},
		{name: "the same with strategy Recreate and a made-up HMAC",
			pods: []*corev1.Pod{real(), mallory(
				ann(workspace.AnnUpgradeFrom, workspace.PodName(testOwner, testID)), ann(workspace.AnnUpgradeFromUID, "uid-real"),
				ann(workspace.AnnUpgradeStrategy, "Recreate"), ann(workspace.AnnUpgradeHMAC, "v1:00000000:abc:AAAA"))}},
		{name: "the same with strategy Rollback",
			pods: []*corev1.Pod{real(), mallory(
				ann(workspace.AnnUpgradeFrom, workspace.PodName(testOwner, testID)), ann(workspace.AnnUpgradeFromUID, "uid-real"),
				ann(workspace.AnnUpgradeStrategy, "Rollback"))}},
		{name: "a pod relabelled into the workspace with the owner's annotation, newer and Ready (a duplicate)",
			pods: []*corev1.Pod{real()}},
		{name: "a genuine side-by-side upgrade in flight re-annotated as a Rollback (would delete the old pod at once)",
			pods: []*corev1.Pod{real(), genuineSBS(pending, ann(workspace.AnnUpgradeStrategy, "Rollback"))}},
		{name: "a genuine side-by-side upgrade in flight re-annotated as a Recreate without a record nogoo9 signed",
			pods: []*corev1.Pod{real(), genuineSBS(pending, ann(workspace.AnnUpgradeStrategy, "Recreate"))}},
		{name: "a genuine side-by-side upgrade in flight with an unknown strategy",
			pods: []*corev1.Pod{real(), genuineSBS(pending, ann(workspace.AnnUpgradeStrategy, "Delete"))}},
		{name: "a genuine side-by-side upgrade in flight with upgrade-started-at back-dated by a day",
			pods: []*corev1.Pod{real(), genuineSBS(pending, ann(workspace.AnnUpgradeStartedAt, t0.Add(-24*time.Hour).Format(time.RFC3339)))}},
		{name: "a genuine side-by-side upgrade in flight whose owner annotation was changed",
			pods: []*corev1.Pod{real(), genuineSBS(pending, ann(workspace.AnnOwner, "mallory"))}},
	}
	// The relabelled duplicate: Mallory's pod with Jane's labels and owner.
	dup := mallory(ann(workspace.AnnOwner, testOwner))
	dup.Labels[workspace.LabelUserSub] = workspace.UserLabel(testOwner)
	tests[3].pods = append(tests[3].pods, dup)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := now
			if !tt.now.IsZero() {
				n = tt.now
			}
			m := Plan(Observed{Pods: tt.pods}, target, n, cfg)
			for _, a := range m.Actions {
				if a.Kind != Event {
					t.Fatalf("forged annotations led to %s: %q", a.Kind, summary(m))
				}
			}
		})
	}
}

func TestForgedRecordsAreReported(t *testing.T) {
	cfg := Config{Timeout: 10 * time.Minute, Keys: testKeys}
	r := with(wsPod(workspace.PodName(testOwner, testID), "uid-real", "v1", t0.Add(-time.Hour)), ready)
	forged := with(wsPod(workspace.PodName("mallory", "mine"), "uid-m", "v2", t0), ready,
		ann(workspace.AnnUpgradeFrom, r.Name), ann(workspace.AnnUpgradeFromUID, "uid-real"), ann(workspace.AnnUpgradeStrategy, "SideBySide"))
	m := Plan(Observed{Pods: []*corev1.Pod{r, forged}}, Target{Found: true, Version: "v2"}, t0, cfg)
	if m.State != StateUntrusted || len(m.Actions) != 1 || m.Actions[0].Reason != ReasonUntrustedAnnotations || m.Actions[0].EventType != corev1.EventTypeWarning {
		t.Fatalf("want one Warning %s, got %s %q", ReasonUntrustedAnnotations, m.State, summary(m))
	}
}

func TestRecreateRecordHMAC(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0), ready)
	up := upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", Recreate, t0)
	spec := `{"spec":{"containers":[{"name":"ide","image":"ide:1"}]}}`
	up.Annotations[workspace.AnnRollbackSpec] = spec
	up.Annotations[workspace.AnnUpgradeHMAC] = testKeys.Sign(up.Namespace, up.Name, up.Annotations, spec)
	if err := testKeys.VerifySpec(up); err != nil {
		t.Fatalf("a record nogoo9 signed must verify: %v", err)
	}
	rotated, _ := NewKeyring(bytes.Repeat([]byte("n"), MinKeyBytes), bytes.Repeat([]byte("k"), MinKeyBytes))
	if err := rotated.VerifySpec(up); err != nil {
		t.Errorf("a record signed with a key still in the ring (rotation) must verify: %v", err)
	}
	tamper := map[string]func(p *corev1.Pod){
		"spec replaced": func(p *corev1.Pod) {
			p.Annotations[workspace.AnnRollbackSpec] = `{"spec":{"serviceAccountName":"nogoo9"}}`
		},
		"from-uid changed":      func(p *corev1.Pod) { p.Annotations[workspace.AnnUpgradeFromUID] = "uid-other" },
		"from-version changed":  func(p *corev1.Pod) { p.Annotations[workspace.AnnUpgradeFromVersion] = "v0" },
		"strategy changed":      func(p *corev1.Pod) { p.Annotations[workspace.AnnUpgradeStrategy] = "Rollback" },
		"copied to another pod": func(p *corev1.Pod) { p.Name = "ws-other-up-aaaaa" },
		"another namespace":     func(p *corev1.Pod) { p.Namespace = "other" },
		"hmac removed":          func(p *corev1.Pod) { delete(p.Annotations, workspace.AnnUpgradeHMAC) },
		"hmac of an unknown key": func(p *corev1.Pod) {
			p.Annotations[workspace.AnnUpgradeHMAC] = RandomKeyring().Sign(p.Namespace, p.Name, p.Annotations, spec)
		},
	}
	for name, f := range tamper {
		t.Run(name, func(t *testing.T) {
			p := up.DeepCopy()
			f(p)
			if err := testKeys.VerifySpec(p); err == nil {
				t.Errorf("tampered record verified")
			}
		})
	}
	var none *Keyring
	if err := none.VerifySpec(up); err == nil {
		t.Errorf("a nil keyring must verify nothing")
	}
}

func TestParseKeyFile(t *testing.T) {
	if _, err := ParseKeyFile([]byte("# keys\n\nc2hvcnQ=\n")); err == nil {
		t.Errorf("a 5-byte key must be refused")
	}
	r, err := ParseKeyFile([]byte("# newest first\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\nBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\n"))
	if err != nil || len(r.keys) != 2 {
		t.Fatalf("two keys expected: %v", err)
	}
	if _, err := ParseKeyFile([]byte("not base64!\n")); err == nil {
		t.Errorf("garbage must be refused")
	}
}

func TestMaintenanceFollowsEveryUpgrade(t *testing.T) {
	cfg := Config{Timeout: 10 * time.Minute, Keys: testKeys}
	mnt := ann(workspace.AnnMaintenance, "disk migration")
	old := with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), ready, ann(workspace.AnnUpgradeRequested, "true"), mnt)
	t.Run("the new pod is created with the old pod's maintenance", func(t *testing.T) {
		m := Plan(Observed{Pods: []*corev1.Pod{old}}, Target{Found: true, Version: "v2"}, t0, cfg)
		for _, a := range m.Actions {
			if a.Kind == CreateUpgradePod && a.Annotations[workspace.AnnMaintenance] != "disk migration" {
				t.Errorf("create annotations = %v", a.Annotations)
			}
		}
	})
	up := with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", SideBySide, t0), ready)
	cases := []struct {
		name string
		old  *corev1.Pod
		up   *corev1.Pod
		want []string
	}{
		{"maintenance set on the old pod during the upgrade goes to the new pod before the old one is deleted", old, up,
			[]string{"PatchPod " + up.Name + " set=[nogoo9/maintenance] remove=[]", "DeletePod ws-old [Normal UpgradeSucceeded on " + up.Name + "] result=succeeded"}},
		{"maintenance lifted on the old pod during the upgrade is lifted on the new pod too",
			with(old.DeepCopy(), func(p *corev1.Pod) { delete(p.Annotations, workspace.AnnMaintenance) }), with(up.DeepCopy(), mnt),
			[]string{"PatchPod " + up.Name + " set=[] remove=[nogoo9/maintenance]", "DeletePod ws-old [Normal UpgradeSucceeded on " + up.Name + "] result=succeeded"}},
		{"the same maintenance on both pods needs no write", old, with(up.DeepCopy(), mnt),
			[]string{"DeletePod ws-old [Normal UpgradeSucceeded on " + up.Name + "] result=succeeded"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := Plan(Observed{Pods: []*corev1.Pod{c.old, c.up}}, Target{Found: true, Version: "v2"}, t0.Add(time.Minute), cfg)
			if got := summary(m); !reflect.DeepEqual(got, c.want) {
				t.Errorf("actions:\n got  %q\n want %q", got, c.want)
			}
			for _, a := range m.Actions {
				if a.Kind == DeletePod && !a.MatchVersion {
					t.Errorf("the old pod must be deleted only as seen (resourceVersion precondition)")
				}
			}
		})
	}
	t.Run("a rollback pod takes over the failed pod's maintenance", func(t *testing.T) {
		failed := with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", Recreate, t0), pending, mnt)
		rb := with(upgraded(failed, workspace.RollbackPodName(failed), "uid-rb", "v1", Rollback, t0), pending)
		m := Plan(Observed{Pods: []*corev1.Pod{failed, rb}}, Target{Found: true, Version: "v2"}, t0.Add(11*time.Minute), cfg)
		want := []string{"PatchPod " + rb.Name + " set=[nogoo9/maintenance] remove=[]", "DeletePod " + failed.Name}
		if got := summary(m); !reflect.DeepEqual(got, want) {
			t.Errorf("actions:\n got  %q\n want %q", got, want)
		}
	})
}
