package controllers

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// snapshotCache is what the informer cache showed when a pass began: fixed pods (and no claims),
// so a test can play a write that lands between the cache's view and the pass's own writes.
type snapshotCache struct {
	pods   []*corev1.Pod
	claims []*corev1.PersistentVolumeClaim
}

func (s snapshotCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, c := range s.claims {
		if c.Namespace == key.Namespace && c.Name == key.Name {
			c.DeepCopyInto(obj.(*corev1.PersistentVolumeClaim))
			return nil
		}
	}
	return apierrors.NewNotFound(corev1.Resource("persistentvolumeclaims"), key.Name)
}

func (s snapshotCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	pl := list.(*corev1.PodList)
	for _, p := range s.pods {
		pl.Items = append(pl.Items, *p.DeepCopy())
	}
	return nil
}

// countingReader counts the reads made from the API server.
type countingReader struct {
	client.Reader
	gets atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestRecreateStartChecksTheOldPodWithItsDelete: a Recreate start creates the new pod and, in the
// same pass, deletes the old one with the UID and resourceVersion the cache showed. That delete
// is also the check that the workspace was not deleted meanwhile (by its owner, between the
// cache's view and the create): without the read of the old pod that used to follow the create,
// a workspace deleted meanwhile must still stay deleted (the new pod is removed), and one that
// was not must be upgraded with one read from the API server (the old pod's full spec) instead of
// two.
func TestRecreateStartChecksTheOldPodWithItsDelete(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	cw := watchClient(t, cfg)
	cases := []struct {
		name string
		// ownerDeletes runs right after the upgraded pod's create (nil: nobody deletes).
		ownerDeletes func(t *testing.T, old *corev1.Pod)
		// terminating: the old pod is left terminating (finalizer) rather than removed.
		terminating  bool
		wantUpgraded bool
		wantReads    int32
		// claimCached: the cache shows the workspace's claim (else it has not seen it yet: the
		// create meets AlreadyExists and the claim is read, one read more, to check that it is
		// the workspace's own and not another owner's under the same name: spawner.ClaimOf).
		claimCached      bool
		wantClaimCreates int32
	}{
		{name: "nobody deletes the workspace: new pod kept, old pod deleted, one read and the claim's", wantUpgraded: true, wantReads: 2, wantClaimCreates: 1},
		{name: "the claim the old pod mounts is in the cache: not created again", claimCached: true, wantUpgraded: true, wantReads: 1},
		{name: "nobody deletes the workspace, old pod held terminating: new pod kept, one read and the claim's", terminating: true, wantUpgraded: true, wantReads: 2, wantClaimCreates: 1},
		{name: "the owner deletes the workspace right after the create, pod removed at once: the new pod goes too",
			ownerDeletes: func(t *testing.T, old *corev1.Pod) {
				if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil {
					t.Errorf("owner's delete: %v", err)
				}
			}, wantReads: 3, wantClaimCreates: 1},
		{name: "the owner deletes the workspace right after the create, pod still terminating: the new pod goes too",
			terminating: true,
			ownerDeletes: func(t *testing.T, old *corev1.Pod) {
				if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil {
					t.Errorf("owner's delete: %v", err)
				}
			}, wantReads: 3, wantClaimCreates: 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, reg, old, claims := outdatedWorkspace(t, c, fmt.Sprintf("recreate-start-%d", i), "erin", "disk", corev1.ReadWriteOncePod, tc.terminating)
			newName := workspace.NextPodName(old, "v2")

			var claimCreates atomic.Int32
			hooked := interceptor.NewClient(cw, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
						claimCreates.Add(1)
					}
					err := cl.Create(ctx, obj, opts...)
					if err == nil && obj.GetName() == newName && tc.ownerDeletes != nil {
						tc.ownerDeletes(t, old)
					}
					return err
				},
			})
			api := &countingReader{Reader: c}
			rec := record.NewFakeRecorder(100)
			snap := snapshotCache{pods: []*corev1.Pod{old}}
			if tc.claimCached {
				snap.claims = claims
			}
			r := snapshotReconciler("recreate-start-test", hooked, snap, api, reg, rec, nil)

			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "disk"}}); err != nil {
				t.Fatalf("reconcile: %v", err)
			}

			var up corev1.Pod
			err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: newName}, &up)
			upgraded := err == nil && up.DeletionTimestamp == nil
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if upgraded != tc.wantUpgraded {
				t.Errorf("upgraded pod %s live after the pass = %v, want %v", newName, upgraded, tc.wantUpgraded)
			}
			var left corev1.Pod
			switch err := c.Get(ctx, client.ObjectKeyFromObject(old), &left); {
			case apierrors.IsNotFound(err):
			case err != nil:
				t.Fatal(err)
			case left.DeletionTimestamp == nil:
				t.Errorf("old pod %s is still live after a Recreate start", old.Name)
			}
			if got := claimCreates.Load(); got != tc.wantClaimCreates {
				t.Errorf("claim creates = %d, want %d", got, tc.wantClaimCreates)
			}
			if got := api.gets.Load(); got != tc.wantReads {
				t.Errorf("reads from the API server = %d, want %d", got, tc.wantReads)
			}
			started := 0
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.Contains(e, upgrade.ReasonUpgradeStarted) {
					started++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.wantUpgraded]; started != want {
				t.Errorf("UpgradeStarted Events = %d, want %d", started, want)
			}
			if tc.wantUpgraded && len(up.Spec.SchedulingGates) == 0 {
				t.Errorf("upgraded pod %s has no scheduling gate; a Recreate start creates it gated", newName)
			}
		})
	}
}

