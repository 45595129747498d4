package ui

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestHubTellsTheWorkspaceAPodLeft: a pod relabelled out of a workspace, or into another, changes
// both: a page showing the one it left refreshes too (it listed the pod, and must stop).
func TestHubTellsTheWorkspaceAPodLeft(t *testing.T) {
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "team", Labels: labels}}
	}
	in := func(id string) map[string]string {
		return map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id}
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     []string
	}{
		{"a change inside one workspace", pod(in("a1")), pod(in("a1")), []string{"a1"}},
		{"moved to another workspace", pod(in("a1")), pod(in("b1")), []string{"a1", "b1"}},
		{"its workspace id removed", pod(in("a1")), pod(map[string]string{workspace.LabelType: workspace.TypeWorkspace}), []string{"a1"}},
		{"its type removed", pod(in("a1")), pod(map[string]string{workspace.LabelWorkspaceID: "a1"}), []string{"a1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHub()
			sub := h.Subscribe(h.Seq())
			defer sub.Close()
			h.OnUpdate(tc.old, tc.new)
			ids, all, _ := sub.Take()
			slices.Sort(ids)
			if all || !slices.Equal(ids, tc.want) {
				t.Errorf("changed %v (all %v), want %v", ids, all, tc.want)
			}
		})
	}
}
