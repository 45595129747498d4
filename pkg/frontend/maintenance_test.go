package frontend

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// A Recreate upgrade deletes the old pod in the pass that creates the new one. While the front
// end's cache still shows the old pod live and not yet the new one, a setting written to the old
// pod alone is lost (the controller carries nothing from a terminating pod) although the API
// answered success: the write reaches the new pod too, found by the API server's list.
func TestSettingsReachThePodTheCacheHasNotSeenYet(t *testing.T) {
	old := pod("ws-a1", "alice", "a1", "1.0", t0, ready)
	going := old.DeepCopy()
	deletedAt(t0.Add(time.Hour))(going)
	going.Finalizers = []string{"test/hold"}
	next := pod(workspace.NextPodName(old, "2.0"), "alice", "a1", "2.0", t0.Add(time.Hour), annotated(
		workspace.AnnUpgradeFrom, old.Name, workspace.AnnUpgradeFromUID, string(old.UID), workspace.AnnUpgradeFromVersion, "1.0",
		workspace.AnnUpgradeStrategy, workspace.StrategyRecreate))
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	tests := []struct {
		name string
		do   func(*Service) error
		key  string
		want string // prefix of the value the new pod must carry
	}{
		{"an admin's maintenance", func(s *Service) error { _, err := s.SetMaintenance(admin, "a1", "disk migration"); return err }, workspace.AnnMaintenance, "disk migration"},
		{"the owner's stop", func(s *Service) error { _, err := s.Stop(alice, "a1"); return err }, workspace.AnnStopRequested, "stopped by its owner"},
		{"the owner's pin", func(s *Service) error { _, err := s.SetPinned(alice, "a1", true); return err }, workspace.AnnPinned, "true"},
		{"the owner's update policy", func(s *Service) error {
			_, err := s.SetUpdatePolicy(alice, "a1", UpdatePolicyInput{Policy: "on-start"})
			return err
		}, workspace.AnnUpdatePolicy, "on-start"},
	}
	worlds := map[string][]*corev1.Pod{"old pod terminating": {going, next}, "old pod gone": {next}}
	for world, inAPI := range worlds {
		for _, tc := range tests {
			t.Run(world+": "+tc.name, func(t *testing.T) {
				api := fakeCache(inAPI...)
				svc := servicesWith(t, func(c *Config) { c.Client, c.APIReader = api, api }, old)["per-call"]
				if err := tc.do(svc); err != nil {
					t.Fatal(err)
				}
				var p corev1.Pod
				if err := api.Get(context.Background(), client.ObjectKeyFromObject(next), &p); err != nil {
					t.Fatal(err)
				}
				if v := p.Annotations[tc.key]; !strings.HasPrefix(v, tc.want) {
					t.Errorf("the new pod has %s=%q, want %q: the write went only to the old pod the cache showed", tc.key, v, tc.want)
				}
			})
		}
	}
}

// An upgrade request that a person withdrew by removing only nogoo9/upgrade-requested leaves its
// companions behind (admission keeps a person from removing them). Every intent the API writes
// names every companion, so none of a withdrawn request's is read as this request's: an owner's
// upgrade to the latest does not go to a stale rollback's version, and a person's request is not
// taken for an update policy's (which the policy runner withdraws when the policy no longer
// wants it).
func TestAnIntentWriteClearsTheCompanionsOfAWithdrawnRequest(t *testing.T) {
	stale := annotated(workspace.AnnTargetVersion, "0.9", workspace.AnnAutoUpgrade, "on-start", workspace.AnnUpgradePod, "ws-a1-up-stale")
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	tests := []struct {
		name string
		do   func(*Service) (*UpgradeResult, error)
		want map[string]string // companion -> value after the write ("": absent)
	}{
		{"the owner's upgrade to the latest", func(s *Service) (*UpgradeResult, error) { return s.Upgrade(alice, "a1") }, map[string]string{
			workspace.AnnTargetVersion: "", workspace.AnnAutoUpgrade: ""}},
		{"an admin's rollback", func(s *Service) (*UpgradeResult, error) { return s.Rollback(admin, "a1", "0.5") }, map[string]string{
			workspace.AnnTargetVersion: "0.5", workspace.AnnAutoUpgrade: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := servicesWith(t, func(c *Config) { c.History = stubHistory{} }, pod("ws-a1", "alice", "a1", "1.0", t0, ready, stale))["per-call"]
			r, err := tc.do(svc)
			if err != nil || r.Status != "upgrading" {
				t.Fatalf("= %+v, %v; want upgrading", r, err)
			}
			var p corev1.Pod
			if err := svc.cfg.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "ws-a1"}, &p); err != nil {
				t.Fatal(err)
			}
			if p.Annotations[workspace.AnnUpgradeRequested] == "" || p.Annotations[workspace.AnnUpgradePod] != r.PodName {
				t.Errorf("intent %q, upgrade pod %q; want an intent naming %q", p.Annotations[workspace.AnnUpgradeRequested], p.Annotations[workspace.AnnUpgradePod], r.PodName)
			}
			for k, want := range tc.want {
				if got, ok := p.Annotations[k]; got != want || want == "" && ok {
					t.Errorf("%s = %q (present %v) after the write, want %q", k, got, ok, want)
				}
			}
		})
	}
}

