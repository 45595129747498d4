package frontend

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Stop and Start write the intent on the pod and answer with the phase after the write; another
// user may do neither.
func TestStopAndStartRecordTheIntent(t *testing.T) {
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	bob := auth.WithCaller(context.Background(), &auth.Caller{Subject: "bob"})
	svc := services(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready))["per-call"]
	intent := func() string {
		var p corev1.Pod
		if err := svc.cfg.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "ws-a1"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[workspace.AnnStopRequested]
	}

	if _, err := svc.Stop(bob, "a1"); CodeOf(err) != CodeForbidden {
		t.Fatalf("bob stopping alice's workspace: %v, want Forbidden", err)
	}
	w, err := svc.Stop(alice, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if w.Phase != workspace.PhaseStopped || !strings.Contains(w.Message, "stopped by its owner") {
		t.Errorf("after stop: %+v, want phase Stopped saying who stopped it", w.Status)
	}
	if v := intent(); !strings.HasPrefix(v, "stopped by its owner at ") {
		t.Errorf("intent on the pod = %q", v)
	}
	if _, err := svc.Start(bob, "a1"); CodeOf(err) != CodeForbidden {
		t.Fatalf("bob starting alice's workspace: %v, want Forbidden", err)
	}
	w, err = svc.Start(alice, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if w.Phase == workspace.PhaseStopped {
		t.Errorf("after start: still %+v", w.Status)
	}
	if v := intent(); v != "" {
		t.Errorf("intent on the pod after start = %q, want none", v)
	}
}

// startQuota is a LifecycleQuota that records what a start reserved and what its intent was when
// the start released it.
type startQuota struct {
	refuse       error
	reserved     []string // ns/id
	intentAtDone []string // the pod's stop intent when release was called
	doneErr      []error
	intent       func() string
}

func (q *startQuota) ReserveStart(_ context.Context, owner, ns, id string, _ bool) (func(error), error) {
	if q.refuse != nil {
		return nil, q.refuse
	}
	q.reserved = append(q.reserved, ns+"/"+id)
	return func(err error) {
		q.intentAtDone = append(q.intentAtDone, q.intent())
		q.doneErr = append(q.doneErr, err)
	}, nil
}

func (q *startQuota) ReserveStop(context.Context, string, string, string, bool) (func(error), error) {
	return func(error) {}, nil
}

// A start holds its running slot (the spawner's quota ledger) until the stop intent is lifted,
// and only then releases it, when the workspace counts itself; a start the quota refuses writes
// nothing. Before, a start only checked the pods and held nothing, so concurrent starts and
// spawns could each take the last slot.
func TestAStartHoldsItsQuotaSlotUntilTheStopIsLifted(t *testing.T) {
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	stopped := pod("ws-a1", "alice", "a1", "2.0", t0, ready)
	stopped.Annotations[workspace.AnnStopRequested] = "true"
	q := &startQuota{}
	svc := servicesWith(t, func(c *Config) { c.Quota = q }, stopped)["per-call"]
	q.intent = func() string {
		var p corev1.Pod
		if err := svc.cfg.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "ws-a1"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[workspace.AnnStopRequested]
	}

	q.refuse = &spawner.Error{Code: spawner.QuotaExceeded, Message: "alice already has 1 running or pending workspace (b)"}
	if _, err := svc.Start(alice, "a1"); CodeOf(err) != CodeQuotaExceeded {
		t.Fatalf("a start over the limit: %v, want QuotaExceeded", err)
	}
	if v := q.intent(); v != "true" {
		t.Errorf("a refused start wrote the pod: intent %q", v)
	}

	q.refuse = nil
	if _, err := svc.Start(alice, "a1"); err != nil {
		t.Fatal(err)
	}
	if len(q.reserved) != 1 || q.reserved[0] != "ns/a1" {
		t.Errorf("reserved %v, want the slot of ns/a1", q.reserved)
	}
	if len(q.intentAtDone) != 1 || q.intentAtDone[0] != "" || q.doneErr[0] != nil {
		t.Errorf("released with intent %q and error %v; want once, after the intent was lifted, without error", q.intentAtDone, q.doneErr)
	}
}
