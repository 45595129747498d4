package controllers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The lifecycle's races with the front end, the pod GC and the controller's own cache, on a fake
// API server: each test lets the other party write at the worst moment (an interceptor, or a
// cache that has not shown the controller's own writes yet) and checks where the workspace ends.

var raceKey = types.NamespacedName{Namespace: "ns", Name: "demo"}

// racePod is workspace demo's running pod on tmpl, with ann added.
func racePod(t *testing.T, tmpl *templates.Template, ann map[string]string) *corev1.Pod {
	t.Helper()
	p, _, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: "jane", ID: "demo", Namespace: "ns"}, workspace.PodName("jane", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	p.Namespace, p.UID = "ns", types.UID("uid-"+p.Name)
	p.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for k, v := range ann {
		p.Annotations[k] = v
	}
	return p
}

// raceStopped is the stopped copy of running, as a stop makes it.
func raceStopped(t *testing.T, running *corev1.Pod, ann map[string]string) *corev1.Pod {
	t.Helper()
	set := map[string]string{workspace.AnnStoppedFromUID: string(running.UID), workspace.AnnStoppedAt: "2026-01-01T00:00:00Z"}
	for k, v := range ann {
		set[k] = v
	}
	s, err := lifecycle.StoppedPod(running, lifecycle.StoppedPodName(running), set)
	if err != nil {
		t.Fatal(err)
	}
	s.UID = types.UID("uid-" + s.Name)
	s.CreationTimestamp = metav1.NewTime(running.CreationTimestamp.Add(time.Minute))
	return s
}

// raceAPI is the fake API server holding objs. It gives each pod created a UID, as the API server
// does, after calling before (nil: nothing), the other party's write just ahead of the create.
func raceAPI(objs []client.Object, before func(ctx context.Context, cl client.WithWatch, obj client.Object)) client.WithWatch {
	return fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if before != nil {
				before(ctx, cl, obj)
			}
			if obj.GetUID() == "" {
				obj.SetUID(types.UID("uid-" + obj.GetName()))
			}
			return cl.Create(ctx, obj, opts...)
		},
	}).Build()
}

func racePods(t *testing.T, c client.Reader) []*corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := c.List(context.Background(), &list, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

func raceLive(pods []*corev1.Pod) (live []*corev1.Pod) {
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// racePass runs one lifecycle pass planned from view.
func racePass(t *testing.T, r *WorkspaceReconciler, view []*corev1.Pod, tmpl *templates.Template) {
	t.Helper()
	if _, _, err := r.reconcileLifecycle(context.Background(), raceKey, view, tmpl, time.Now()); err != nil {
		t.Fatalf("lifecycle pass: %v", err)
	}
}

func raceLiftStop(ctx context.Context, t *testing.T, cl client.Client, pod *corev1.Pod) {
	patch := []byte(`{"metadata":{"annotations":{"` + workspace.AnnStopRequested + `":null}}}`)
	target := &corev1.Pod{ObjectMeta: ctrlObjectMeta(client.ObjectKeyFromObject(pod))}
	if err := cl.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Errorf("the user's start: %v", err)
	}
}

// The user starts the workspace while the controller makes its stopped copy: the controller has
// read the running pod with the stop intent, the front end removes the intent and lists the pods
// (no copy yet), then the copy is created with the intent. The start, which the API answered,
// must win: the workspace keeps running, without the intent, and the copy goes.
func TestStartDuringTheStoppedCopysCreateKeepsTheWorkspaceRunning(t *testing.T) {
	tmpl := ideTemplate("v1", "ide:1", "")
	run := racePod(t, tmpl, map[string]string{workspace.AnnStopRequested: "stopped by its owner"})
	api := raceAPI([]client.Object{run}, func(ctx context.Context, cl client.WithWatch, obj client.Object) {
		if obj.GetName() == lifecycle.StoppedPodName(run) {
			raceLiftStop(ctx, t, cl, run)
		}
	})
	r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)

	racePass(t, r, racePods(t, api), tmpl) // plans the stop from the pod with the intent
	for range 3 {
		racePass(t, r, racePods(t, api), tmpl) // the next passes, from a cache that caught up
	}

	pods := racePods(t, api)
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Annotations[workspace.AnnStopRequested] != "" {
			t.Errorf("pod %s carries the stop intent %q after the user's start", p.Name, p.Annotations[workspace.AnnStopRequested])
		}
	}
	if live := raceLive(pods); len(live) != 1 || live[0].Name != run.Name || workspace.IsStoppedPod(live[0]) {
		t.Errorf("live pods = %v, want only the running pod %s", raceNames(live), run.Name)
	}
}

