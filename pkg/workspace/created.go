package workspace

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// CreatedAt is when the workspace of pod was created: the earlier of pod's AnnWorkspaceCreatedAt
// and pod's own creation. A pod without the key (made before it existed, or by a copy that did
// not carry it), or with a value that does not parse, counts from its own creation; a value after
// the pod's own creation is not believed (no pod is older than its workspace).
func CreatedAt(pod *corev1.Pod) time.Time {
	own := pod.CreationTimestamp.Time
	if v, ok := pod.Annotations[AnnWorkspaceCreatedAt]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil && (own.IsZero() || t.Before(own)) {
			return t
		}
	}
	return own
}

// CarryCreatedAt stamps p, a pod made to replace old (an upgrade's, a rollback's, a stopped or
// evicted copy, a start's), with the creation of old's workspace (CreatedAt), so the workspace
// stays as old as it is however often its pods are replaced.
func CarryCreatedAt(p, old *corev1.Pod) {
	created := CreatedAt(old)
	if created.IsZero() {
		return
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnWorkspaceCreatedAt] = created.UTC().Format(time.RFC3339)
}
