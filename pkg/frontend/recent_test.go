package frontend

import (
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
//
// That read is no standing door to the API server: once the cache shows the workspace, and once a
// read from the API server finds none (deleted meanwhile), the replica forgets the spawn, so
// further requests for the id read the cache alone (before, each made one List to the API server
// for 30 s, as often as the owner liked). An API server that cannot answer that read is 503
// Unavailable, to retry (before, 404: an agent could take the workspace for gone).
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

	t.Run("forgotten once the cache shows it", func(t *testing.T) {
		cache := api.snapshot(t)
		svc := api.service(t, cache, func(c *Config) { c.Spawner = spawn })
		if _, err := svc.Spawn(aliceCtx, SpawnInput{Template: "python", ID: "c1"}); err != nil {
			t.Fatal(err)
		}
		shown := api.get(t, "ws-c1")
		shown.ResourceVersion = ""
		if err := cache.Create(context.Background(), shown); err != nil {
			t.Fatal(err)
		}
		gets := api.count(http.MethodGet)
		if _, err := svc.GetWorkspace(aliceCtx, "c1"); err != nil {
			t.Fatalf("get_workspace once the cache shows it: %v", err)
		}
		if n := api.count(http.MethodGet) - gets; n != 0 {
			t.Errorf("get_workspace of a workspace the cache shows sent %d reads to the API server, want 0", n)
		}
		if _, ok := svc.recent.owner(api.ns, "c1", svc.cfg.Now()); ok {
			t.Errorf("the spawn of c1 is still remembered after the cache showed it: a request for c1 the cache lacks would still List from the API server")
		}
	})

	t.Run("forgotten once the API server has it no more", func(t *testing.T) {
		svc := api.service(t, api.snapshot(t), func(c *Config) { c.Spawner = spawn })
		if _, err := svc.Spawn(aliceCtx, SpawnInput{Template: "python", ID: "d1"}); err != nil {
			t.Fatal(err)
		}
		if err := api.k8s.Delete(api.ctx, api.get(t, "ws-d1"), client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		for i, want := range []int64{1, 0, 0} {
			gets := api.count(http.MethodGet)
			if _, err := svc.GetWorkspace(aliceCtx, "d1"); CodeOf(err) != CodeNotFound {
				t.Fatalf("get_workspace #%d of a workspace deleted after its spawn: %v, want not found", i+1, err)
			}
			if n := api.count(http.MethodGet) - gets; n != want {
				t.Errorf("get_workspace #%d of a workspace deleted after its spawn sent %d reads to the API server, want %d", i+1, n, want)
			}
		}
	})

	t.Run("503 when the API server cannot answer", func(t *testing.T) {
		unreachable := api.unreachableClient(t)
		svc := api.service(t, api.snapshot(t), func(c *Config) { c.Spawner, c.APIReader = spawn, unreachable })
		if _, err := svc.Spawn(aliceCtx, SpawnInput{Template: "python", ID: "e1"}); err != nil {
			t.Fatal(err)
		}
		_, err = svc.GetWorkspace(aliceCtx, "e1")
		if CodeOf(err) != CodeUnavailable {
			t.Fatalf("get_workspace right after the spawn with the API server down: %v (%s), want Unavailable (503), not %s", err, CodeOf(err), CodeNotFound)
		}
		if _, ok := svc.recent.owner(api.ns, "e1", svc.cfg.Now()); !ok {
			t.Errorf("the spawn of e1 was forgotten after a read that failed: a retry would answer 404")
		}
	})
}
