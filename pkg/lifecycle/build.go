package lifecycle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// stoppedDropped are annotations the stopped copy does not inherit: the bookkeeping of an upgrade
// that has ended (the stop waits for one in flight), the time of the running pod's last start
// (its start stamps it again), the owner's delete met on the running pod (it is about that pod's
// delete, not the workspace's: a copy made in the instant before it landed is the sweep's) and
// kubectl's copy of an applied object. A
// requested upgrade that had not started stays (nogoo9/upgrade-requested): the start honours it.
var stoppedDropped = []string{
	workspace.AnnUpgradePod, workspace.AnnUpgradeStartedAt, workspace.AnnUpgradeFrom,
	workspace.AnnUpgradeFromUID, workspace.AnnUpgradeFromVersion, workspace.AnnUpgradeStrategy,
	workspace.AnnRollbackSpec, workspace.AnnUpgradeHMAC, workspace.AnnNodeLost, workspace.AnnStartedAt,
	workspace.AnnDeletedAt, "kubectl.kubernetes.io/last-applied-configuration",
}

// StoppedPod is the stopped copy of running (the full pod as the API server has it; a cached pod
// is stripped), named name, with annotations set added: the same labels, annotations and spec
// (so the same version, claims and paths), without what the cluster filled in for running (node,
// service-account token volume, debug containers), held by the stop gate.
func StoppedPod(running *corev1.Pod, name string, set map[string]string) (*corev1.Pod, error) {
	if len(running.Spec.Containers) == 0 {
		return nil, fmt.Errorf("pod %s has no containers: read it from the API server, not the cache", running.Name)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: running.Namespace,
		Labels: map[string]string{}, Annotations: map[string]string{},
	}}
	for k, v := range running.Labels {
		p.Labels[k] = v
	}
	for k, v := range running.Annotations {
		p.Annotations[k] = v
	}
	for _, k := range stoppedDropped {
		delete(p.Annotations, k)
	}
	workspace.CarryCreatedAt(p, running) // the copy is as old as the workspace, not as itself
	for k, v := range set {
		p.Annotations[k] = v
	}
	p.Spec = workspace.RecreatableSpec(&running.Spec)
	if !workspace.IsStoppedPod(p) {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: workspace.GateStopped})
	}
	return p, nil
}
