package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestRecreateStartTakesTheOldSpecFromTheCache: the cache keeps the whole spec of a workspace pod
// that carries the upgrade intent and mounts a claim (podcache.KeepsSpec), so a Recreate start
// records the old pod's rollback spec without reading the old pod from the API server (it used
// to read it from the API server's watch cache: one round trip before the create, on the way to
// the volume's release). The recorded spec is the one a read from the API server gives.
func TestRecreateStartTakesTheOldSpecFromTheCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ns, reg, old, _ := outdatedWorkspace(t, c, "kept-spec", "ivy", "lab", corev1.ReadWriteOncePod, false)
	var live corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &live); err != nil {
		t.Fatal(err)
	}
	want, err := upgrade.RollbackSpec(&live)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := upgrade.DecodeRollbackSpec(want)
	if err != nil {
		t.Fatal(err)
	}

	mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()},
		}
	})
	api := &namedReads{Reader: mgr.GetAPIReader()}
	managerSeq.Lock()
	managerSeq.n++
	name := fmt.Sprintf("kept-spec-%d", managerSeq.n)
	managerSeq.Unlock()
	r := &WorkspaceReconciler{Client: c, Reader: mgr.GetCache(), APIReader: api, Templates: reg, Recorder: record.NewFakeRecorder(1000),
		Opts: UpgradeOptions{Name: name}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, mgr)

	newKey := types.NamespacedName{Namespace: ns, Name: workspace.NextPodName(old, "v2")}
	var up corev1.Pod
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Get(ctx, newKey, &up)
		oldErr := c.Get(ctx, client.ObjectKeyFromObject(old), &corev1.Pod{})
		if err == nil && apierrors.IsNotFound(oldErr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: upgraded pod %s: %v; old pod %s: %v (want it created, and the old one deleted)", newKey.Name, err, old.Name, oldErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := api.of(old.Name); n != 0 {
		t.Errorf("the Recreate start read the old pod %d times from the API server, want 0 (the cache kept its spec)", n)
	}
	got, err := upgrade.DecodeRollbackSpec(up.Annotations[workspace.AnnRollbackSpec])
	if err != nil {
		t.Fatalf("upgraded pod's rollback spec: %v", err)
	}
	if string(got) != string(wantJSON) {
		t.Errorf("rollback spec from the cache differs from the one a read from the API server gives:\n got %s\nwant %s", got, wantJSON)
	}
}
