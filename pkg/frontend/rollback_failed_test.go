package frontend

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestTemplateRollbackReportsAFailedWriteAsFailed: a template's rollback listed a workspace whose
// write failed (the API server answered 500, or could not be reached) as "skipped", the status of
// a deliberate skip (maintenance, an upgrade in flight), while upgrade-all lists the same as
// "failed". It is "failed" now, with the error; a deliberate skip stays "skipped".
func TestTemplateRollbackReportsAFailedWriteAsFailed(t *testing.T) {
	c := fakeCache(podIn("ns", "ws-a", "alice", "a"), podIn("ns", "ws-b", "bob", "b"))
	failing := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if obj.GetName() == "ws-a" {
				return apierrors.NewInternalError(context.DeadlineExceeded)
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})
	svc, err := New(Config{Namespace: "ns", Cache: c, Client: failing, Templates: stubTemplates{"python": "2.0"}, History: stubHistory{}, Now: func() time.Time { return t0.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.RollbackTemplate(adminCtx, "python", "0.9")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resultSummary(res), "ns/a:failed,ns/b:upgrading"; got != want {
		t.Errorf("rollback = %s, want %s (%+v)", got, want, res)
	}
}
