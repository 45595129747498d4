package spawner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestIdentityFromAnOriginalFormatPod(t *testing.T) {
	legacy := func(userSub string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "ns", Labels: map[string]string{
			workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo",
			workspace.LabelUserSub: userSub, workspace.LabelTemplateVersion: "v1"}}}
	}
	id, err := IdentityFromPod(legacy("jane"))
	if err != nil || id.Owner != "jane" || id.ID != "demo" {
		t.Errorf("IdentityFromPod = %+v, %v; want owner jane from the user-sub label", id, err)
	}
	// A pod without stamped paths gets them from its namespace, so its upgrade stays routable
	// (a render with no namespace and no stamped paths would stamp none).
	if ws, preview := id.paths(); ws != workspace.WorkspacePath("ns", "demo") || preview != workspace.PreviewPath("ns", "demo") {
		t.Errorf("paths of a pod without stamped paths = %q, %q; want the namespace's", ws, preview)
	}
	_, err = IdentityFromPod(legacy(workspace.UserLabel("auth0|jane")))
	if err == nil || !strings.Contains(err.Error(), "kubectl annotate pod legacy nogoo9/owner=") {
		t.Errorf("a hashed user-sub names no owner; the error must say how to annotate it: %v", err)
	}
}