// The pod GC removes the pod of a lost node (grace period 0) just as the controller makes its
// copy: the copy is all the workspace has left, and it must stay (and start). A person's delete
// of the workspace at that moment (graceful: the pod waits, being deleted) still removes it.
func TestLostNodesPodRemovedDuringItsCopy(t *testing.T) {
	tmpl := ideTemplate("v1", "ide:1", "")
	tests := []struct {
		name string
		// deleting: the pod has a finalizer, so the delete leaves it being deleted, as a
		// graceful delete of a pod whose kubelet is gone does.
		deleting bool
		wantCopy bool
	}{
		{name: "the pod GC removes the pod: the copy stays and the workspace starts on another node", wantCopy: true},
		{name: "its owner deletes the workspace: the copy does not outlive it", deleting: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := racePod(t, tmpl, map[string]string{workspace.AnnNodeLost: "node node-a of pod ... no longer exists"})
			run.Spec.NodeName = "node-a" // no such Node
			if tt.deleting {
				run.Finalizers = []string{"example.com/hold"}
			}
			api := raceAPI([]client.Object{run}, func(ctx context.Context, cl client.WithWatch, obj client.Object) {
				if obj.GetName() == lifecycle.StoppedPodName(run) {
					if err := cl.Delete(ctx, run.DeepCopy()); err != nil {
						t.Errorf("delete the lost pod: %v", err)
					}
				}
			})
			r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)

			racePass(t, r, racePods(t, api), tmpl) // creates the copy
			racePass(t, r, racePods(t, api), tmpl) // starts it, if it stayed

			live := raceLive(racePods(t, api))
			if !tt.wantCopy {
				if len(live) != 0 {
					t.Errorf("live pods = %v after the workspace was deleted, want none", raceNames(live))
				}
				return
			}
			if len(live) != 1 || live[0].Name != lifecycle.StoppedPodName(run) {
				t.Fatalf("live pods = %v, want the copy %s", raceNames(live), lifecycle.StoppedPodName(run))
			}
			if workspace.IsStoppedPod(live[0]) {
				t.Errorf("the copy is still gated; want it started")
			}
		})
	}
}

// A workspace started on its own version (the gate removed) while the cache still shows it
// stopped, and the template has a new version since: a pass planned from that cache starts it on
// the new version, a pod of another name. The stopped pod as the API server has it says the start
// happened: no second running pod.
func TestStaleCacheNeverStartsAStartedWorkspaceOnANewVersion(t *testing.T) {
	v1 := ideTemplate("v1", "ide:1", "")
	stopped := raceStopped(t, racePod(t, v1, nil), nil)
	started := stopped.DeepCopy()
	started.Spec.SchedulingGates = nil
	delete(started.Annotations, workspace.AnnStoppedAt)
	delete(started.Annotations, workspace.AnnStoppedFromUID)
	started.Annotations[workspace.AnnStartedAt] = "2026-01-01T00:02:00Z"
	api := raceAPI([]client.Object{started}, nil)
	r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)
	v2 := ideTemplate("v2", "ide:2", "")
	v2.Annotations = map[string]string{workspace.AnnUpdatePolicy: "on-start"}

	racePass(t, r, []*corev1.Pod{stopped}, v2)

	if live := raceLive(racePods(t, api)); len(live) != 1 || live[0].Name != stopped.Name {
		t.Errorf("live pods = %v, want only the started pod %s", raceNames(live), stopped.Name)
	}
}

