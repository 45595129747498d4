package frontend

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Decisions the front end's cache may be behind on, against a real API server. The cache is a
// snapshot taken before a write: it shows the workspace as it was a moment ago.

var (
	aliceCtx = auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	adminCtx = auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
)

// Stop, then Start a moment later, before the cache has seen the stop: the start lifts it. Before,
// Start read "not stopped" from the cache, answered 202 with the workspace as it was, wrote
// nothing, and the workspace stayed stopped.
func TestStartRightAfterStopLiftsTheStop(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready))
	svc := api.service(t, api.snapshot(t, "ws-a1"), nil)

	if _, err := svc.Stop(aliceCtx, "a1"); err != nil {
		t.Fatal(err)
	}
	if v := api.get(t, "ws-a1").Annotations[workspace.AnnStopRequested]; !strings.HasPrefix(v, "stopped by its owner") {
		t.Fatalf("after the stop the pod has %s=%q", workspace.AnnStopRequested, v)
	}
	w, err := svc.Start(aliceCtx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := api.get(t, "ws-a1").Annotations[workspace.AnnStopRequested]; ok {
		t.Errorf("Start answered %s but the pod still has %s=%q: the workspace stays stopped", w.Phase, workspace.AnnStopRequested, v)
	}
	if w.Phase == workspace.PhaseStopped {
		t.Errorf("Start answered phase %s (%s), want the workspace as the start leaves it", w.Phase, w.Message)
	}
}

// The mirror: Start, then Stop before the cache has seen the start. Before, Stop read "stopped
// already" from the cache and wrote nothing; the workspace kept running.
func TestStopRightAfterStartKeepsTheStop(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready, annotated(workspace.AnnStopRequested, "stopped by its owner at 2026-03-01 10:00 UTC")))
	svc := api.service(t, api.snapshot(t, "ws-a1"), nil)

	if _, err := svc.Start(aliceCtx, "a1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := api.get(t, "ws-a1").Annotations[workspace.AnnStopRequested]; ok {
		t.Fatalf("after the start the pod still has %s=%q", workspace.AnnStopRequested, v)
	}
	w, err := svc.Stop(aliceCtx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if v := api.get(t, "ws-a1").Annotations[workspace.AnnStopRequested]; !strings.HasPrefix(v, "stopped by its owner") {
		t.Errorf("Stop answered %s but the pod has %s=%q: the workspace keeps running", w.Phase, workspace.AnnStopRequested, v)
	}
	if w.Phase != workspace.PhaseStopped {
		t.Errorf("Stop answered phase %s (%s), want Stopped", w.Phase, w.Message)
	}
}

// An admin rolls a workspace back (target 1.0, pinned); the owner upgrades it before the cache
// shows the rollback. Before, the upgrade answered "upgrading", removed the target and left the
// pin: the workspace went to the latest version while pinned, and the rollback that was answered
// 202 was lost. Now the upgrade's write carries the resourceVersion it decided on, the API server
// refuses it (409), and the upgrade, decided again on the pod as it is, answers with the
// rollback in flight and writes nothing.
func TestUpgradeDoesNotOverwriteAnUnseenRollback(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "1.5", t0, ready))
	svc := api.service(t, api.snapshot(t, "ws-a1"), func(c *Config) { c.History = stubHistory{} })

	rb, err := svc.Rollback(adminCtx, "a1", "1.0")
	if err != nil || rb.Status != "upgrading" {
		t.Fatalf("Rollback() = %+v, %v", rb, err)
	}
	r, err := svc.Upgrade(aliceCtx, "a1")
	if err != nil {
		t.Fatalf("the owner's upgrade during the rollback: %v", err)
	}
	p := api.get(t, "ws-a1")
	if got := p.Annotations[workspace.AnnTargetVersion]; got != "1.0" {
		t.Errorf("target version %q after the owner's upgrade, want the rollback's 1.0 (the pod is pinned=%q)", got, p.Annotations[workspace.AnnPinned])
	}
	if got := p.Annotations[workspace.AnnUpgradePod]; got != rb.PodName {
		t.Errorf("upgrade pod %q, want the rollback's %q", got, rb.PodName)
	}
	if r.Status != "upgrading" || r.PodName != rb.PodName || r.To != "1.0" {
		t.Errorf("Upgrade() = %+v, want the rollback in flight: upgrading to 1.0 with pod %s", r, rb.PodName)
	}
}

