package frontend

import (
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// An admin's rollback whose answer was lost is sent again before the cache shows the first one.
// The retry's write carries the resourceVersion the cache has, so the API server refuses it (409:
// the first write changed the pod) and the rollback is decided again on the live pod, which
// carries this very rollback's intent. Before, that read as "an upgrade in flight" (409); now it
// answers "upgrading" with the pod the first write named, as a retried upgrade does ("requested
// already"), and writes nothing more. A rollback to another version is still refused.
func TestARetriedRollbackAnswersItsOwnIntent(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "1.5", t0, ready))
	svc := api.service(t, api.snapshot(t, "ws-a1"), func(c *Config) { c.History = stubHistory{} })

	first, err := svc.Rollback(adminCtx, "a1", "1.0")
	if err != nil || first.Status != "upgrading" || first.PodName == "" {
		t.Fatalf("Rollback() = %+v, %v", first, err)
	}
	written := api.get(t, "ws-a1")
	again, err := svc.Rollback(adminCtx, "a1", "1.0")
	if err != nil {
		t.Fatalf("the retried rollback: %v (%s), want the first one's answer", err, CodeOf(err))
	}
	if again.Status != "upgrading" || again.PodName != first.PodName || again.To != "1.0" || again.From != "1.5" {
		t.Errorf("the retried rollback = %+v, want upgrading from 1.5 to 1.0 with pod %s", again, first.PodName)
	}
	if p := api.get(t, "ws-a1"); p.ResourceVersion != written.ResourceVersion {
		t.Errorf("the retried rollback wrote the pod again (resourceVersion %s, then %s)", written.ResourceVersion, p.ResourceVersion)
	}
	if _, err := svc.Rollback(adminCtx, "a1", "0.9"); CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), "upgrade in flight") {
		t.Errorf("a rollback to another version while this one is in flight: %v, want a Conflict (upgrade in flight)", err)
	}
	if got := api.get(t, "ws-a1").Annotations[workspace.AnnTargetVersion]; got != "1.0" {
		t.Errorf("target version %q after the refused rollback, want 1.0", got)
	}
}

// The retry comes once the controller has created the rollback's pod: the old pod still carries
// the intent, the new pod (version 1.0, upgrade-from the old one) is not Ready yet. The retry
// answers "upgrading" with that pod; an owner's upgrade intent (no target version, not pinned) is
// still "an upgrade in flight" to a rollback.
func TestARetriedRollbackAnswersItsOwnUpgradeInFlight(t *testing.T) {
	api := newLiveAPI(t)
	old := api.create(t, pod("ws-a1", "alice", "a1", "1.5", t0, ready, annotated(
		workspace.AnnUpgradeRequested, "2026-03-01T10:00:00Z", workspace.AnnUpgradePod, "ws-a1-v1-0",
		workspace.AnnTargetVersion, "1.0", workspace.AnnPinned, "true")))
	api.create(t, pod("ws-a1-v1-0", "alice", "a1", "1.0", t0.Add(1), annotated(
		workspace.AnnUpgradeFrom, "ws-a1", workspace.AnnUpgradeFromUID, string(old.UID), workspace.AnnUpgradeFromVersion, "1.5",
		workspace.AnnPinned, "true")))
	api.create(t, pod("ws-b1", "alice", "b1", "1.5", t0, ready, annotated(
		workspace.AnnUpgradeRequested, "2026-03-01T10:00:00Z", workspace.AnnUpgradePod, "ws-b1-v2-0")))
	svc := api.service(t, api.snapshot(t, "ws-a1", "ws-a1-v1-0", "ws-b1"), func(c *Config) { c.History = stubHistory{} })

	r, err := svc.Rollback(adminCtx, "a1", "1.0")
	if err != nil || r.Status != "upgrading" || r.PodName != "ws-a1-v1-0" {
		t.Errorf("the retried rollback with its pod created: %+v, %v; want upgrading with pod ws-a1-v1-0", r, err)
	}
	if _, err := svc.Rollback(adminCtx, "b1", "1.0"); CodeOf(err) != CodeConflict {
		t.Errorf("a rollback during the owner's upgrade: %v, want a Conflict (upgrade in flight)", err)
	}
}
