package frontend

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
)

type spawnerFunc func(ctx context.Context, req SpawnRequest) (*corev1.Pod, error)

func (f spawnerFunc) Spawn(ctx context.Context, req SpawnRequest) (*corev1.Pod, error) {
	return f(ctx, req)
}

// TestAWorkspaceIsFoundRightAfterItsSpawn: an agent spawns a workspace and at once asks for it,
// stops it or deletes it, before this replica's cache shows the pod. Before, each answered 404
// "not found" (an agent could take the workspace for gone and leave it running); now the replica
// reads the API server for a workspace it spawned a moment ago, for its owner only.
func TestAWorkspaceIsFoundRightAfterItsSpawn(t *testing.T) {
	api := newLiveAPI(t)
	spawn := spawnerFunc(func(_ context.Context, req SpawnRequest) (*corev1.Pod, error) {
		return api.create(t, pod("ws-"+req.ID, req.Owner, req.ID, "2.0", t0, ready)), nil
	})
	// The cache shows nothing: it has not caught up with the spawn.
	svc := api.service(t, api.snapshot(t), func(c *Config) { c.Spawner = spawn })

	if _, err := svc.Spawn(aliceCtx, SpawnInput{Template: "python", ID: "b1"}); err != nil {
		t.Fatal(err)
	}
	w, err := svc.GetWorkspace(aliceCtx, "b1")
	if err != nil {
		t.Fatalf("get_workspace right after the spawn: %v", err)
	}
	if w.ID != "b1" || w.Owner != "alice" {
		t.Fatalf("get_workspace = %+v", w)
	}
	bobCtx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "bob"})
	if _, err := svc.GetWorkspace(bobCtx, "b1"); err == nil || CodeOf(err) != CodeNotFound {
		t.Fatalf("another user asking for it: %v, want not found (the cache shows nothing, and it is not theirs)", err)
	}
	if _, err := svc.Stop(aliceCtx, "b1"); err != nil {
		t.Fatalf("stop right after the spawn: %v", err)
	}
}
