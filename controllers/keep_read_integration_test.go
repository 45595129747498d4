package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// typedReads records, per pod name, the kind of object each read from the API server filled
// (*corev1.Pod or *metav1.PartialObjectMetadata), and runs before(name) ahead of each read.
type typedReads struct {
	client.Reader
	before func(name string)
	mu     sync.Mutex
	kinds  map[string][]string
}

func (l *typedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if l.before != nil {
		l.before(key.Name)
	}
	l.mu.Lock()
	if l.kinds == nil {
		l.kinds = map[string][]string{}
	}
	l.kinds[key.Name] = append(l.kinds[key.Name], fmt.Sprintf("%T", obj))
	l.mu.Unlock()
	return l.Reader.Get(ctx, key, obj, opts...)
}

func (l *typedReads) of(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.kinds[name]...)
}

// TestTheEndOfASideBySideUpgradeReadsTheNewPodsMetadataOnly: before deleting the old pod of a
// side-by-side upgrade whose new pod is Ready, the controller reads the new pod from the API
// server (a quorum read: never delete a workspace's last pod on a stale cache, docs/upgrades.md
// "Why it is crash-safe"). It used to read the whole pod; it asks for the metadata only, which is
// all the check uses (there, the same pod, not being deleted). The check still stops the delete
// when the new pod is gone, or being deleted, on the API server but not yet in the cache.
func TestTheEndOfASideBySideUpgradeReadsTheNewPodsMetadataOnly(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	for i, tc := range []struct {
		name string
		// behind, if set, runs right before the controller's read of the new pod, on the API
		// server only (the cache has not seen it when the pass planned).
		behind func(t *testing.T, up *corev1.Pod)
		// hold puts a finalizer on the new pod, so a delete leaves it terminating.
		hold        bool
		wantOldGone bool
	}{
		{name: "nobody touches the new pod: the old pod goes after a metadata-only read of the new one", wantOldGone: true},
		{name: "the new pod is removed behind the cache's back: the old pod stays",
			behind: func(t *testing.T, up *corev1.Pod) {
				if err := c.Delete(ctx, up, client.Preconditions{UID: &up.UID}); client.IgnoreNotFound(err) != nil {
					t.Errorf("delete the new pod: %v", err)
				}
			}},
		{name: "the new pod is replaced behind the cache's back (same name, new UID): the old pod stays",
			behind: func(t *testing.T, up *corev1.Pod) {
				if err := c.Delete(ctx, up, client.Preconditions{UID: &up.UID}); err != nil {
					t.Errorf("delete the new pod: %v", err)
					return
				}
				again := up.DeepCopy()
				again.UID, again.ResourceVersion, again.ManagedFields = "", "", nil
				again.CreationTimestamp = metav1.Time{}
				again.Status = corev1.PodStatus{}
				for i := 0; i < 100; i++ {
					err := c.Create(ctx, again)
					if err == nil {
						t.Logf("replaced %s: UID %s -> %s", up.Name, up.UID, again.UID)
						return
					}
					if !apierrors.IsAlreadyExists(err) {
						t.Errorf("re-create the new pod: %v", err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				t.Errorf("could not re-create the new pod")
			}},
		{name: "the new pod is being deleted behind the cache's back (finalizer): the old pod stays", hold: true,
			behind: func(t *testing.T, up *corev1.Pod) {
				if err := c.Delete(ctx, up, client.Preconditions{UID: &up.UID}); client.IgnoreNotFound(err) != nil {
					t.Errorf("delete the new pod: %v", err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, reg, old, _ := outdatedWorkspace(t, c, fmt.Sprintf("keep-read-%d", i), "hal", "bench", "", false)
			newName := workspace.NextPodName(old, "v2")

			mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
				o.Cache = cache.Options{
					DefaultNamespaces: map[string]cache.Config{ns: {}},
					ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()},
				}
			})
			var once sync.Once
			api := &typedReads{Reader: mgr.GetAPIReader()}
			api.before = func(name string) {
				if name != newName || tc.behind == nil {
					return
				}
				once.Do(func() {
					var up corev1.Pod
					if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: newName}, &up); err != nil {
						t.Errorf("read the new pod: %v", err)
						return
					}
					tc.behind(t, &up)
				})
			}
			managerSeq.Lock()
			managerSeq.n++
			name := fmt.Sprintf("keep-read-%d", managerSeq.n)
			managerSeq.Unlock()
			writer, err := newPodDeletes(mgr.GetClient(), mgr.GetConfig(), mgr.GetHTTPClient())
			if err != nil {
				t.Fatal(err)
			}
			r := &WorkspaceReconciler{Client: writer, Reader: mgr.GetCache(), APIReader: api, Templates: reg,
				Recorder: record.NewFakeRecorder(1000), Opts: UpgradeOptions{Name: name}}
			if err := r.SetupWithManager(mgr); err != nil {
				t.Fatal(err)
			}
			runManager(t, ctx, mgr)

			// The controller creates the new pod; the test plays the kubelet and makes it Ready.
			var up corev1.Pod
			waitFor(t, 30*time.Second, "the upgraded pod "+newName, func() bool {
				return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: newName}, &up) == nil
			})
			if tc.hold {
				patch := []byte(`{"metadata":{"finalizers":["test.nogoo9/hold"]}}`)
				if err := c.Patch(ctx, &up, client.RawPatch("application/merge-patch+json", patch)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = c.Patch(ctx, &up, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
				})
			}
			up.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "ide", Ready: true, Image: "x",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
			if err := c.Status().Update(ctx, &up); err != nil {
				t.Fatal(err)
			}

			if tc.wantOldGone {
				waitFor(t, 30*time.Second, "the old pod "+old.Name+" deleted", func() bool {
					var left corev1.Pod
					err := c.Get(ctx, client.ObjectKeyFromObject(old), &left)
					return apierrors.IsNotFound(err) || (err == nil && left.DeletionTimestamp != nil)
				})
			} else {
				waitFor(t, 30*time.Second, "the controller's read of the new pod", func() bool { return len(api.of(newName)) > 0 })
				// The pass stops at the read; the next ones see the new pod gone or going and
				// leave the old one (the planner's own rules). It must still be live a while on.
				deadline := time.Now().Add(2 * time.Second)
				for time.Now().Before(deadline) {
					var left corev1.Pod
					if err := c.Get(ctx, client.ObjectKeyFromObject(old), &left); err != nil || left.DeletionTimestamp != nil {
						t.Fatalf("the old pod %s was deleted although the pod that stays was gone or going: %v", old.Name, err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			// The first read of the new pod is the one before the old pod's delete (later passes
			// of a workspace whose new pod went may read it in full: a repeated create answered
			// AlreadyExists reads the pod of that name).
			switch reads := api.of(newName); {
			case len(reads) == 0:
				t.Errorf("the controller never read the new pod %s before deleting the old one", newName)
			case reads[0] != "*v1.PartialObjectMetadata":
				t.Errorf("the controller read the new pod %s from the API server into a %s before deleting the old pod, want its metadata only (*v1.PartialObjectMetadata); reads: %q", newName, reads[0], reads)
			}
		})
	}
}

// waitFor polls cond every 20 ms until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: no %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
