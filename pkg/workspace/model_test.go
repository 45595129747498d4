package workspace

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod(name string, created time.Time, ready bool, ann map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, CreationTimestamp: metav1.NewTime(created), Annotations: ann,
		Labels: map[string]string{LabelType: TypeWorkspace, LabelWorkspaceID: "demo"},
	}}
	if ready {
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.9",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	}
	return p
}

func names(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

func TestNewestFirstAndActive(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	deleting := testPod("ws-old", t0, true, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)}
	tests := []struct {
		name       string
		pods       []*corev1.Pod
		wantOrder  []string
		wantActive string
	}{
		{
			name:       "newer creation time sorts first and a ready newest pod is active",
			pods:       []*corev1.Pod{testPod("ws-a", t0, true, nil), testPod("ws-a-up-zzzzz", t0.Add(time.Second), true, nil)},
			wantOrder:  []string{"ws-a-up-zzzzz", "ws-a"},
			wantActive: "ws-a-up-zzzzz",
		},
		{
			name: "same second: the pod that names the other in upgrade-from is newer, whatever the names",
			pods: []*corev1.Pod{
				testPod("ws-a-up-zzzzz", t0, true, nil),
				testPod("ws-a-up-aaaaa", t0, true, map[string]string{AnnUpgradeFrom: "ws-a-up-zzzzz"}),
			},
			wantOrder:  []string{"ws-a-up-aaaaa", "ws-a-up-zzzzz"},
			wantActive: "ws-a-up-aaaaa",
		},
		{
			name:       "a not-ready newer pod leaves the ready older pod active",
			pods:       []*corev1.Pod{testPod("ws-a", t0, true, nil), testPod("ws-a-up-bbbbb", t0.Add(time.Second), false, nil)},
			wantOrder:  []string{"ws-a-up-bbbbb", "ws-a"},
			wantActive: "ws-a",
		},
		{
			name:       "nothing ready: the newest pod not being deleted is active",
			pods:       []*corev1.Pod{testPod("ws-b", t0, false, nil), testPod("ws-c", t0.Add(-time.Second), false, nil)},
			wantOrder:  []string{"ws-b", "ws-c"},
			wantActive: "ws-b",
		},
		{
			name:       "a ready pod being deleted is not active",
			pods:       []*corev1.Pod{deleting, testPod("ws-new", t0.Add(time.Second), false, nil)},
			wantOrder:  []string{"ws-new", "ws-old"},
			wantActive: "ws-new",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewestFirst(tt.pods)
			if g := names(got); len(g) != len(tt.wantOrder) || g[0] != tt.wantOrder[0] || g[len(g)-1] != tt.wantOrder[len(g)-1] {
				t.Fatalf("order = %v, want %v", g, tt.wantOrder)
			}
			if a := Active(got); a == nil || a.Name != tt.wantActive {
				t.Fatalf("active = %v, want %s", a, tt.wantActive)
			}
		})
	}
	if Active(nil) != nil {
		t.Fatal("Active(nil) should be nil")
	}
}
