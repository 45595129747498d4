package frontend

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Maintenance is an operator's decision: a user's upgrade does not lift it (issue: the owner's
// upgrade of a workspace in maintenance came back Ready with no maintenance).
func TestUpgradeOfAWorkspaceInMaintenance(t *testing.T) {
	inMaint := annotated(workspace.AnnMaintenance, "disk migration")
	pods := []*corev1.Pod{
		pod("ws-a1", "alice", "a1", "1.0", t0, ready, inMaint),
		pod("ws-a2", "alice", "a2", "1.0", t0, ready),
	}
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	intent := func(svc *Service, name string) (string, bool) {
		var p corev1.Pod
		if err := svc.cfg.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		v, ok := p.Annotations[workspace.AnnUpgradeRequested]
		return v, ok
	}
	for path, svc := range services(t, pods...) {
		t.Run(path+": the owner's upgrade is refused with a conflict that says why and whom to ask", func(t *testing.T) {
			_, err := svc.Upgrade(alice, "a1")
			if CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), "maintenance") || !strings.Contains(err.Error(), "disk migration") || !strings.Contains(err.Error(), "admin") {
				t.Fatalf("error %v, want a Conflict naming the maintenance", err)
			}
			if _, ok := intent(svc, "ws-a1"); ok {
				t.Errorf("a refused upgrade wrote its intent")
			}
		})
	}
	for path, svc := range services(t, pods...) {
		t.Run(path+": an admin's upgrade is recorded (the controller keeps the maintenance on the new pod)", func(t *testing.T) {
			r, err := svc.Upgrade(admin, "a1")
			if err != nil || r.Status != "upgrading" {
				t.Fatalf("Upgrade() = %+v, %v", r, err)
			}
			if _, ok := intent(svc, "ws-a1"); !ok {
				t.Errorf("no intent written")
			}
			var p corev1.Pod
			_ = svc.cfg.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "ws-a1"}, &p)
			if p.Annotations[workspace.AnnMaintenance] != "disk migration" {
				t.Errorf("the upgrade request touched the maintenance: %v", p.Annotations)
			}
			if r.PodName != workspace.NextPodName(&p, "2.0") {
				t.Errorf("podName %q is not the name the controller gives the new pod (%q)", r.PodName, workspace.NextPodName(&p, "2.0"))
			}
		})
	}
	for path, svc := range services(t, pods...) {
		t.Run(path+": upgrade-all skips it and says so", func(t *testing.T) {
			rs, err := svc.UpgradeAll(admin)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]UpgradeResult{}
			for _, r := range rs {
				got[r.ID] = r
			}
			if r := got["a1"]; r.Status != "skipped" || !strings.Contains(r.Error, "maintenance") {
				t.Errorf("a1: %+v, want skipped for maintenance", r)
			}
			if r := got["a2"]; r.Status != "upgrading" {
				t.Errorf("a2: %+v, want upgrading", r)
			}
			if _, ok := intent(svc, "ws-a1"); ok {
				t.Errorf("upgrade-all wrote an intent on a workspace in maintenance")
			}
		})
	}
}

func TestSetMaintenanceAnswersWithThePhaseAfterItsWrite(t *testing.T) {
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	svc := services(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready))["per-call"]
	w, err := svc.SetMaintenance(admin, "a1", "disk migration")
	if err != nil {
		t.Fatal(err)
	}
	if w.Phase != workspace.PhaseUnavailable || w.Maintenance != "disk migration" {
		t.Errorf("after setting maintenance: phase %s, maintenance %q", w.Phase, w.Maintenance)
	}
	w, err = svc.SetMaintenance(admin, "a1", "")
	if err != nil {
		t.Fatal(err)
	}
	if w.Phase != workspace.PhaseReady || w.Maintenance != "" {
		t.Errorf("after lifting maintenance: phase %s, maintenance %q", w.Phase, w.Maintenance)
	}
}

// An upgrade started with kubectl whose Recreate has already removed the old pod is still
// "upgrading" (with the new pod's name), never "upToDate".
func TestUpgradeAnswersUpgradingWhileARecreateIsInFlight(t *testing.T) {
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	up := pod("ws-a1-up", "alice", "a1", "2.0", t0, annotated(
		workspace.AnnUpgradeFrom, "ws-a1", workspace.AnnUpgradeFromUID, "uid-ws-a1", workspace.AnnUpgradeFromVersion, "1.0",
		workspace.AnnUpgradeStrategy, workspace.StrategyRecreate, workspace.AnnUpgradeStartedAt, t0.Format("2006-01-02T15:04:05Z07:00")))
	for path, svc := range services(t, up) {
		t.Run(path, func(t *testing.T) {
			r, err := svc.Upgrade(alice, "a1")
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != "upgrading" || r.PodName != "ws-a1-up" || r.From != "1.0" || r.To != "2.0" {
				t.Errorf("Upgrade() = %+v, want upgrading to pod ws-a1-up from 1.0 to 2.0", r)
			}
		})
	}
}
