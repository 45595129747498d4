package upgrade

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// original is a pod as the original product made it: labels type, workspace-id, user-sub and
// template-version, no nogoo9/owner annotation.
func original(userSub string, opts ...podOpt) *corev1.Pod {
	p := wsPod("legacy-pod-1", "uid-legacy", "v1", t0)
	p.Labels[workspace.LabelUserSub] = userSub
	delete(p.Annotations, workspace.AnnOwner)
	return with(p, opts...)
}

func TestOriginalFormatPodsAreAdopted(t *testing.T) {
	cfg := Config{Keys: testKeys}
	target := Target{Found: true, Name: "python", Version: "v2"}
	t.Run("the owner is stamped from a raw user-sub label", func(t *testing.T) {
		m := Plan(Observed{Pods: []*corev1.Pod{original("jane", ready)}}, target, t0, cfg)
		want := []string{"PatchPod legacy-pod-1 set=[nogoo9/owner] remove=[]"}
		if got := summary(m); !reflect.DeepEqual(got, want) || m.Actions[0].Annotations[workspace.AnnOwner] != "jane" {
			t.Errorf("actions %q %v, want the owner jane stamped", got, m.Actions)
		}
	})
	t.Run("a hashed user-sub label names no owner: nothing is stamped", func(t *testing.T) {
		m := Plan(Observed{Pods: []*corev1.Pod{original(workspace.UserLabel("auth0|jane"), ready)}}, target, t0, cfg)
		if len(m.Actions) != 0 {
			t.Errorf("actions %q, want none", summary(m))
		}
	})
	t.Run("once stamped, an intent upgrades it to a pod named for its owner", func(t *testing.T) {
		p := original("jane", ready, ann(workspace.AnnOwner, "jane"), ann(workspace.AnnUpgradeRequested, "true"))
		m := Plan(Observed{Pods: []*corev1.Pod{p}}, target, t0, cfg)
		last := m.Actions[len(m.Actions)-1]
		if last.Kind != CreateUpgradePod || last.Name != workspace.UpgradePodName("jane", testID, "uid-legacy@v2") {
			t.Fatalf("actions %q", summary(m))
		}
		up := with(upgraded(p, last.Name, "uid-up", "v2", SideBySide, t0), ready, ann(workspace.AnnOwner, "jane"))
		up.Labels[workspace.LabelUserSub] = "jane"
		if problem := workspace.UpgradeLinkProblem(up, p); problem != "" {
			t.Errorf("the upgrade of an adopted pod is not trusted: %s", problem)
		}
	})
}

func TestUpgradedPodKeepsPathsAndFollowsTheNewPorts(t *testing.T) {
	old := wsPod("ws-old", "uid-old", "v1", t0) // ports 8080 / 3000, paths /ws/jane/demo/
	p := wsPod("ws-new", "uid-new", "v2", t0)
	p.Annotations[workspace.AnnWorkspacePort], p.Annotations[workspace.AnnPreviewPort] = "9090", "5173"
	p.Annotations[workspace.AnnWorkspacePath] = "/ws/other/"
	PreserveIdentity(p, old)
	if p.Annotations[workspace.AnnWorkspacePort] != "9090" || p.Annotations[workspace.AnnPreviewPort] != "5173" {
		t.Errorf("ports %s/%s, want the new version's 9090/5173", p.Annotations[workspace.AnnWorkspacePort], p.Annotations[workspace.AnnPreviewPort])
	}
	if p.Annotations[workspace.AnnWorkspacePath] != "/ws/jane/demo/" || p.Annotations[workspace.AnnPreviewPath] != "/preview/jane/demo/" {
		t.Errorf("paths %s/%s, want the old pod's", p.Annotations[workspace.AnnWorkspacePath], p.Annotations[workspace.AnnPreviewPath])
	}
}
