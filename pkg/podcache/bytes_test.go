package podcache

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// BenchmarkBytesPerWorkspace reports what the cache holds per workspace pod, exactly (heap
// allocated after two collections, not a sampled profile): the pod as Transform leaves it (the
// compact Pod; and, for comparison, the stripped *corev1.Pod the cache held before it) and
// the informer store's entry with controller-runtime's namespace index and the workspace-id
// index (by bucket, as the Cache files it, and, for comparison, a key per id). The pods are decoded from protobuf like the informer's, ready, with a kubelet's four
// conditions. bench/history.md ("Sixth round") quotes it; it asserts nothing.
//
//	go test -run '^$' -bench BytesPerWorkspace -benchtime 1x ./pkg/podcache/
func BenchmarkBytesPerWorkspace(b *testing.B) {
	const n = 10000
	base := podcachetest.Ready()
	raw := make([][]byte, n)
	for i := range raw {
		p := base.DeepCopy()
		id, owner := fmt.Sprintf("ws-%d", i), fmt.Sprintf("user-%d", i%100)
		p.Name = workspace.PodName(owner, id)
		p.Labels[workspace.LabelWorkspaceID] = id
		p.Annotations[workspace.AnnOwner] = owner
		p.Annotations[workspace.AnnWorkspacePath] = "/ws/" + owner + "/" + id + "/"
		p.Status.PodIP = fmt.Sprintf("127.1.%d.%d", i/256, i%256)
		var err error
		if raw[i], err = p.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	heap := podcachetest.HeapAllocated
	for b.Loop() {
		// What the cache held before the compact Pod: the stripped *corev1.Pod.
		h := heap()
		stripped := make([]*corev1.Pod, n)
		for i := range stripped {
			p := &corev1.Pod{}
			if err := p.Unmarshal(raw[i]); err != nil {
				b.Fatal(err)
			}
			var err error
			if stripped[i], err = Strip(p); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric((heap()-h)/n, "corev1-pod-B/workspace")
		runtime.KeepAlive(stripped)
		stripped = nil

		h0 := heap()
		pods := make([]*Pod, n)
		for i := range pods {
			p := &corev1.Pod{}
			if err := p.Unmarshal(raw[i]); err != nil {
				b.Fatal(err)
			}
			o, err := Transform(p)
			if err != nil {
				b.Fatal(err)
			}
			pods[i] = o.(*Pod)
		}
		h1 := heap()
		store := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc,
			toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
		for _, p := range pods {
			if err := store.Add(p); err != nil {
				b.Fatal(err)
			}
		}
		h2 := heap()
		if err := store.AddIndexers(toolscache.Indexers{"field:" + IndexWorkspaceID: workspaceIDBucket}); err != nil {
			b.Fatal(err)
		}
		h3 := heap()
		// For comparison, the index with a key per workspace id (the Cache's until the ninth round).
		if err := store.AddIndexers(toolscache.Indexers{"per-id": namespacedWorkspaceID}); err != nil {
			b.Fatal(err)
		}
		h4 := heap()
		b.ReportMetric((h1-h0)/n, "pod-B/workspace")
		b.ReportMetric((h2-h1)/n, "store-B/workspace")
		b.ReportMetric((h3-h2)/n, "id-index-B/workspace")
		b.ReportMetric((h4-h3)/n, "per-id-index-B/workspace")
		runtime.KeepAlive(store)
	}
}

// BenchmarkLookupByWorkspaceID compares what the id index's lookup costs, by bucket (the Cache's:
// read the bucket, keep the id's pods) and with a key per id (its index until the ninth round),
// over 10,000 cached workspace pods in one namespace. It asserts nothing but the answers.
//
//	go test -run '^$' -bench LookupByWorkspaceID ./pkg/podcache/
func BenchmarkLookupByWorkspaceID(b *testing.B) {
	const n = 10000
	base := podcachetest.Ready()
	store := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc,
		toolscache.Indexers{"bucket": workspaceIDBucket, "per-id": namespacedWorkspaceID})
	ids := make([]string, n)
	for i := range ids {
		p := base.DeepCopy()
		ids[i] = fmt.Sprintf("ws-%d", i)
		p.Name = "pod-" + ids[i]
		p.Labels[workspace.LabelWorkspaceID] = ids[i]
		o, err := Transform(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Add(o); err != nil {
			b.Fatal(err)
		}
	}
	ns := base.Namespace
	b.Run("bucket", func(b *testing.B) {
		i := 0
		for b.Loop() {
			id := ids[i%n]
			got, err := store.ByIndex("bucket", idBucketKey(ns, id))
			if err != nil {
				b.Fatal(err)
			}
			k := 0
			for _, it := range got {
				if labelsOf(it).Get(workspace.LabelWorkspaceID) == id {
					k++
				}
			}
			if k != 1 {
				b.Fatalf("%d pods of %s", k, id)
			}
			i++
		}
	})
	b.Run("per-id", func(b *testing.B) {
		i := 0
		for b.Loop() {
			got, err := store.ByIndex("per-id", ns+"/"+ids[i%n])
			if err != nil || len(got) != 1 {
				b.Fatalf("%d pods of %s (%v)", len(got), ids[i%n], err)
			}
			i++
		}
	})
}