// TestAPassFromACacheBehindItsOwnCreateDoesNotStartTheUpgradeAgain: right after a pass creates
// the upgraded pod, a second event for the workspace can bring it back before the cache shows
// that pod (for a kubectl intent, the pass's own earlier write recording the pod's name comes back
// while the pass goes on to the create). Planned from that view, the pass
// would start the same upgrade again: a create answered AlreadyExists and a read, two round trips
// for nothing per workspace in a bulk upgrade. It waits for the pod's watch event instead, and
// plans as usual once the cache shows the pod, or after awaitCreate at the latest.
func TestAPassFromACacheBehindItsOwnCreateDoesNotStartTheUpgradeAgain(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	cw := watchClient(t, cfg)
	ns, reg, old, _ := outdatedWorkspace(t, c, "stale-pass", "fay", "box", "", false)
	var creates atomic.Int32
	hooked := interceptor.NewClient(cw, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				creates.Add(1)
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	api := &countingReader{Reader: c}
	clock := &testClock{now: time.Now()}
	stale := snapshotCache{pods: []*corev1.Pod{old}} // the cache before it has seen the create
	r := snapshotReconciler("stale-pass-test", hooked, stale, api, reg, record.NewFakeRecorder(100), clock.Now)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "box"}}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if got := creates.Load(); got != 1 {
		t.Fatalf("first pass made %d pod creates, want 1", got)
	}
	readsAfterFirst := api.gets.Load()

	// The second pass still sees only the old pod.
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if got := creates.Load(); got != 1 {
		t.Errorf("a pass from a cache behind its own create made %d pod creates in all, want 1 (no second start)", got)
	}
	if got := api.gets.Load() - readsAfterFirst; got != 0 {
		t.Errorf("a pass from a cache behind its own create read %d pods from the API server, want 0", got)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > awaitCreate {
		t.Errorf("second pass RequeueAfter = %s, want a look again within %s if no event comes", res.RequeueAfter, awaitCreate)
	}

	// Once the cache shows the pod, the workspace is planned as usual (here: the upgrade waits
	// for the new pod to be Ready).
	up := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.NextPodName(old, "v2")}, up); err != nil {
		t.Fatal(err)
	}
	r.Reader = snapshotCache{pods: []*corev1.Pod{old, up}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("third pass: %v", err)
	}
	if _, _, waiting := r.gate.awaiting(req.NamespacedName, clock.Now()); waiting {
		t.Errorf("still awaiting the create after the cache showed the pod")
	}
	// And a pod the cache never shows stops being awaited after awaitCreate.
	r.gate.reserved[types.NamespacedName{Namespace: ns, Name: "other"}] = reservation{name: "other-up", at: clock.Now()}
	clock.Add(awaitCreate + time.Second)
	if _, _, waiting := r.gate.awaiting(types.NamespacedName{Namespace: ns, Name: "other"}, clock.Now()); waiting {
		t.Errorf("still awaiting a create after %s", awaitCreate)
	}
}

