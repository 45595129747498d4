package podcache_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestCacheServesPodsFromTheCompactStore runs nogoo9's cache (podcache.NewCache over
// podcache.OptionsFor, as main.go builds it) over a real kube-apiserver with two namespaces: the
// informer stores compact pods, and Get and List of *corev1.Pod through the cache honour the
// namespace, label selectors, the workspace-id index and a limit, answer NotFound for a pod that is
// not there, and hand out pods the caller may change without changing the cache. Other kinds are
// the wrapped cache's. Without the cache's own reads, controller-runtime's reader refuses the
// compact type ("cache had type *podcache.Pod").
func TestCacheServesPodsFromTheCompactStore(t *testing.T) {
	ctx, _, c, ca := newPodCache(t, "team-a", "team-b")
	if err := podcache.AddWorkspaceIDIndex(ctx, ca); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()

	for _, p := range []struct{ ns, name, id, tier string }{
		{"team-a", "ws-a-demo-1", "demo", "gold"}, {"team-a", "ws-a-demo-2", "demo", "free"}, {"team-a", "ws-a-other", "other", "gold"},
		{"team-b", "ws-b-demo", "demo", "gold"},
	} {
		err := c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns,
				Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: p.id, "tier": p.tier},
				Annotations: map[string]string{workspace.AnnOwner: "alice"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img"}},
				Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home-" + p.id}}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Not a workspace pod: the cache does not hold it.
	if err := c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "team-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "img"}}}}); err != nil {
		t.Fatal(err)
	}

	names := func(opts ...client.ListOption) []string {
		t.Helper()
		var l corev1.PodList
		if err := ca.List(ctx, &l, opts...); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l.Items {
			if p.Kind != "Pod" || p.APIVersion != "v1" {
				t.Errorf("listed pod %s/%s has type meta %+v", p.Namespace, p.Name, p.TypeMeta)
			}
			out = append(out, p.Namespace+"/"+p.Name)
		}
		sort.Strings(out)
		return out
	}
	deadline := time.Now().Add(time.Minute)
	for len(names()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the cache never showed the 4 workspace pods: %v", names())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The store holds the compact type.
	inf, err := ca.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if si, ok := any(inf).(toolscache.SharedIndexInformer); ok {
		for _, o := range si.GetStore().List() {
			if _, ok := o.(*podcache.Pod); !ok {
				t.Errorf("the pod store holds a %T", o)
			}
		}
	}

	for _, tc := range []struct {
		name string
		opts []client.ListOption
		want []string
	}{
		{"every namespace", nil, []string{"team-a/ws-a-demo-1", "team-a/ws-a-demo-2", "team-a/ws-a-other", "team-b/ws-b-demo"}},
		{"one namespace", []client.ListOption{client.InNamespace("team-b")}, []string{"team-b/ws-b-demo"}},
		{"label selector", []client.ListOption{client.MatchingLabels{"tier": "gold"}}, []string{"team-a/ws-a-demo-1", "team-a/ws-a-other", "team-b/ws-b-demo"}},
		{"label selector in a namespace", []client.ListOption{client.InNamespace("team-a"), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{"tier": "free"})}}, []string{"team-a/ws-a-demo-2"}},
		{"workspace-id index", []client.ListOption{client.InNamespace("team-a"), client.MatchingFields{podcache.IndexWorkspaceID: "demo"}}, []string{"team-a/ws-a-demo-1", "team-a/ws-a-demo-2"}},
		{"index and labels", []client.ListOption{client.InNamespace("team-a"), client.MatchingFields{podcache.IndexWorkspaceID: "demo"}, client.MatchingLabels{"tier": "gold"}}, []string{"team-a/ws-a-demo-1"}},
		{"index, other namespace", []client.ListOption{client.InNamespace("team-b"), client.MatchingFields{podcache.IndexWorkspaceID: "other"}}, nil},
		{"read only", []client.ListOption{client.InNamespace("team-b"), client.UnsafeDisableDeepCopy}, []string{"team-b/ws-b-demo"}},
	} {
		if got := names(tc.opts...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	// ReadWorkspace hands over the pods a List by the workspace-id index returns, in the same
	// order, with the same labels, annotations and kept fields, into reused memory: fewer
	// allocations than the List (no pod struct and no maps per pod).
	wr, ok := ca.(interface {
		ReadWorkspace(ctx context.Context, ns, id string, fn func(pods []*corev1.Pod) error) error
	})
	if !ok {
		t.Fatalf("nogoo9's cache (%T) has no ReadWorkspace", ca)
	}
	for _, k := range []struct{ ns, id string }{{"team-a", "demo"}, {"team-a", "other"}, {"team-b", "demo"}, {"team-b", "other"}} {
		var byList corev1.PodList
		if err := ca.List(ctx, &byList, client.InNamespace(k.ns), client.MatchingFields{podcache.IndexWorkspaceID: k.id}); err != nil {
			t.Fatal(err)
		}
		var read []corev1.Pod
		if err := wr.ReadWorkspace(ctx, k.ns, k.id, func(pods []*corev1.Pod) error {
			for _, p := range pods {
				read = append(read, *p.DeepCopy())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(byList.Items, read, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b corev1.Pod) bool { return a.Name < b.Name })); d != "" {
			t.Errorf("ReadWorkspace(%s, %s) differs from the List by id (-list +read):\n%s", k.ns, k.id, d)
		}
	}
	errStop := errors.New("stop")
	if err := wr.ReadWorkspace(ctx, "team-a", "demo", func([]*corev1.Pod) error { return errStop }); !errors.Is(err, errStop) {
		t.Errorf("ReadWorkspace returned %v, not its function's error", err)
	}
	listAllocs := testing.AllocsPerRun(50, func() {
		var l corev1.PodList
		_ = ca.List(ctx, &l, client.InNamespace("team-a"), client.MatchingFields{podcache.IndexWorkspaceID: "demo"}, client.UnsafeDisableDeepCopy)
	})
	readAllocs := testing.AllocsPerRun(50, func() {
		_ = wr.ReadWorkspace(ctx, "team-a", "demo", func([]*corev1.Pod) error { return nil })
	})
	if readAllocs >= listAllocs {
		t.Errorf("ReadWorkspace of two pods: %.0f allocations, a read-only List: %.0f; want fewer", readAllocs, listAllocs)
	}
	t.Logf("two pods: ReadWorkspace %.0f allocations, read-only List %.0f", readAllocs, listAllocs)

	var limited corev1.PodList
	if err := ca.List(ctx, &limited, client.InNamespace("team-a"), client.Limit(2)); err != nil || len(limited.Items) != 2 {
		t.Errorf("limit 2: %d pods, %v", len(limited.Items), err)
	}
	var bad corev1.PodList
	if err := ca.List(ctx, &bad, client.MatchingFields{"spec.nodeName": "n"}); err == nil {
		t.Error("a List by a field no index serves succeeded")
	}
	if err := ca.List(ctx, &bad, client.InNamespace("team-a"), client.Limit(1), client.Continue("x")); err == nil {
		t.Error("a List continuing a page succeeded (a paging loop would stop after the first page)")
	}

	// Get: the kept fields, as the transform keeps them (once the cache has the API server's
	// version of the pod: nothing writes it here, but the cache may lag).
	var got corev1.Pod
	deadline = time.Now().Add(30 * time.Second)
	for {
		if err := ca.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "ws-a-demo-1"}, &got); err != nil {
			t.Fatal(err)
		}
		var api corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "ws-a-demo-1"}, &api); err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion == api.ResourceVersion {
			want, err := podcache.Strip(api.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			want.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
			if d := cmp.Diff(want, &got); d != "" {
				t.Errorf("Get differs from the API server's pod as the transform keeps it (-want +got):\n%s", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache still has version %s of the pod after 30 s; the API server has %s", got.ResourceVersion, api.ResourceVersion)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got.Spec.Volumes) != 1 || got.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "home-demo" {
		t.Errorf("Get lost the claim: %+v", got.Spec.Volumes)
	}
	err = ca.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "ws-a-demo-1"}, &corev1.Pod{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Get of a pod in another namespace: %v, want NotFound", err)
	}
	if err := ca.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "other"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a pod the cache does not hold: %v, want NotFound", err)
	}

	// The caller's copy is its own: changing a Get's or a List's result changes nothing cached.
	got.Labels["tier"] = "changed"
	got.Annotations[workspace.AnnOwner] = "mallory"
	got.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "changed"
	var l corev1.PodList
	if err := ca.List(ctx, &l, client.InNamespace("team-b")); err != nil {
		t.Fatal(err)
	}
	l.Items[0].Labels["tier"] = "changed"
	for _, key := range []client.ObjectKey{{Namespace: "team-a", Name: "ws-a-demo-1"}, {Namespace: "team-b", Name: "ws-b-demo"}} {
		var again corev1.Pod
		if err := ca.Get(ctx, key, &again); err != nil {
			t.Fatal(err)
		}
		if again.Labels["tier"] != "gold" || again.Annotations[workspace.AnnOwner] != "alice" || again.Spec.Volumes[0].PersistentVolumeClaim.ClaimName == "changed" {
			t.Errorf("%s: a change to a returned copy reached the cache: labels %v, annotations %v", key, again.Labels, again.Annotations)
		}
	}

	// An update that changes a label's value and adds a label (a new key set) reaches the cache's
	// selectors, and leaves the other pods' values, which share their keys, as they were.
	var other corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "ws-a-other"}, &other); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(other.DeepCopy())
	other.Labels["tier"], other.Labels["extra"] = "free", "yes"
	if err := c.Patch(ctx, &other, patch); err != nil {
		t.Fatal(err)
	}
	exists, err := labels.Parse("extra")
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for !slices.Equal(names(client.InNamespace("team-a"), client.MatchingLabels{"tier": "free"}), []string{"team-a/ws-a-demo-2", "team-a/ws-a-other"}) {
		if time.Now().After(deadline) {
			t.Fatalf("the cache never showed the changed label: tier=free lists %v", names(client.InNamespace("team-a"), client.MatchingLabels{"tier": "free"}))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		opts []client.ListOption
		want []string
	}{
		{"changed value, old", []client.ListOption{client.MatchingLabels{"tier": "gold"}}, []string{"team-a/ws-a-demo-1", "team-b/ws-b-demo"}},
		{"added key", []client.ListOption{client.MatchingLabelsSelector{Selector: exists}}, []string{"team-a/ws-a-other"}},
		{"added key by id", []client.ListOption{client.InNamespace("team-a"), client.MatchingFields{podcache.IndexWorkspaceID: "other"}, client.MatchingLabels{"extra": "yes"}}, []string{"team-a/ws-a-other"}},
	} {
		if got := names(tc.opts...); !slices.Equal(got, tc.want) {
			t.Errorf("after the update, %s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// Other kinds are the wrapped cache's (namespaces are not cached here: the lazily made
	// informer answers).
	var cms corev1.ConfigMapList
	if err := ca.List(ctx, &cms, client.InNamespace("team-a")); err != nil {
		t.Errorf("List of another kind: %v", err)
	}
}