// An admin's maintenance, or the owner's pin, set a moment before the owner's upgrade and not in
// the cache yet: the upgrade is refused as it would be on a cache that showed it, and writes
// nothing. An admin's maintenance must survive a user's upgrade.
func TestUpgradeRespectsAnUnseenMaintenanceOrPin(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Service) error
		want string // in the refusal
	}{
		{"an admin's maintenance", func(s *Service) error { _, err := s.SetMaintenance(adminCtx, "a1", "disk migration"); return err }, "in maintenance (\"disk migration\")"},
		{"the owner's pin", func(s *Service) error { _, err := s.SetPinned(aliceCtx, "a1", true); return err }, "pinned"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := newLiveAPI(t)
			api.create(t, pod("ws-a1", "alice", "a1", "1.5", t0, ready))
			svc := api.service(t, api.snapshot(t, "ws-a1"), nil)
			if err := tc.set(svc); err != nil {
				t.Fatal(err)
			}
			r, err := svc.Upgrade(aliceCtx, "a1")
			if CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Upgrade() = %+v, %v; want a Conflict saying %q", r, err, tc.want)
			}
			if v, ok := api.get(t, "ws-a1").Annotations[workspace.AnnUpgradeRequested]; ok {
				t.Errorf("the upgrade wrote its intent (%q) past %s", v, tc.name)
			}
		})
	}
}

// Upgrade-all where the cache is current writes each workspace once and reads nothing more (the
// precondition rides on the write it always made); a workspace whose maintenance the cache has
// not seen costs one refused write and one read, and is skipped.
func TestUpgradeAllWritesOnceWhereTheCacheIsCurrent(t *testing.T) {
	api := newLiveAPI(t)
	const n = 12
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("ws-w%02d", i)
		api.create(t, pod(names[i], "alice", fmt.Sprintf("w%02d", i), "1.5", t0, ready))
	}
	svc := api.service(t, api.snapshot(t, names...), nil)
	if _, err := svc.SetMaintenance(adminCtx, "w03", "disk migration"); err != nil {
		t.Fatal(err)
	}
	gets, patches := api.count(http.MethodGet), api.count(http.MethodPatch)
	rs, err := svc.UpgradeAll(adminCtx)
	if err != nil {
		t.Fatal(err)
	}
	if got := api.count(http.MethodPatch) - patches; got != n {
		t.Errorf("upgrade-all sent %d patches for %d workspaces, want %d (one each; the one in maintenance refused)", got, n, n)
	}
	if got := api.count(http.MethodGet) - gets; got != 1 {
		t.Errorf("upgrade-all sent %d reads, want 1 (the workspace whose pod changed)", got)
	}
	for _, r := range rs {
		want := "upgrading"
		if r.ID == "w03" {
			want = "skipped"
		}
		if r.Status != want {
			t.Errorf("%s: %+v, want %s", r.ID, r, want)
		}
	}
	if v, ok := api.get(t, "ws-w03").Annotations[workspace.AnnUpgradeRequested]; ok {
		t.Errorf("upgrade-all wrote an intent (%q) on the workspace put in maintenance a moment before", v)
	}
}

// A template's rollback whose template history cannot be read (the API server is unreachable)
// answers 503, to be retried, not 404 "not kept": a rollback of one workspace already did. A
// version the history does not keep stays 404.
func TestRollbackTemplateUnavailableIs503(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "1.5", t0, ready))
	unreachable := api.unreachableClient(t)
	for name, reader := range map[string]client.Reader{"unreachable": unreachable, "reachable": api.k8s} {
		svc := api.service(t, api.snapshot(t, "ws-a1"), func(c *Config) {
			c.History = &templates.History{Reader: reader, Namespace: api.ns}
		})
		want := CodeUnavailable
		if name == "reachable" {
			want = CodeNotFound
		}
		_, err := svc.RollbackTemplate(adminCtx, "python", "1.0")
		if CodeOf(err) != want {
			t.Errorf("%s history: RollbackTemplate() error %v (%s), want %s", name, err, CodeOf(err), want)
		}
		_, err = svc.Rollback(adminCtx, "a1", "1.0")
		if CodeOf(err) != want {
			t.Errorf("%s history: Rollback() error %v (%s), want %s", name, err, CodeOf(err), want)
		}
	}
	if v, ok := api.get(t, "ws-a1").Annotations[workspace.AnnUpgradeRequested]; ok {
		t.Errorf("a rollback that could not read its version wrote an intent (%q)", v)
	}
}