// An admin's maintenance must survive its owner. A delete leaves the claims, and a spawn of the
// same id mounts them on a fresh pod without the maintenance, in the middle of the operator's
// migration: so the owner's delete of a workspace in maintenance is refused, as the owner's
// upgrade is (whatever the annotation's value: present is enough), and touches no pod. An admin
// may delete it. Before, the delete went through.
func TestOwnersDeleteOfAWorkspaceInMaintenanceIsRefused(t *testing.T) {
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	exists := func(t *testing.T, c client.Reader, name string) bool {
		t.Helper()
		err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &corev1.Pod{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, value := range []string{"disk migration", ""} {
		inMaint := annotated(workspace.AnnMaintenance, value)
		for path, svc := range services(t, pod("ws-a1", "alice", "a1", "1.0", t0, ready, inMaint)) {
			t.Run(path+": maintenance="+value+": the owner's delete is a conflict that says why and whom to ask", func(t *testing.T) {
				r, err := svc.Delete(alice, "a1")
				if CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), "in maintenance (\""+value+"\")") ||
					!strings.Contains(err.Error(), "cannot be deleted") || !strings.Contains(err.Error(), "admin") {
					t.Fatalf("Delete() = %+v, %v; want a Conflict naming the maintenance", r, err)
				}
				if !exists(t, svc.cfg.Client, "ws-a1") {
					t.Errorf("the refused delete deleted the pod")
				}
			})
		}
		for _, path := range []string{"views", "per-call"} {
			svc := services(t, pod("ws-a1", "alice", "a1", "1.0", t0, ready, inMaint))[path] // each its own pods: this one deletes
			t.Run(path+": maintenance="+value+": an admin's delete goes through", func(t *testing.T) {
				r, err := svc.Delete(admin, "a1")
				if err != nil || len(r.Pods) != 1 {
					t.Fatalf("Delete() = %+v, %v", r, err)
				}
				if exists(t, svc.cfg.Client, "ws-a1") {
					t.Errorf("the admin's delete left the pod")
				}
			})
		}
	}
	// The cache does not show a maintenance the API server has (set a moment ago): the decision is
	// made on the API server's pods.
	t.Run("a maintenance the cache has not seen yet", func(t *testing.T) {
		api := fakeCache(pod("ws-a1", "alice", "a1", "1.0", t0, ready, annotated(workspace.AnnMaintenance, "disk migration")))
		svc := servicesWith(t, func(c *Config) { c.Client, c.APIReader = api, api }, pod("ws-a1", "alice", "a1", "1.0", t0, ready))["per-call"]
		if _, err := svc.Delete(alice, "a1"); CodeOf(err) != CodeConflict {
			t.Fatalf("Delete() error %v, want a Conflict for the maintenance the API server has", err)
		}
		if !exists(t, api, "ws-a1") {
			t.Errorf("the refused delete deleted the pod")
		}
	})
}