// outdatedWorkspace creates, in a new namespace named after nsPrefix and the time, the claims and
// the pod of owner's workspace id from the v1 ide template (its claim's access mode mode, ""
// for none), with the upgrade intent on the pod and, when hold, a finalizer that keeps the pod
// terminating once deleted (the kubelet's part; removed when the test ends). Then it raises the
// template to v2, so the pod is outdated.
func outdatedWorkspace(t *testing.T, c client.Client, nsPrefix, owner, id string, mode corev1.PersistentVolumeAccessMode, hold bool) (string, *fakeTemplates, *corev1.Pod, []*corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t, c, nsPrefix)
	reg := &fakeTemplates{}
	reg.set(ideTemplate("v1", "ide:1", mode))
	tmpl, _ := reg.Get("ide")
	old, claims, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: owner, ID: id, Namespace: ns}, workspace.PodName(owner, id))
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range claims {
		cl.Namespace = ns
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	old.Namespace = ns
	old.Annotations[workspace.AnnUpgradeRequested] = "true"
	if hold {
		old.Finalizers = []string{"test.nogoo9/hold"}
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	if hold {
		t.Cleanup(func() {
			_ = c.Patch(ctx, old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
	}
	// The informer a real pass plans from is fed by the API server's watch cache, which has
	// therefore seen the pod; this snapshot comes from the create's answer instead: wait for it.
	waitWatchCache(t, c, old)
	reg.set(ideTemplate("v2", "ide:2", mode))
	return ns, reg, old, claims
}

// waitWatchCache waits (bounded) until the API server's watch cache serves p at p's
// resourceVersion.
func waitWatchCache(t *testing.T, c client.Reader, p *corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got corev1.Pod
		err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &got, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
		if err == nil && got.ResourceVersion == p.ResourceVersion {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server's watch cache did not serve pod %s at resourceVersion %s within 10s (last: %q, %v)", p.Name, p.ResourceVersion, got.ResourceVersion, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readLog records, for each read from the API server, the resourceVersion it asked for ("" is a
// quorum read from etcd, "0" the API server's watch cache).
type readLog struct {
	client.Reader
	mu  sync.Mutex
	rvs []string
}

func (l *readLog) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	var o client.GetOptions
	o.ApplyOptions(opts)
	rv := ""
	if o.Raw != nil {
		rv = o.Raw.ResourceVersion
	}
	l.mu.Lock()
	l.rvs = append(l.rvs, rv)
	l.mu.Unlock()
	return l.Reader.Get(ctx, key, obj, opts...)
}

func (l *readLog) reads() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rvs)
}

// TestRecreateStartReadsTheOldPodsSpecFromTheWatchCache: a Recreate start reads the old pod in
// full for its rollback spec. It asks the API server's watch cache (no etcd read); a copy at the
// resourceVersion the pass planned from is the version the old pod's delete is preconditioned
// on, so it is used. A copy at any other version is followed by a quorum read, as before.
func TestRecreateStartReadsTheOldPodsSpecFromTheWatchCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	cw := watchClient(t, cfg)
	for i, tc := range []struct {
		name string
		// changeAfterPlan writes to the old pod after the pass's view of the cache was taken.
		changeAfterPlan bool
		wantReads       []string
		wantOldDeleted  bool
	}{
		{name: "the watch cache has the version the pass planned from: one read, from the watch cache",
			wantReads: []string{"0"}, wantOldDeleted: true},
		{name: "the old pod changed after the plan: the watch cache's copy is newer, so a quorum read follows; the delete's precondition stops the move",
			changeAfterPlan: true, wantReads: []string{"0", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, reg, old, claims := outdatedWorkspace(t, c, fmt.Sprintf("spec-read-%d", i), "fay", "lab", corev1.ReadWriteOncePod, false)
			if tc.changeAfterPlan {
				var live corev1.Pod
				if err := c.Get(ctx, client.ObjectKeyFromObject(old), &live); err != nil {
					t.Fatal(err)
				}
				if err := c.Patch(ctx, &live, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/note":"edited"}}}`))); err != nil {
					t.Fatal(err)
				}
				waitWatchCache(t, c, &live)
			}
			api := &readLog{Reader: c}
			r := snapshotReconciler("spec-read-test", cw, snapshotCache{pods: []*corev1.Pod{old}, claims: claims}, api, reg, record.NewFakeRecorder(100), nil)
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "lab"}}); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if got := api.reads(); !slices.Equal(got, tc.wantReads) {
				t.Errorf("reads from the API server asked for resourceVersions %q, want %q (\"0\": the watch cache, \"\": etcd)", got, tc.wantReads)
			}
			var up corev1.Pod
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.NextPodName(old, "v2")}, &up); err != nil {
				t.Fatalf("upgraded pod: %v", err)
			}
			js, err := upgrade.DecodeRollbackSpec(up.Annotations[workspace.AnnRollbackSpec])
			if err != nil || !strings.Contains(string(js), `"image":"ide:1"`) {
				t.Errorf("upgraded pod's rollback spec is not the old pod's (%v): %s", err, js)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(old), &corev1.Pod{}); apierrors.IsNotFound(err) != tc.wantOldDeleted {
				t.Errorf("old pod deleted = %v, want %v", apierrors.IsNotFound(err), tc.wantOldDeleted)
			}
		})
	}
}

