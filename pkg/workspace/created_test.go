package workspace

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCreatedAtIsTheWorkspacesAgeNotThePods(t *testing.T) {
	own := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		value *string
		want  time.Time
	}{
		{name: "a pod without the key counts from its own creation", want: own},
		{name: "a pod carrying an earlier creation is as old as its workspace", value: ptr("2025-12-01T00:00:00Z"), want: time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)},
		{name: "a value after the pod's own creation is not believed", value: ptr("2026-05-01T00:00:00Z"), want: own},
		{name: "a value that does not parse counts from the pod's own creation", value: ptr("yesterday"), want: own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(own)}}
			if tc.value != nil {
				pod.Annotations = map[string]string{AnnWorkspaceCreatedAt: *tc.value}
			}
			if got := CreatedAt(pod); !got.Equal(tc.want) {
				t.Fatalf("CreatedAt = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCarryCreatedAtKeepsTheFirstPodsCreation: every pod made from another (an upgrade, then a
// stopped copy of the upgraded pod) carries the creation of the workspace's first pod, which
// carried none.
func TestCarryCreatedAtKeepsTheFirstPodsCreation(t *testing.T) {
	first := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)))}}
	upgraded := &corev1.Pod{}
	CarryCreatedAt(upgraded, first)
	upgraded.CreationTimestamp = metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) // the API server's
	stopped := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"other": "kept"}}}
	CarryCreatedAt(stopped, upgraded)
	stopped.CreationTimestamp = metav1.NewTime(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	for _, p := range []*corev1.Pod{upgraded, stopped} {
		if got := p.Annotations[AnnWorkspaceCreatedAt]; got != "2026-01-02T02:04:05Z" {
			t.Fatalf("%s = %q, want the first pod's creation in UTC, 2026-01-02T02:04:05Z", AnnWorkspaceCreatedAt, got)
		}
	}
	if got, want := CreatedAt(stopped), time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("CreatedAt of the stopped copy = %v, want %v", got, want)
	}
	if stopped.Annotations["other"] != "kept" {
		t.Fatalf("CarryCreatedAt dropped another annotation: %v", stopped.Annotations)
	}
}
