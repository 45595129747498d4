package upgrade

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// FuzzParseIntent: any annotation value a person can write is either a request or refused with a
// reason; never both, never neither, never a panic.
func FuzzParseIntent(f *testing.F) {
	for _, s := range []string{"true", " TRUE ", "yes", "0", "", "off", "2026-11-29T10:00:00Z", "2026-13-99T99:99:99Z", "\x00", "true\r\nX-Evil: 1", strings.Repeat("9", 4096)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		in := ParseIntent(v)
		if in.Valid == (in.Problem != "") {
			t.Fatalf("ParseIntent(%q) = %+v: exactly one of Valid and Problem must be set", v, in)
		}
		if !in.At.IsZero() && !in.Valid {
			t.Fatalf("ParseIntent(%q) has a time but is not valid", v)
		}
	})
}

// FuzzPlanAnnotations: hand-edited bookkeeping annotations on a workspace's pods (an intent, an
// upgrade-pod name, the version, the upgrade record) never make the planner panic, never delete a
// pod that no other live pod replaces, and never create a pod whose name is not a valid name.
func FuzzPlanAnnotations(f *testing.F) {
	f.Add("true", "", "1", "", "", "")
	f.Add("2026-11-29T10:00:00Z", "garbage pod name!", "2", "demo-x", "uid", "SideBySide")
	f.Add("no", "", "", "", "", "Recreate")
	f.Add("true", strings.Repeat("a", 300), "1\n2", "\x00", "", "Rollback")
	f.Fuzz(func(t *testing.T, intent, upgradePod, version, from, fromUID, strategy string) {
		cur := with(wsPod("cur", "u1", "1", t0), ready)
		if intent != "" {
			cur.Annotations[workspace.AnnUpgradeRequested] = intent
		}
		if upgradePod != "" {
			cur.Annotations[workspace.AnnUpgradePod] = upgradePod
		}
		cur.Annotations[workspace.AnnTemplateVersion] = version
		up := with(wsPod("up", "u2", "2", t0.Add(time.Minute)), pending)
		up.Annotations[workspace.AnnUpgradeFrom] = from
		up.Annotations[workspace.AnnUpgradeFromUID] = fromUID
		up.Annotations[workspace.AnnUpgradeStrategy] = strategy
		for _, pods := range [][]*corev1.Pod{{cur}, {cur, up}} {
			m := Plan(Observed{Pods: pods}, Target{Found: true, Name: "python", Version: "2"}, t0.Add(2*time.Minute), Config{})
			for _, a := range m.Actions {
				switch a.Kind {
				case DeletePod:
					if a.Keep == nil {
						t.Fatalf("delete of %s without a pod that stays: %+v", a.Pod.Name, m)
					}
					if a.Keep.UID != "" && a.Keep.UID == a.Pod.UID {
						t.Fatalf("delete of %s keeps itself", a.Pod.Name)
					}
				case CreateUpgradePod, CreateRollbackPod:
					if a.Name == "" || len(a.Name) > 253 || strings.ContainsAny(a.Name, " \x00\n/") {
						t.Fatalf("create of an invalid name %q", a.Name)
					}
				}
			}
		}
	})
}
