package frontend

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// heldLedger reads from the API server, except the quota ledgers (ConfigMaps): each such read
// says so on entered, then waits until open is closed or its context ends, as a read from an API
// server whose etcd is slow does.
type heldLedger struct {
	client.Reader
	entered chan string
	open    chan struct{}
}

func (h *heldLedger) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		select {
		case h.entered <- key.Name:
		default:
		}
		select {
		case <-h.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Reader.Get(ctx, key, obj, opts...)
}

// A stop holds the owner's lock while its ledger read hangs on a slow API server; a spawn of the
// same owner waits behind it. Before, the stop ran on the caller's context, which has no
// deadline, and the lock was a mutex that ignores contexts: the spawn waited past its
// WriteTimeout for as long as the stop's API call hung. Now the spawn gives up at the lock when
// its deadline passes (503 Unavailable, having read nothing), and the stop is bounded by its own
// WriteTimeout.
func TestASpawnBehindAHangingStopAnswersWithinItsWriteTimeout(t *testing.T) {
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready))
	tmpl, err := templates.Decode("python", "test", map[string]string{workspace.AnnTemplateVersion: "2.0"},
		map[string]string{workspace.DataSpec: `{"containers":[{"name":"ide","image":"ide:2","ports":[{"containerPort":8080}]}]}`})
	if err != nil {
		t.Fatal(err)
	}
	ledger := &heldLedger{Reader: api.k8s, entered: make(chan string, 8), open: make(chan struct{})}
	opened := false
	openLedger := func() {
		if !opened {
			opened = true
			close(ledger.open)
		}
	}
	defer openLedger()
	sp := spawner.New(api.k8s, ledger, templates.NewStatic(tmpl), spawner.Options{Namespace: api.ns, MaxPerUser: 10, MaxStoppedPerUser: 10})
	cache := api.snapshot(t, "ws-a1")
	const stopTimeout, spawnTimeout = 3 * time.Second, 500 * time.Millisecond
	stopper := api.service(t, cache, func(c *Config) { c.Quota, c.WriteTimeout = sp, stopTimeout })
	spawning := api.service(t, cache, func(c *Config) {
		c.Quota, c.Spawner, c.WriteTimeout = sp, FromSpawner(sp.Spawn), spawnTimeout
	})

	stopped := make(chan error, 1)
	stopAt := time.Now()
	go func() { _, err := stopper.Stop(aliceCtx, "a1"); stopped <- err }()
	select {
	case <-ledger.entered: // the stop holds alice's lock, its ledger read hanging
	case err := <-stopped:
		t.Fatalf("the stop ended (%v) before reading the ledger", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stop did not read the ledger within 30s")
	}

	spawned := make(chan error, 1)
	spawnAt := time.Now()
	go func() { _, err := spawning.Spawn(aliceCtx, SpawnInput{Template: "python", ID: "b1"}); spawned <- err }()
	select {
	case err := <-spawned:
		took := time.Since(spawnAt)
		if CodeOf(err) != CodeUnavailable {
			t.Errorf("the spawn behind the hanging stop: %v (%s), want Unavailable", err, CodeOf(err))
		}
		if took > spawnTimeout+2*time.Second {
			t.Errorf("the spawn answered after %s, want within its WriteTimeout (%s)", took, spawnTimeout)
		}
	case <-time.After(spawnTimeout + 5*time.Second):
		t.Errorf("the spawn behind the hanging stop did not answer within %s: it waits for the stop's lock past its WriteTimeout (%s)", spawnTimeout+5*time.Second, spawnTimeout)
		openLedger() // let the stop finish, then the spawn
		select {
		case <-spawned:
		case <-time.After(30 * time.Second):
			t.Fatal("the spawn did not end within 30s of the ledger answering")
		}
	}
	select {
	case name := <-ledger.entered:
		t.Errorf("the spawn read ledger %s: it should have given up at the owner's lock", name)
	default:
	}

	select {
	case err := <-stopped:
		if !opened {
			if CodeOf(err) != CodeUnavailable {
				t.Errorf("the stop whose ledger read hung: %v (%s), want Unavailable", err, CodeOf(err))
			}
			if took := time.Since(stopAt); took > stopTimeout+2*time.Second {
				t.Errorf("the stop answered after %s, want within its WriteTimeout (%s)", took, stopTimeout)
			}
		}
	case <-time.After(stopTimeout + 5*time.Second):
		t.Errorf("the stop whose ledger read hung did not answer within %s: it is not bounded by its WriteTimeout (%s)", stopTimeout+5*time.Second, stopTimeout)
		openLedger()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Fatal("the stop did not end within 30s of the ledger answering")
		}
	}
	if v, ok := api.get(t, "ws-a1").Annotations[workspace.AnnStopRequested]; ok && !opened {
		t.Errorf("a stop that answered Unavailable wrote its intent (%q)", v)
	}
}