// snapshotReconciler is an upgrade controller that plans from snap (a fixed view of the cache),
// writes through cl and reads full pods from the API server through api.
func snapshotReconciler(name string, cl client.Client, snap snapshotCache, api client.Reader, reg *fakeTemplates, rec record.EventRecorder, now func() time.Time) *WorkspaceReconciler {
	r := &WorkspaceReconciler{Client: cl, Reader: snap, APIReader: api, Templates: reg, Recorder: rec,
		Opts: UpgradeOptions{Name: name, Now: now}}
	r.Opts.defaults()
	r.wake = make(chan event.GenericEvent, 16)
	r.gate = newGate(0, 0, r.Reader, r.wake)
	return r
}

// TestARecreateStartWhoseDeleteAnswerIsLostKeepsTheNewPod: a Recreate start creates the new pod
// behind its gate and deletes the old one; the API server performs that delete, but its answer
// is lost (the connection drops, or the API server says the request did not finish in time). The
// old pod is then going by the pass's own delete, which a look at it cannot tell from the
// owner's: taking it for the owner's and removing the new pod would leave the workspace with no
// pod at all. The pass fails instead, the new pod stays, and the next passes, planned from what
// the pods show (the old pod terminating, the new one gated), finish the upgrade. Before, the new
// pod was deleted and the workspace was gone.
func TestARecreateStartWhoseDeleteAnswerIsLostKeepsTheNewPod(t *testing.T) {
	cfg, c := startAPIServer(t)
	ctx := context.Background()
	cw := watchClient(t, cfg)
	for i, tc := range []struct {
		name string
		lost error
	}{
		{name: "the connection drops after the request was sent", lost: io.ErrUnexpectedEOF},
		{name: "the API server answers that the request did not finish in time", lost: apierrors.NewTimeoutError("request did not complete within the allowed duration", 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			ns, reg, old, claims := outdatedWorkspace(t, c, fmt.Sprintf("lost-delete-%d", i), "gus", "disk", corev1.ReadWriteOncePod, true)
			newName := workspace.NextPodName(old, "v2")
			var lost atomic.Bool
			hooked := interceptor.NewClient(cw, interceptor.Funcs{
				Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					if err := cl.Delete(ctx, obj, opts...); err != nil || obj.GetName() != old.Name || lost.Swap(true) {
						return err
					}
					return tc.lost
				},
			})
			r := snapshotReconciler("lost-delete-test", hooked, snapshotCache{pods: []*corev1.Pod{old}}, c, reg, record.NewFakeRecorder(100), nil)
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "disk"}}
			upgraded := func(g gomega.Gomega) *corev1.Pod {
				var up corev1.Pod
				g.Expect(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: newName}, &up)).To(gomega.Succeed(), "the upgraded pod")
				g.Expect(up.DeletionTimestamp).To(gomega.BeNil(), "the upgraded pod is being deleted")
				return &up
			}
			gated := func(p *corev1.Pod) bool {
				return slices.ContainsFunc(p.Spec.SchedulingGates, func(s corev1.PodSchedulingGate) bool { return s.Name == workspace.GateVolumeRelease })
			}
			// pass runs one pass planned from what the API server has now, as the cache would
			// show it a moment later.
			pass := func(g gomega.Gomega) {
				var list corev1.PodList
				g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
				snap := snapshotCache{claims: claims}
				for i := range list.Items {
					snap.pods = append(snap.pods, &list.Items[i])
				}
				r.Reader = snap
				_, err := r.Reconcile(ctx, req)
				g.Expect(err).NotTo(gomega.HaveOccurred())
			}

			_, err := r.Reconcile(ctx, req)
			g.Expect(lost.Load()).To(gomega.BeTrue(), "the pass deleted the old pod")
			up := upgraded(g)
			g.Expect(gated(up)).To(gomega.BeTrue(), "the new pod stays, behind its gate")
			g.Expect(up.Annotations).To(gomega.HaveKey(workspace.AnnUpgradeStartedAt), "the upgrade is under way")
			g.Expect(err).To(gomega.MatchError(tc.lost), "the pass fails, so it is retried")

			// The old pod is still terminating (the kubelet's part): the new pod waits for it.
			pass(g)
			g.Expect(gated(upgraded(g))).To(gomega.BeTrue(), "the gate stays while the old pod holds the volume")

			// The old pod goes: the gate is lifted, and the upgrade ends once the pod is Ready.
			g.Expect(c.Patch(ctx, old.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(gomega.Succeed())
			g.Eventually(func(g gomega.Gomega) {
				pass(g)
				g.Expect(gated(upgraded(g))).To(gomega.BeFalse())
			}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
			(&upgradeEnv{t: t, g: g, c: c, ns: ns}).setReady(newName)
			g.Eventually(func(g gomega.Gomega) {
				pass(g)
				g.Expect(upgraded(g).Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeStartedAt), "the upgrade has ended")
			}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		})
	}
}
