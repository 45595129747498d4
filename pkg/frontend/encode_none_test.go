package frontend

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestAViewThatCannotBeEncodedAheadIsNotTriedForEveryList: a clock-noted view whose JSON holds the
// note's mark itself (a NUL, here in an update policy a kubectl user wrote) is written at read time; that is
// remembered for its template version, so the lists after the first neither encode it again nor
// count it as missing (at 512 such views every list ran the parallel encoding for nothing).
func TestAViewThatCannotBeEncodedAheadIsNotTriedForEveryList(t *testing.T) {
	now := t0.Add(time.Hour)
	svc, err := New(Config{Namespace: "ns", Templates: stubTemplates{"python": "1.0"}, Now: func() time.Time { return now }, Pods: syncedInformer{}})
	if err != nil {
		t.Fatal(err)
	}
	owner, id := "user-1", "ws-nul"
	svc.views.OnAdd(podcache.Of(pod(workspace.PodName(owner, id), owner, id, "1.0", t0, func(p *corev1.Pod) {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}, annotated(workspace.AnnUpdatePolicy, "disk\x00check"))), true)
	ctx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	l, err := svc.List(ctx, ListOptions{AllUsers: true})
	if err != nil {
		t.Fatal(err)
	}
	e := l.entries[0]
	if e.clock.kind == clockNone || e.clock.kind == clockOpaque {
		t.Fatalf("the view's clock kind is %v: the test needs a clock-noted view", e.clock.kind)
	}
	latest := l.latest[e.template]
	if enc := e.encoding(latest); enc != nil {
		t.Fatalf("encoded ahead although the JSON holds the note's mark: %q", enc.vals)
	}
	if enc := e.enc.Load(); enc == nil || enc.latest != latest || !enc.none {
		t.Errorf("the failed encoding is not remembered for version %s: %+v", latest, enc)
	}
	var b bytes.Buffer
	if err := l.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte(`disk\u0000check`)) || !bytes.Contains(b.Bytes(), []byte("pending for 1h0m0s")) {
		t.Errorf("the view written at read time lost its update policy or its clock note: %s", b.Bytes())
	}
}