// An owner's upgrade accepted (202) may wait behind --max-concurrent-upgrades. An admin who then
// takes the workspace out of service withdraws it in the same write: the controller would
// otherwise carry it out during the maintenance. An upgrade in flight is left to complete or roll
// back, and a request made under the maintenance (an admin's) stays when the reason changes or
// the maintenance is lifted. Before, the request stayed and the controller upgraded the workspace
// in maintenance.
func TestMaintenanceWithdrawsAnUpgradeNotStartedYet(t *testing.T) {
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	requested := annotated(workspace.AnnUpgradeRequested, "2026-03-01T10:30:00Z", workspace.AnnUpgradePod, "ws-a1-up-abcde")
	waiting := pod("ws-a1", "alice", "a1", "1.0", t0, ready, requested)
	old := pod("ws-a1", "alice", "a1", "1.0", t0, ready, requested)
	inFlight := pod("ws-a1-up-abcde", "alice", "a1", "2.0", t0.Add(time.Minute), annotated(
		workspace.AnnUpgradeFrom, old.Name, workspace.AnnUpgradeFromUID, string(old.UID), workspace.AnnUpgradeFromVersion, "1.0",
		workspace.AnnUpgradeStrategy, "SideBySide", workspace.AnnUpgradeStartedAt, "2026-03-01T10:31:00Z"))
	underMaint := pod("ws-a1", "alice", "a1", "1.0", t0, ready, requested, annotated(workspace.AnnMaintenance, "disk migration"))
	tests := []struct {
		name      string
		cache     []*corev1.Pod // what the front end's cache shows
		api       []*corev1.Pod // what the API server has (nil: as the cache)
		reason    string
		withdrawn bool
	}{
		{"a request waiting for a slot is withdrawn", []*corev1.Pod{waiting}, nil, "disk migration", true},
		{"a request the cache has not seen yet is withdrawn", []*corev1.Pod{pod("ws-a1", "alice", "a1", "1.0", t0, ready)}, []*corev1.Pod{waiting}, "disk migration", true},
		{"an upgrade in flight is left to complete", []*corev1.Pod{old, inFlight}, nil, "disk migration", false},
		{"an admin's request under the maintenance stays when the reason changes", []*corev1.Pod{underMaint}, nil, "disk migration, day 2", false},
		{"an admin's request under the maintenance stays when it is lifted", []*corev1.Pod{underMaint}, nil, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inAPI := tc.api
			if inAPI == nil {
				inAPI = tc.cache
			}
			api := fakeCache(inAPI...)
			svc := servicesWith(t, func(c *Config) { c.Client, c.APIReader = api, api }, tc.cache...)["per-call"]
			w, err := svc.SetMaintenance(admin, "a1", tc.reason)
			if err != nil {
				t.Fatal(err)
			}
			var p corev1.Pod
			if err := api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "ws-a1"}, &p); err != nil {
				t.Fatal(err)
			}
			if v, ok := p.Annotations[workspace.AnnMaintenance]; (tc.reason != "") != ok || v != tc.reason {
				t.Errorf("maintenance %q (present %v) after the write, want %q", v, ok, tc.reason)
			}
			for _, k := range []string{workspace.AnnUpgradeRequested, workspace.AnnUpgradePod} {
				if _, ok := p.Annotations[k]; ok == tc.withdrawn {
					t.Errorf("%s present %v after the write, want %v", k, ok, !tc.withdrawn)
				}
			}
			var up corev1.Pod
			if err := api.Get(context.Background(), client.ObjectKeyFromObject(inFlight), &up); err == nil {
				if up.Annotations[workspace.AnnUpgradeStartedAt] == "" || up.Annotations[workspace.AnnMaintenance] != tc.reason {
					t.Errorf("the upgraded pod in flight has %v: want its start kept and the maintenance", up.Annotations)
				}
			}
			if said := strings.Contains(w.Message, "withdrawn"); said != tc.withdrawn {
				t.Errorf("answer's message %q; want it to say a request was withdrawn: %v", w.Message, tc.withdrawn)
			}
			if tc.withdrawn && (w.UpgradePod != "" || !strings.Contains(w.Message, "to version 2.0")) {
				t.Errorf("answer %+v still shows the withdrawn upgrade, or does not name its version", w)
			}
		})
	}
}
