package workspace

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StrategyRecreate is the AnnUpgradeStrategy value of a Recreate upgrade (pkg/upgrade.Recreate).
const StrategyRecreate = "Recreate"

// UpgradeInFlight reports whether up is an upgraded pod whose upgrade has not ended: the pod it
// replaces (AnnUpgradeFrom with a matching AnnUpgradeFromUID) is still among pods and not being
// deleted, or it is a Recreate upgrade not yet confirmed (AnnUpgradeStartedAt still present).
// AnnUpgradeFrom alone is history: it stays on the pod after the upgrade succeeded.
func UpgradeInFlight(up *corev1.Pod, pods []*corev1.Pod) bool {
	if up.DeletionTimestamp != nil || up.Annotations[AnnUpgradeFrom] == "" {
		return false
	}
	if UpgradeOldPod(up, pods) != nil {
		return true
	}
	return up.Annotations[AnnUpgradeStrategy] == StrategyRecreate && up.Annotations[AnnUpgradeStartedAt] != ""
}

// UpgradeOldPod is the live pod among pods that up replaces, or nil.
func UpgradeOldPod(up *corev1.Pod, pods []*corev1.Pod) *corev1.Pod {
	from := up.Annotations[AnnUpgradeFrom]
	if from == "" {
		return nil
	}
	uid := types.UID(up.Annotations[AnnUpgradeFromUID])
	for _, p := range pods {
		if p != up && p.Name == from && (uid == "" || p.UID == uid) && p.DeletionTimestamp == nil {
			return p
		}
	}
	return nil
}
