package upgrade

import (
	"bytes"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// testKeys sign the records of the fixtures' Recreate upgrades, as the controller does.
var testKeys, _ = NewKeyring(bytes.Repeat([]byte("k"), MinKeyBytes))

const (
	testOwner = "auth0|jane"
	testID    = "demo"
)

// wsPod is a workspace pod of testOwner/testID at version, created at created.
func wsPod(name, uid, version string, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID(uid),
			CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: testID,
				workspace.LabelUserSub: workspace.UserLabel(testOwner), workspace.LabelTemplate: "python",
				workspace.LabelTemplateVersion: workspace.VersionLabel(version),
			},
			Annotations: map[string]string{
				workspace.AnnOwner: testOwner, workspace.AnnTemplateVersion: version,
				workspace.AnnWorkspaceName: "Demo", workspace.AnnWorkspacePath: "/ws/jane/demo/", workspace.AnnWorkspacePort: "8080",
				workspace.AnnPreviewPath: "/preview/jane/demo/", workspace.AnnPreviewPort: "3000",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ide:" + version}}},
	}
}

type podOpt func(*corev1.Pod)

func with(p *corev1.Pod, opts ...podOpt) *corev1.Pod {
	for _, o := range opts {
		o(p)
	}
	return p
}

func ann(k, v string) podOpt { return func(p *corev1.Pod) { p.Annotations[k] = v } }

func ready(p *corev1.Pod) {
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

func pending(p *corev1.Pod) { p.Status = corev1.PodStatus{Phase: corev1.PodPending} }

func waiting(reason, msg string) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	}
}

func terminating(p *corev1.Pod) {
	ts := metav1.NewTime(t0)
	p.DeletionTimestamp = &ts
}

// graceSeconds is a pod's grace period as the API server records it on its deletion.
func graceSeconds(secs int64) podOpt {
	return func(p *corev1.Pod) { p.DeletionGracePeriodSeconds = &secs }
}

func claim(name string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
	}
}

func pvc(name string, mode corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{mode}}}
}

// upgraded is the pod that replaces old at version with strategy, started at started.
func upgraded(old *corev1.Pod, name, uid, version string, s Strategy, started time.Time) *corev1.Pod {
	p := wsPod(name, uid, version, started)
	p.Spec.Volumes = old.Spec.Volumes
	p.Annotations[workspace.AnnUpgradeFrom] = old.Name
	p.Annotations[workspace.AnnUpgradeFromUID] = string(old.UID)
	p.Annotations[workspace.AnnUpgradeFromVersion] = workspace.TemplateVersion(old)
	p.Annotations[workspace.AnnUpgradeStrategy] = string(s)
	p.Annotations[workspace.AnnUpgradeStartedAt] = started.Format(time.RFC3339)
	if s == Recreate {
		p.Annotations[workspace.AnnUpgradeHMAC] = testKeys.Sign(p.Namespace, p.Name, p.Annotations, "")
	}
	return p
}

func keyOf(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: workspace.ID(p)}
}