// laggingCache is the controller's cache in TestStartOnLatestTwiceFromALaggingCache: the pods
// the informer has delivered so far.
type laggingCache struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (c *laggingCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, ok := obj.(*corev1.Pod); ok {
		for _, p := range c.pods {
			if p.Namespace == key.Namespace && p.Name == key.Name {
				p.DeepCopyInto(out)
				return nil
			}
		}
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (c *laggingCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pl := list.(*corev1.PodList)
	for _, p := range c.pods {
		pl.Items = append(pl.Items, *p.DeepCopy())
	}
	return nil
}

func (c *laggingCache) view(t *testing.T) []*corev1.Pod { return racePods(t, c) }

func (c *laggingCache) set(pods []*corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = pods
}

// A start on the latest version creates its pod; the next pass comes (a template change wakes
// every workspace of the template) before the informer shows that pod: from a view with the
// stopped pod alone, and a newer version, it would start the workspace again under another name.
// The pass that creates the pod waits for the cache to show it, so the next one plans from it.
// The informer here delivers only to a pass that waits: without the wait, the next pass is first.
func TestStartOnLatestTwiceFromALaggingCache(t *testing.T) {
	v1 := ideTemplate("v1", "ide:1", "")
	stopped := raceStopped(t, racePod(t, v1, nil), nil)
	api := raceAPI([]client.Object{stopped}, nil)
	cache := &laggingCache{}
	cache.set(racePods(t, api))
	r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)
	r.Reader, r.seen = cache, podcache.NewSeen()
	ctx, cancel := context.WithCancel(context.Background())
	var informer sync.WaitGroup
	informer.Go(func() {
		for ctx.Err() == nil {
			if r.seen.Waiting() > 0 {
				pods := racePods(t, api)
				cache.set(pods)
				for _, p := range pods {
					r.seen.OnAdd(p, false)
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	defer func() { cancel(); informer.Wait() }()
	onStart := func(version string) *templates.Template {
		tmpl := ideTemplate(version, "ide:"+version, "")
		tmpl.Annotations = map[string]string{workspace.AnnUpdatePolicy: "on-start"}
		return tmpl
	}

	racePass(t, r, cache.view(t), onStart("v2"))
	racePass(t, r, cache.view(t), onStart("v3"))

	var running []string
	for _, p := range raceLive(racePods(t, api)) {
		if !workspace.IsStoppedPod(p) {
			running = append(running, p.Name)
		}
	}
	if len(running) != 1 || running[0] != lifecycle.StartedPodName(stopped) {
		t.Errorf("running pods = %v, want only %s (the start on v2)", running, lifecycle.StartedPodName(stopped))
	}
}

// The cache lags beyond the wait for it (podcache.AwaitSeen; no informer here): a start on the
// latest version has created its pod on v2, the template moves to v3, and the next pass still
// sees the stopped pod alone, which the API server still has, stopped. Its create must fail with
// AlreadyExists: a pod under another name would be a second running pod on the stopped pod's
// claims. Before stop 52 the start's name held the version, and the second pod was made.
func TestStartOnLatestRepeatedFromACacheThatNeverShowedTheFirstStart(t *testing.T) {
	v1 := ideTemplate("v1", "ide:1", corev1.ReadWriteOnce)
	stopped := raceStopped(t, racePod(t, v1, nil), nil)
	api := raceAPI([]client.Object{stopped}, nil)
	r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)
	onStart := func(version string) *templates.Template {
		tmpl := ideTemplate(version, "ide:"+version, corev1.ReadWriteOnce)
		tmpl.Annotations = map[string]string{workspace.AnnUpdatePolicy: "on-start"}
		return tmpl
	}
	view := racePods(t, api) // the stopped pod alone, in every pass

	racePass(t, r, view, onStart("v2"))
	racePass(t, r, view, onStart("v3"))

	var running []string
	for _, p := range raceLive(racePods(t, api)) {
		if !workspace.IsStoppedPod(p) {
			running = append(running, p.Name+"@"+workspace.TemplateVersion(p))
		}
	}
	if want := lifecycle.StartedPodName(stopped) + "@v2"; len(running) != 1 || running[0] != want {
		t.Errorf("running pods = %v, want only %s (the first start)", running, want)
	}
}

// A pass planned from a cache that does not show this process's delete of the running pod yet
// plans the same delete again, and skips it: the stop is counted once.
func TestStopCountedOnceWhenAStalePassPlansItsDeleteAgain(t *testing.T) {
	tmpl := ideTemplate("v1", "ide:1", "")
	why := map[string]string{workspace.AnnStopRequested: "stopped by its owner"}
	run := racePod(t, tmpl, why)
	api := raceAPI([]client.Object{run, raceStopped(t, run, why)}, nil)
	r := snapshotReconciler("lifecycle-race-test", api, snapshotCache{}, api, &fakeTemplates{}, record.NewFakeRecorder(100), nil)
	view := racePods(t, api)
	stops := lifecycleTotal.WithLabelValues("stop")
	before := testutil.ToFloat64(stops)

	racePass(t, r, view, tmpl) // deletes the running pod
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(run), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("running pod not deleted by the stop: %v", err)
	}
	racePass(t, r, view, tmpl) // the same view again: the cache does not show the delete yet

	if got := testutil.ToFloat64(stops) - before; got != 1 {
		t.Errorf("stops counted = %v, want 1", got)
	}
}

func raceNames(pods []*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
