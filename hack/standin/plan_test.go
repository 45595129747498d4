package standin

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func testPod(name, ip string, phase corev1.PodPhase, ann map[string]string) *corev1.Pod {
	a := map[string]string{
		workspace.AnnOwner:           "jane@example.com",
		workspace.AnnTemplateVersion: "1.0.0",
		workspace.AnnWorkspaceName:   "Jane's demo",
		workspace.AnnWorkspacePort:   "8080",
		workspace.AnnPreviewPort:     "3000",
	}
	for k, v := range ann {
		if v == "-" {
			delete(a, k)
			continue
		}
		a[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: "uid-name",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo", workspace.LabelTemplate: "node",
			},
			Annotations: a,
		},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip},
	}
}

func TestPlan(t *testing.T) {
	deleting := testPod("p", "127.1.0.5", corev1.PodRunning, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	notWorkspace := testPod("p", "127.1.0.5", corev1.PodRunning, nil)
	notWorkspace.Labels[workspace.LabelType] = "other"
	older := testPod("older", "127.1.0.5", corev1.PodRunning, nil)
	older.CreationTimestamp = metav1.NewTime(older.CreationTimestamp.Add(-time.Minute))

	tests := []struct {
		name      string
		pods      []*corev1.Pod
		wantAddrs map[string]Role
		wantSkips int
		wantPod   string // when set, every backend plays this pod
	}{
		{
			name:      "a Running pod with a loopback IP is served on its workspace and preview ports",
			pods:      []*corev1.Pod{testPod("p", "127.1.0.5", corev1.PodRunning, nil)},
			wantAddrs: map[string]Role{"127.1.0.5:8080": RoleWorkspace, "127.1.0.5:3000": RolePreview},
		},
		{
			name:      "a pod without a preview port is served on its workspace port only",
			pods:      []*corev1.Pod{testPod("p", "127.1.0.5", corev1.PodRunning, map[string]string{workspace.AnnPreviewPort: "-"})},
			wantAddrs: map[string]Role{"127.1.0.5:8080": RoleWorkspace},
		},
		{
			name:      "the same port for workspace and preview is one listener, the workspace's",
			pods:      []*corev1.Pod{testPod("p", "127.1.0.5", corev1.PodRunning, map[string]string{workspace.AnnPreviewPort: "8080"})},
			wantAddrs: map[string]Role{"127.1.0.5:8080": RoleWorkspace},
		},
		{
			name: "Pending, Succeeded and Failed pods and pods without an IP are not served",
			pods: []*corev1.Pod{
				testPod("a", "127.1.0.5", corev1.PodPending, nil),
				testPod("b", "127.1.0.6", corev1.PodSucceeded, nil),
				testPod("c", "127.1.0.7", corev1.PodFailed, nil),
				testPod("d", "", corev1.PodRunning, nil),
			},
			wantAddrs: map[string]Role{},
		},
		{
			name:      "a pod being deleted is not served (its container got SIGTERM)",
			pods:      []*corev1.Pod{deleting},
			wantAddrs: map[string]Role{},
		},
		{
			name:      "a pod without the workspace label is not served",
			pods:      []*corev1.Pod{notWorkspace},
			wantAddrs: map[string]Role{},
		},
		{
			name: "a pod IP outside 127.0.0.0/8 is refused with a reason",
			pods: []*corev1.Pod{
				testPod("a", "10.0.0.5", corev1.PodRunning, nil),
				testPod("b", "::1", corev1.PodRunning, nil),
				testPod("c", "::ffff:127.1.0.5", corev1.PodRunning, nil),
				testPod("d", "0.0.0.0", corev1.PodRunning, nil),
			},
			wantAddrs: map[string]Role{},
			wantSkips: 4,
		},
		{
			name:      "a port annotation that is not a port is refused with a reason; the other port is served",
			pods:      []*corev1.Pod{testPod("p", "127.1.0.5", corev1.PodRunning, map[string]string{workspace.AnnWorkspacePort: "http"})},
			wantAddrs: map[string]Role{"127.1.0.5:3000": RolePreview},
			wantSkips: 1,
		},
		{
			name:      "a pod without port annotations is refused with a reason",
			pods:      []*corev1.Pod{testPod("p", "127.1.0.5", corev1.PodRunning, map[string]string{workspace.AnnWorkspacePort: "-", workspace.AnnPreviewPort: "-"})},
			wantAddrs: map[string]Role{},
			wantSkips: 1,
		},
		{
			name:      "two pods on one address: the older keeps it",
			pods:      []*corev1.Pod{testPod("newer", "127.1.0.5", corev1.PodRunning, nil), older},
			wantAddrs: map[string]Role{"127.1.0.5:8080": RoleWorkspace, "127.1.0.5:3000": RolePreview},
			wantSkips: 2,
			wantPod:   "older",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, skips := Plan(tc.pods)
			if len(want) != len(tc.wantAddrs) {
				t.Fatalf("backends %v, want addresses %v", want, tc.wantAddrs)
			}
			for addr, role := range tc.wantAddrs {
				b, ok := want[addr]
				if !ok || b.Role != role || b.Addr != addr {
					t.Fatalf("backend %s = %+v, want role %s", addr, b, role)
				}
			}
			if len(skips) != tc.wantSkips {
				t.Fatalf("skips %+v, want %d", skips, tc.wantSkips)
			}
			for _, b := range want {
				if tc.wantPod != "" && b.Pod != tc.wantPod {
					t.Fatalf("%s served for %s, want %s", b.Addr, b.Pod, tc.wantPod)
				}
			}
		})
	}
}

func TestPlanCopiesTheWorkload(t *testing.T) {
	want, _ := Plan([]*corev1.Pod{testPod("ws-demo-abc", "127.1.0.9", corev1.PodRunning, nil)})
	got := want["127.1.0.9:8080"].Workload
	exp := Workload{Namespace: "ns", Pod: "ws-demo-abc", UID: "uid-name", Workspace: "demo", Name: "Jane's demo",
		Owner: "jane@example.com", Template: "node", TemplateVersion: "1.0.0"}
	if got != exp {
		t.Fatalf("workload %+v, want %+v", got, exp)
	}
}
