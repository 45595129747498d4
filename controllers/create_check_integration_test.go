package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// namedReads counts the reads made from the API server, by pod name.
type namedReads struct {
	client.Reader
	mu sync.Mutex
	n  map[string]int
}

func (l *namedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	l.mu.Lock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[key.Name]++
	l.mu.Unlock()
	return l.Reader.Get(ctx, key, obj, opts...)
}

func (l *namedReads) of(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[name]
}

// TestSideBySideStartChecksTheOldPodInTheCache: after creating a side-by-side upgrade's new pod,
// the controller makes sure the old pod was not deleted meanwhile (the owner's delete race,
// docs/upgrades.md "Why it is crash-safe"). It used to read the old pod from the API server, one
// request per upgrade; it now waits for its informer cache to show the new pod, when the cache
// holds every pod write committed before the create, and looks at the old pod there. A workspace
// deleted before the create must still stay deleted (the new pod goes), whether its pod is
// removed at once or left terminating; only the pod the cache no longer shows is read from the
// API server.
func TestSideBySideStartChecksTheOldPodInTheCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	ownerDeletes := func(t *testing.T, old *corev1.Pod) {
		if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil {
			t.Errorf("owner's delete: %v", err)
		}
	}
	for i, tc := range []struct {
		name string
		// beforeCreate, if set, runs after the pass planned, right before its create: the owner's
		// delete, say.
		beforeCreate func(t *testing.T, old *corev1.Pod)
		// terminating: the old pod is left terminating (finalizer) rather than removed.
		terminating  bool
		wantUpgraded bool
		// wantReads of the old pod from the API server: a pod the cache no longer shows may be
		// gone or only relabelled (the cache selects workspace pods by label), so it is read.
		wantReads int
	}{
		{name: "nobody deletes the workspace: the new pod stays, UpgradeStarted, no read of the old pod", wantUpgraded: true},
		{name: "the owner deletes the workspace before the create, pod removed at once: the new pod goes too, after a read", beforeCreate: ownerDeletes, wantReads: 1},
		{name: "the owner deletes the workspace before the create, pod still terminating: the new pod goes too, no read", beforeCreate: ownerDeletes, terminating: true},
		{name: "the old pod loses its workspace label before the create (the cache drops it, the API server still has it live): the new pod stays, after a read",
			beforeCreate: func(t *testing.T, old *corev1.Pod) {
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"kept-by-hand"}}}`, workspace.LabelType)
				if err := c.Patch(ctx, old, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					t.Errorf("relabel: %v", err)
				}
			}, wantUpgraded: true, wantReads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, reg, old, _ := outdatedWorkspace(t, c, fmt.Sprintf("create-check-%d", i), "gil", "desk", "", tc.terminating)
			newName := workspace.NextPodName(old, "v2")

			cw := watchClient(t, cfg)
			var once sync.Once
			var createdNew, deletedNew atomic.Bool
			hooked := interceptor.NewClient(cw, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if obj.GetName() == newName && tc.beforeCreate != nil {
						once.Do(func() { tc.beforeCreate(t, old) })
					}
					err := cl.Create(ctx, obj, opts...)
					if err == nil && obj.GetName() == newName {
						createdNew.Store(true)
					}
					return err
				},
				Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					err := cl.Delete(ctx, obj, opts...)
					if err == nil && obj.GetName() == newName {
						deletedNew.Store(true)
					}
					return err
				},
			})
			mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
				o.Cache = cache.Options{
					DefaultNamespaces: map[string]cache.Config{ns: {}},
					ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()},
				}
			})
			api := &namedReads{Reader: mgr.GetAPIReader()}
			rec := record.NewFakeRecorder(1000)
			managerSeq.Lock()
			managerSeq.n++
			name := fmt.Sprintf("create-check-%d", managerSeq.n)
			managerSeq.Unlock()
			r := &WorkspaceReconciler{Client: hooked, Reader: mgr.GetCache(), APIReader: api, Templates: reg, Recorder: rec,
				Opts: UpgradeOptions{Name: name}}
			if err := r.SetupWithManager(mgr); err != nil {
				t.Fatal(err)
			}
			runManager(t, ctx, mgr)

			var events []string
			deadline := time.Now().Add(30 * time.Second)
			for {
				for len(rec.Events) > 0 {
					events = append(events, <-rec.Events)
				}
				started := slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, upgrade.ReasonUpgradeStarted) })
				if tc.wantUpgraded && started || !tc.wantUpgraded && deletedNew.Load() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 30s: upgraded pod %s created=%v, deleted by the controller=%v, Events %q", newName, createdNew.Load(), deletedNew.Load(), events)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !createdNew.Load() {
				t.Fatalf("upgraded pod %s was never created", newName)
			}
			var up corev1.Pod
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: newName}, &up)
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if live := err == nil && up.DeletionTimestamp == nil; live != tc.wantUpgraded {
				t.Errorf("upgraded pod %s live = %v, want %v", newName, live, tc.wantUpgraded)
			}
			if tc.wantUpgraded {
				var left corev1.Pod
				if err := c.Get(ctx, client.ObjectKeyFromObject(old), &left); err != nil || left.DeletionTimestamp != nil {
					t.Errorf("old pod %s not live while its side-by-side upgrade starts: %v", old.Name, err)
				}
			}
			if got := api.of(old.Name); got != tc.wantReads {
				t.Errorf("the check after the create read the old pod %d times from the API server, want %d", got, tc.wantReads)
			}
		})
	}
}