// Three stops of the owner's workspaces at once with --max-stopped-workspaces-per-user=1: one is
// recorded, the others are refused (429). Before, each stop counted the pods and wrote nothing
// to hold its slot, so all three could see room and all three workspaces ended up stopped.
func TestConcurrentStopsThroughTheFrontEndRespectTheStoppedLimit(t *testing.T) {
	api := newLiveAPI(t)
	ids := []string{"a1", "a2", "a3"}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = "ws-" + id
		api.create(t, pod(names[i], "alice", id, "2.0", t0, ready))
	}
	quota := spawner.New(api.k8s, api.k8s, templates.NewStatic(), spawner.Options{Namespace: api.ns, MaxPerUser: 10, MaxStoppedPerUser: 1})
	svc := api.service(t, api.snapshot(t, names...), func(c *Config) { c.Quota = quota })

	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { _, errs[i] = svc.Stop(aliceCtx, id) })
	}
	wg.Wait()
	ok, refused := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case CodeOf(err) == CodeQuotaExceeded && strings.Contains(err.Error(), "limit is 1 per user"):
			refused++
		default:
			t.Errorf("stop of %s: %v", ids[i], err)
		}
	}
	stopped := 0
	for _, n := range names {
		if _, ok := api.get(t, n).Annotations[workspace.AnnStopRequested]; ok {
			stopped++
		}
	}
	if ok != 1 || refused != 2 || stopped != 1 {
		t.Errorf("%d stops recorded, %d refused, %d workspaces stopped; want 1, 2 and 1 with a limit of 1", ok, refused, stopped)
	}
}

// An admin's maintenance set a moment before the owner's delete, not in the cache yet: the delete
// is refused as it would be on a cache that showed it, and no pod is deleted (a spawn of the same
// id would mount the claims on a fresh pod without the maintenance). An admin's delete goes
// through.
func TestDeleteRespectsAnUnseenMaintenance(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready))
	svc := api.service(t, api.snapshot(t, "ws-a1"), nil)
	if _, err := svc.SetMaintenance(adminCtx, "a1", "disk migration"); err != nil {
		t.Fatal(err)
	}
	r, err := svc.Delete(aliceCtx, "a1")
	if CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), "in maintenance (\"disk migration\")") {
		t.Fatalf("the owner's Delete() = %+v, %v; want a Conflict naming the maintenance", r, err)
	}
	if p := api.get(t, "ws-a1"); p.DeletionTimestamp != nil {
		t.Fatalf("the refused delete deleted pod %s", p.Name)
	}
	if r, err := svc.Delete(adminCtx, "a1"); err != nil || len(r.Pods) != 1 {
		t.Fatalf("the admin's Delete() = %+v, %v", r, err)
	}
}

// The owner's upgrade is accepted (202) and waits for a slot; an admin takes the workspace out of
// service before the cache shows the request. The maintenance withdraws it (the controller would
// carry it out during the maintenance), and the owner's next upgrade is refused.
func TestMaintenanceWithdrawsAnUnseenUpgradeRequest(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "1.5", t0, ready))
	svc := api.service(t, api.snapshot(t, "ws-a1"), nil)
	if r, err := svc.Upgrade(aliceCtx, "a1"); err != nil || r.Status != "upgrading" {
		t.Fatalf("Upgrade() = %+v, %v", r, err)
	}
	w, err := svc.SetMaintenance(adminCtx, "a1", "disk migration")
	if err != nil {
		t.Fatal(err)
	}
	p := api.get(t, "ws-a1")
	for _, k := range []string{workspace.AnnUpgradeRequested, workspace.AnnUpgradePod} {
		if v, ok := p.Annotations[k]; ok {
			t.Errorf("the owner's request survived the maintenance: %s=%q", k, v)
		}
	}
	if p.Annotations[workspace.AnnMaintenance] != "disk migration" {
		t.Errorf("maintenance %q, want \"disk migration\"", p.Annotations[workspace.AnnMaintenance])
	}
	if !strings.Contains(w.Message, "withdrawn") {
		t.Errorf("the answer (%s: %s) does not say the request was withdrawn", w.Phase, w.Message)
	}
	if _, err := svc.Upgrade(aliceCtx, "a1"); CodeOf(err) != CodeConflict {
		t.Errorf("the owner's upgrade after the maintenance: %v, want a Conflict", err)
	}
}
