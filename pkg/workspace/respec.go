package workspace

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// RecreatableSpec returns a copy of a running pod's spec that a new pod can be created with:
// without what exists only on a scheduled, running pod (its node, debug containers added by
// kubectl debug, which a create refuses) and without the service account token volume the
// API server injected (kube-api-access-*, injected again on create as the pod's own settings say).
// The stopped copy of a workspace and a Recreate's rollback record both start from it.
func RecreatableSpec(running *corev1.PodSpec) corev1.PodSpec {
	spec := *running.DeepCopy()
	spec.NodeName = ""
	spec.EphemeralContainers = nil
	dropped := map[string]bool{}
	var vols []corev1.Volume
	for _, v := range spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			dropped[v.Name] = true
			continue
		}
		vols = append(vols, v)
	}
	spec.Volumes = vols
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			var mounts []corev1.VolumeMount
			for _, m := range cs[i].VolumeMounts {
				if !dropped[m.Name] {
					mounts = append(mounts, m)
				}
			}
			cs[i].VolumeMounts = mounts
		}
	}
	return spec
}
