package updatepolicy

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// SettingsOf reads the policy annotations of pod and of its template (tmplAnn, nil when the
// template is gone).
func SettingsOf(pod *corev1.Pod, tmplAnn map[string]string) Settings {
	var s Settings
	s.PodPolicy, s.HasPodPolicy = pod.Annotations[workspace.AnnUpdatePolicy]
	s.PodWindow, s.HasPodWindow = pod.Annotations[workspace.AnnUpdateWindow]
	s.Pinned, s.HasPinned = pod.Annotations[workspace.AnnPinned]
	s.TemplatePolicy = tmplAnn[workspace.AnnUpdatePolicy]
	s.TemplateWindow = tmplAnn[workspace.AnnUpdateWindow]
	return s
}

// IsPinned reports whether pod is pinned (an unreadable value counts as pinned, see ParsePinned).
func IsPinned(pod *corev1.Pod) bool {
	v, ok := pod.Annotations[workspace.AnnPinned]
	p, _ := ParsePinned(v, ok)
	return p
}

// ReadySince is when pod's Ready condition last became True, or zero when it is not Ready.
func ReadySince(pod *corev1.Pod) (bool, time.Time) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status != corev1.ConditionTrue {
				return false, time.Time{}
			}
			return true, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}
