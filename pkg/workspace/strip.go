package workspace

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StripPod is the informer transform for workspace pods. It keeps what nogoo9 reads (metadata,
// labels and annotations, the volumes that name claims, readiness gates, node, container names and
// images, and the whole status) and drops the rest before the object is stored, so 10,000 cached
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
	containers := make([]corev1.Container, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		containers[i] = corev1.Container{Name: c.Name, Image: c.Image, Ports: c.Ports}
	}
	pod.Spec = corev1.PodSpec{
		NodeName:       pod.Spec.NodeName,
		Volumes:        vols,
		Containers:     containers,
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
