package workspace

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StripPod is the informer transform for workspace pods. It keeps what nogoo9 reads (metadata,
// labels and annotations, the volumes that name claims, readiness gates, scheduling gates, node,
// and the whole status; no containers) and drops the rest before the object is stored, so 10,000 cached
// workspace pods stay well under 100 MB. Managed fields, the service-account token volume,
// tolerations, env and probes are never read by nogoo9.
//
// A stripped pod must never be written back with Update: nogoo9 only patches pods (merge patches
// naming its own keys) and reads what it needs in full (e.g. a rollback spec) from the API server.
func StripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	if pod.Annotations != nil {
		delete(pod.Annotations, AnnRollbackSpec)
		delete(pod.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
	}
	var vols []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			vols = append(vols, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		}
	}
	pod.Spec = corev1.PodSpec{
		NodeName: pod.Spec.NodeName,
		Volumes:  vols,
		// No containers: nothing reads them from the cache (a change's diff, a stop and a
		// rollback read the full pod from the API server, and refuse a pod without containers,
		// so a cached pod handed to them by mistake fails loudly). A Container is over 400 bytes
		// before its strings and ports: 0.5 KB per cached workspace pod.
		ReadinessGates: pod.Spec.ReadinessGates,
		// The upgrade planner removes GateVolumeRelease once a Recreate's old pod is gone;
		// the stop gate says a workspace is stopped (IsStoppedPod).
		SchedulingGates: pod.Spec.SchedulingGates,
	}
	return pod, nil
}

// StripManagedFields is the informer transform for other cached objects (ConfigMaps, PVCs).
func StripManagedFields(obj any) (any, error) {
	if o, ok := obj.(interface {
		SetManagedFields([]metav1.ManagedFieldsEntry)
	}); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}
