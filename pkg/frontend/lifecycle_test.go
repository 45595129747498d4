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
