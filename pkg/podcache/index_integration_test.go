package podcache_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// TestWorkspaceIDIndexOneKeyPerPod runs the workspace-id index on controller-runtime's cache over
// a real kube-apiserver, with one workspace id used in two namespaces (--namespaces) and another
// id in the same bucket: a List by the index in a namespace returns exactly that workspace's pods
// there, and the index files each pod under one key only, its namespace and id bucket
// (controller-runtime's IndexField files it under two keys per id, which is what this index saves).
func TestWorkspaceIDIndexOneKeyPerPod(t *testing.T) {
	ctx, cfg, c, ca := newPodCache(t, "team-a", "team-b")
	if err := podcache.AddWorkspaceIDIndex(ctx, ca); err != nil {
		t.Fatal(err)
	}
	if err := podcache.AddWorkspaceIDIndex(ctx, ca); err != nil {
		t.Fatalf("a second registration must be a no-op: %v", err)
	}
	go func() { _ = ca.Start(ctx) }()

	// rival is an id in demo's bucket: a List by id must not return its pod with demo's.
	rival := ""
	for i := 0; rival == ""; i++ {
		if id := fmt.Sprintf("rival-%d", i); bucket(id) == bucket("demo") {
			rival = id
		}
	}
	pods := []struct{ ns, name, id string }{
		{"team-a", "ws-a-demo-1", "demo"}, {"team-a", "ws-a-demo-2", "demo"}, {"team-a", "ws-a-other", "other"},
		{"team-b", "ws-b-demo", "demo"}, {"team-a", "ws-a-rival", rival},
	}
	for _, p := range pods {
		err := c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns,
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: p.id}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	list := func(ns, id string) []string {
		var l corev1.PodList
		if err := ca.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{podcache.IndexWorkspaceID: id}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		return names
	}
	// The cache is eventually consistent: wait (bounded) for the last pod.
	for !slices.Equal(list("team-b", "demo"), []string{"ws-b-demo"}) || len(list("team-a", "demo")) < 2 || len(list("team-a", rival)) < 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("the cache never showed the pods: team-a/demo %v, team-b/demo %v", list("team-a", "demo"), list("team-b", "demo"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, tc := range []struct {
		ns, id string
		want   []string
	}{
		{"team-a", "demo", []string{"ws-a-demo-1", "ws-a-demo-2"}},
		{"team-a", "other", []string{"ws-a-other"}},
		{"team-b", "demo", []string{"ws-b-demo"}},
		{"team-b", "other", nil},
		{"team-a", rival, []string{"ws-a-rival"}},
		{"team-b", rival, nil},
	} {
		if got := list(tc.ns, tc.id); !slices.Equal(got, tc.want) {
			t.Errorf("pods of workspace %s/%s: got %v, want %v", tc.ns, tc.id, got, tc.want)
		}
	}

	// The index is per namespace: a List by id across namespaces is an error, not an empty list.
	var all corev1.PodList
	if err := ca.List(ctx, &all, client.MatchingFields{podcache.IndexWorkspaceID: "demo"}); err == nil || !strings.Contains(err.Error(), "client.InNamespace") {
		t.Errorf("a List by id without a namespace: got %d pods and error %v, want an error naming client.InNamespace", len(all.Items), err)
	}

	// One key per pod: the informer's index holds "<namespace>/<bucket>" and nothing else. (Read on
	// a cluster-wide cache, whose pod informer is client-go's own; a namespaced one wraps one
	// such informer per namespace.)
	ca1, err := podcache.NewCache(cfg, cache.Options{Scheme: clientgoscheme.Scheme, ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := podcache.AddWorkspaceIDIndex(ctx, ca1); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca1.Start(ctx) }()
	if !ca1.WaitForCacheSync(ctx) {
		t.Fatal("the cluster-wide cache never synced")
	}
	inf, err := ca1.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	si, ok := any(inf).(toolscache.SharedIndexInformer)
	if !ok {
		t.Fatalf("pod informer is a %T, not a client-go SharedIndexInformer", inf)
	}
	keys := si.GetIndexer().ListIndexFuncValues("field:" + podcache.IndexWorkspaceID)
	sort.Strings(keys)
	want := []string{"team-a/" + bucket("demo"), "team-a/" + bucket("other"), "team-b/" + bucket("demo")}
	sort.Strings(want)
	want = slices.Compact(want)
	if !slices.Equal(keys, want) {
		t.Errorf("index keys: got %v, want %v (one namespaced bucket key per workspace id, shared by the bucket's ids)", keys, want)
	}
	for _, k := range keys {
		got, err := si.GetIndexer().ByIndex("field:"+podcache.IndexWorkspaceID, k)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods {
			if p.ns+"/"+bucket(p.id) == k {
				n++
			}
		}
		if len(got) != n {
			t.Errorf("index key %s holds %d pods, want %d (each pod under one key)", k, len(got), n)
		}
	}
}

// bucket is the workspace-id index's bucket of id (FNV-1a modulo podcache.IDBuckets), computed
// here on its own.
func bucket(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % podcache.IDBuckets))
}

// newPodCache starts a kube-apiserver with the given namespaces and returns a context bounded at
// 2 minutes, the API server's config, a direct client and nogoo9's pod cache over those
// namespaces, not started yet.
func newPodCache(t *testing.T, namespaces ...string) (context.Context, *rest.Config, client.Client, cache.Cache) {
	t.Helper()
	cfg, c := apiserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	for _, ns := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	opts := podcache.OptionsFor(namespaces)
	opts.Scheme = clientgoscheme.Scheme
	ca, err := podcache.NewCache(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, cfg, c, ca
}
