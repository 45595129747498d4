package workspace

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FuzzAnnotations: whatever a person writes into a workspace pod's annotations (intent, version,
// maintenance, upgrade bookkeeping, owner), the model of the workspace still names a phase, keeps
// the owner and id it reads, and never panics.
func FuzzAnnotations(f *testing.F) {
	f.Add("true", "2", "", "", "jane")
	f.Add("", "", "disk full", "old-pod", "auth0|5f1c")
	f.Add("garbage\x00", "1\r\n2", strings.Repeat("m", 70000), "cur", "")
	f.Add("2026-11-29T10:00:00Z", "ü", "", "\xff", "ü@ß.example")
	f.Fuzz(func(t *testing.T, intent, version, maintenance, upgradeFrom, owner string) {
		now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		mk := func(name, uid string, created time.Time) *corev1.Pod {
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("u-" + uid), CreationTimestamp: metav1.NewTime(created),
					Labels: map[string]string{LabelType: TypeWorkspace, LabelWorkspaceID: "demo", LabelUserSub: UserLabel(owner)},
					Annotations: map[string]string{AnnOwner: owner, AnnTemplateVersion: version, AnnUpgradeRequested: intent,
						AnnMaintenance: maintenance, AnnUpgradeFrom: upgradeFrom, AnnUpgradeFromUID: "u-cur", AnnUpgradeFromVersion: version}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.1",
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			}
		}
		cur := mk("cur", "cur", now.Add(-time.Hour))
		up := mk("up", "up", now.Add(-time.Minute))
		for _, pods := range [][]*corev1.Pod{{cur}, {cur, up}, {up, cur}} {
			st := Phase(pods, now)
			if st.Phase == "" {
				t.Fatalf("no phase for annotations %q %q %q %q", intent, version, maintenance, upgradeFrom)
			}
			if info := Describe(pods, "2", now); info.ID != "demo" || info.Phase == "" {
				t.Fatalf("Describe = %+v", info)
			}
			if got := Owner(Active(NewestFirst(pods))); got != owner && owner != "" {
				t.Fatalf("owner = %q, want %q", got, owner)
			}
		}
	})
}
