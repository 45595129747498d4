package workspace

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestDescribe(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name   string
		pods   []*corev1.Pod
		latest string
		check  func(t *testing.T, got Info)
	}{
		{
			name: "ready workspace on the latest version", pods: []*corev1.Pod{running("ws-jane-demo", t0)}, latest: "1.0.0",
			check: func(t *testing.T, got Info) {
				want := Info{Namespace: "default", ID: "demo", Name: "Demo", Owner: "jane", UserLabel: "jane", Template: "node", TemplateVersion: "1.0.0",
					LatestTemplateVersion: "1.0.0", Status: Status{Phase: PhaseReady, Reason: ReasonRunning, Message: "pod ws-jane-demo is ready"},
					ActivePod: "ws-jane-demo", WorkspacePath: "/ws/jane/demo/", PreviewPath: "/preview/jane/demo/", CreatedAt: t0}
				if got != want {
					t.Errorf("Describe() =\n%+v\nwant\n%+v", got, want)
				}
			},
		},
		{
			name: "outdated workspace with a failed upgrade keeps the error", latest: "2.0.0",
			pods: []*corev1.Pod{annotate(running("a", t0), AnnLastUpgradeError, "Upgrade failed at 2026-03-01T10:10:00Z: ErrImagePull: not found")},
			check: func(t *testing.T, got Info) {
				if !got.IsOutdated || got.LatestTemplateVersion != "2.0.0" || got.LastUpgradeError == "" || got.UpgradePod != "" {
					t.Errorf("Describe() = %+v", got)
				}
			},
		},
		{
			name: "unknown latest version is never outdated", latest: "", pods: []*corev1.Pod{running("a", t0)},
			check: func(t *testing.T, got Info) {
				if got.IsOutdated {
					t.Errorf("IsOutdated = true with no latest version")
				}
			},
		},
		{
			name: "upgrade intent names its target pod", latest: "2.0.0",
			pods: []*corev1.Pod{annotate(running("a", t0), AnnUpgradeRequested, "true", AnnUpgradePod, "a-up-xyz12")},
			check: func(t *testing.T, got Info) {
				if got.UpgradePod != "a-up-xyz12" || got.Phase != PhaseUpgrading || got.ActivePod != "a" {
					t.Errorf("Describe() = %+v", got)
				}
			},
		},
		{
			name: "side-by-side upgrade in flight: old pod active, new pod reported, oldest creation time", latest: "2.0.0",
			pods: []*corev1.Pod{running("a", t0), upgraded(scheduled("b", t0.Add(time.Minute)), "a")},
			check: func(t *testing.T, got Info) {
				if got.ActivePod != "a" || got.UpgradePod != "b" || !got.CreatedAt.Equal(t0) || got.TemplateVersion != "1.0.0" {
					t.Errorf("Describe() = %+v", got)
				}
			},
		},
		{
			name: "finished upgrade: the new pod is active and up to date", latest: "2.0.0",
			pods: []*corev1.Pod{deleting(running("a", t0), now), upgraded(running("b", t0.Add(time.Minute)), "a")},
			check: func(t *testing.T, got Info) {
				if got.ActivePod != "b" || got.UpgradePod != "" || got.IsOutdated || got.Phase != PhaseReady {
					t.Errorf("Describe() = %+v", got)
				}
			},
		},
		{
			name: "maintenance value is reported, and a hashed user label is derived when the label is missing",
			pods: []*corev1.Pod{with(annotate(running("a", t0), AnnMaintenance, "backup", AnnOwner, "auth0|5f1c"), func(p *corev1.Pod) {
				delete(p.Labels, LabelUserSub)
				delete(p.Annotations, AnnWorkspaceName)
			})},
			check: func(t *testing.T, got Info) {
				if got.Maintenance != "backup" || got.UserLabel != UserLabel("auth0|5f1c") || got.Name != "demo" || got.Phase != PhaseUnavailable {
					t.Errorf("Describe() = %+v", got)
				}
			},
		},
		{
			name: "no pods is the zero Info", pods: nil,
			check: func(t *testing.T, got Info) {
				if got != (Info{}) {
					t.Errorf("Describe(nil) = %+v", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, Describe(tt.pods, tt.latest, now)) })
	}
}

func TestDescribeJSONIsLowerCamelAndFlat(t *testing.T) {
	info := Describe([]*corev1.Pod{annotate(running("a", t0), AnnUpgradeRequested, "true", AnnUpgradePod, "a-up-1")}, "2.0.0", t0)
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "name", "owner", "userLabel", "template", "templateVersion", "latestTemplateVersion",
		"isOutdated", "phase", "reason", "message", "activePod", "workspacePath", "previewPath", "upgradePod", "createdAt"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON %s has no key %q", b, k)
		}
	}
}

func BenchmarkDescribe(b *testing.B) {
	pods := []*corev1.Pod{running("a", t0)}
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		Describe(pods, "1.0.0", now)
	}
}
