package workspace

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// StrategyRollback is the AnnUpgradeStrategy value of the pod that restores a failed Recreate
// upgrade (pkg/upgrade.Rollback).
const StrategyRollback = "Rollback"

// NextPodName is the name of the pod that replaces cur when it is upgraded to version: derived
// from cur's owner, id and UID and the version only, so the front end (which records it in
// AnnUpgradePod) and the controller (which creates it) agree, and so the controller can tell a
// pod it made from one whose upgrade annotations a person wrote (the name cannot be changed).
func NextPodName(cur *corev1.Pod, version string) string {
	return UpgradePodName(Owner(cur), ID(cur), string(cur.UID)+"@"+version)
}

// RollbackPodName is the deterministic name of the pod that brings back the spec stored on
// failed (a Recreate-upgraded pod whose upgrade failed).
func RollbackPodName(failed *corev1.Pod) string {
	return UpgradePodName(Owner(failed), ID(failed), "rollback@"+string(failed.UID))
}

// NameMatchesIdentity reports whether pod's name is one nogoo9 gives to a pod of the workspace
// its labels and annotations claim (owner and id): PodName(owner, id), or that name with an
// upgrade suffix. A name is set at creation and never changes, so a person who relabels or
// re-annotates some other pod cannot make it pass.
func NameMatchesIdentity(pod *corev1.Pod) bool {
	base := PodName(Owner(pod), ID(pod))
	if pod.Name == base {
		return true
	}
	rest, ok := strings.CutPrefix(pod.Name, base+"-up-")
	return ok && len(rest) == upgradeSuffixLen
}

// UpgradeLinkProblem says why the upgrade record of up (AnnUpgradeFrom and the keys that go with
// it) is not one nogoo9 would have written when it made up from old, or "" when it is. old is
// the live pod named by AnnUpgradeFrom, or nil when it is gone. The checks need no secret: the
// name of up is derived from old's UID and up's version (or, for a rollback pod, from the UID of
// the pod it restores), and up carries old's identity.
func UpgradeLinkProblem(up, old *corev1.Pod) string {
	uid := up.Annotations[AnnUpgradeFromUID]
	if uid == "" {
		return "it has " + AnnUpgradeFrom + " without " + AnnUpgradeFromUID
	}
	if old != nil && string(old.UID) != uid {
		return AnnUpgradeFromUID + " does not match pod " + old.Name
	}
	strategy := up.Annotations[AnnUpgradeStrategy]
	owner, id := Owner(up), ID(up)
	switch strategy {
	case StrategyRollback:
		if up.Name != UpgradePodName(owner, id, "rollback@"+uid) {
			return "its name is not the one nogoo9 gives to the rollback of pod " + up.Annotations[AnnUpgradeFrom]
		}
	case StrategyRecreate, "SideBySide":
		v := TemplateVersion(up)
		// "/" is the seed the front end of earlier releases recorded in AnnUpgradePod.
		if up.Name != UpgradePodName(owner, id, uid+"@"+v) && up.Name != UpgradePodName(owner, id, uid+"/"+v) {
			return "its name is not the one nogoo9 gives to the upgrade of pod " + up.Annotations[AnnUpgradeFrom] + " to version " + v
		}
	default:
		return AnnUpgradeStrategy + " is " + quote(strategy) + ", not SideBySide, Recreate or Rollback"
	}
	if old != nil {
		if Owner(old) != owner || ID(old) != id || old.Labels[LabelUserSub] != up.Labels[LabelUserSub] {
			return "its owner or workspace id differs from pod " + old.Name + "'s"
		}
	}
	return ""
}

func quote(s string) string { return "\"" + s + "\"" }

// InMaintenance reports whether the workspace of pods (sorted with NewestFirst) is in
// maintenance, and its reason: the active pod's AnnMaintenance, or any live pod's.
func InMaintenance(pods []*corev1.Pod) (string, bool) {
	if len(pods) == 0 {
		return "", false
	}
	return maintenance(pods, Active(pods))
}
