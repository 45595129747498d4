// Package podcache is how nogoo9 caches what it watches: which objects, filtered and stripped how
// (Options, Pods), the compact type workspace pods are stored as (Pod) and the cache that serves
// them to readers as *corev1.Pod (NewCache), and the field index on workspace pods that the
// controllers and the front end share (IndexWorkspaceID). main.go, the integration tests and the benchmarks all build their
// caches from here, so they cache exactly what production caches.
package podcache

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Pods is the cache entry for pods: only workspace pods, reduced by Transform to the fields some
// component reads and stored as a Pod, so a cluster's other pods cost nothing and a workspace pod
// little. A cache with this entry must be made by NewCache: controller-runtime's own reads refuse
// the stored type.
func Pods() cache.ByObject {
	return cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{workspace.LabelType: workspace.TypeWorkspace}),
		Transform: Transform,
	}
}

// Options is the manager's cache: namespace's workspace pods (Pods), template ConfigMaps and
// PersistentVolumeClaims, stripped of managed fields.
func Options(namespace string) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: Pods(),
			&corev1.ConfigMap{}: {
				Label:     labels.SelectorFromSet(labels.Set{workspace.LabelPodTemplate: "true"}),
				Transform: workspace.StripManagedFields,
			},
			&corev1.PersistentVolumeClaim{}: {Transform: workspace.StripManagedFields},
		},
	}
}

// IndexWorkspaceID is the pod field index holding the workspace id, so one workspace's pods are
// listed without scanning every cached pod. Every List by it names its namespace
// (client.InNamespace): the index holds only namespaced keys (see AddWorkspaceIDIndex).
const IndexWorkspaceID = "nogoo9.workspaceID"

// WorkspaceID is the IndexWorkspaceID index function (client.IndexerFunc, for IndexField and
// fake clients).
func WorkspaceID(o client.Object) []string {
	if IsPod(o) && workspace.IsWorkspaceObject(o) {
		return []string{workspace.IDOf(o)}
	}
	return nil
}

// IsPod reports whether obj is a pod as a cache or a fake client holds it (*Pod, *corev1.Pod).
func IsPod(obj any) bool {
	switch p := obj.(type) {
	case *Pod:
		return p != nil
	case *corev1.Pod:
		return p != nil
	}
	return false
}

// indexed records the indexers that already have IndexWorkspaceID: several components register
// it on one manager, and registering a name twice is an error.
var indexed sync.Map

// informers is the part of controller-runtime's cache that hands out informers.
type informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// AddWorkspaceIDIndex registers IndexWorkspaceID on idx once; later calls for the same idx do
// nothing. Call it before the cache starts.
//
// On nogoo9's Cache (NewCache) it adds the index to the pod informer itself, filing each pod under
// its namespace and a bucket of its workspace id ("<namespace>/<bucket>", IDBuckets buckets), and
// the Cache's List by the index reads the bucket and keeps the pods of the id. client-go's indexer
// keeps a set per index key: a key per workspace id cost 316 bytes per workspace at 10,000 (a
// one-element set and its key, BenchmarkBytesPerWorkspace), a key per bucket is shared by the
// bucket's pods: 124 bytes (bench/history.md, "Ninth round"). On controller-runtime's own cache (an
// informer of *corev1.Pod read by controller-runtime's reader, which looks up "<namespace>/<id>")
// it files each pod under that one key; IndexField would file it under a second key too
// ("__all_namespaces/<id>", for lists across namespaces, which nogoo9 never makes).
// TestWorkspaceIDIndexOneKeyPerPod checks the lookups and the keys on a real API server. Other
// indexers (fake clients) get IndexField.
func AddWorkspaceIDIndex(ctx context.Context, idx client.FieldIndexer) error {
	if _, done := indexed.LoadOrStore(idx, true); done {
		return nil
	}
	var err error
	if inf, ok := idx.(informers); ok {
		fn := namespacedWorkspaceID
		c, bucketed := idx.(*Cache)
		if bucketed {
			fn = workspaceIDBucket
		}
		var i cache.Informer
		if i, err = inf.GetInformer(ctx, &corev1.Pod{}); err == nil {
			err = i.AddIndexers(toolscache.Indexers{"field:" + IndexWorkspaceID: fn})
		}
		if err == nil && bucketed {
			c.idBuckets.Store(true)
		}
	} else {
		err = idx.IndexField(ctx, &corev1.Pod{}, IndexWorkspaceID, WorkspaceID)
	}
	if err != nil {
		indexed.Delete(idx)
		return fmt.Errorf("index pods by workspace id: %w", err)
	}
	return nil
}

// namespacedWorkspaceID is the informer index function on controller-runtime's cache:
// "<namespace>/<workspace id>".
func namespacedWorkspaceID(obj any) ([]string, error) {
	o, ok := obj.(client.Object)
	if !ok || !IsPod(obj) || !workspace.IsWorkspaceObject(o) {
		return nil, nil
	}
	return []string{o.GetNamespace() + "/" + workspace.IDOf(o)}, nil
}

// IDBuckets is the number of workspace-id buckets per namespace in the Cache's id index. A List by
// id reads its bucket and keeps the pods of the id: about 2.5 pods a bucket at 10,000 workspaces,
// 5 at 20,000, 25 at 100,000 (each a label lookup, against the materialising of each pod
// returned). The index then holds 124 bytes per workspace at 10,000 instead of 316; 1,024 buckets
// held 53 but put 10 pods in a bucket, and a List by id took several times the per-id index's
// time in the start-up's first pass (bench/history.md, "Ninth round").
const IDBuckets = 4096

// workspaceIDBucket is the informer index function on the Cache: "<namespace>/<bucket>", the
// bucket an FNV-1a hash of the workspace id.
func workspaceIDBucket(obj any) ([]string, error) {
	o, ok := obj.(client.Object)
	if !ok || !IsPod(obj) || !workspace.IsWorkspaceObject(o) {
		return nil, nil
	}
	return []string{idBucketKey(o.GetNamespace(), workspace.IDOf(o))}, nil
}

// idBucketKey is the index key of workspace id in namespace ns.
func idBucketKey(ns, id string) string {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return ns + "/" + strconv.Itoa(int(h%IDBuckets))
}

// ReleaseAfterSync is a runnable (on every replica, leader or not) that returns the garbage of
// the start-up to the operating system once the start-up work is over: the initial list (every
// pod decoded whole before Transform reduced it) and the first pass of every event handler and
// reconciler over every workspace (at 10,000 workspaces, several hundred MB allocated in a few
// seconds). Without it the process keeps that peak as RSS until the Go runtime's background
// scavenger gets to it, minutes later, and the heap in use holds garbage no GC has swept yet.
//
// When Cache has synced (main.go passes the StartupGate's Controllers: the release of the
// controllers, --controllers-start-delay after the read path has the initial lists)
// it runs the garbage collector at StartupGCPercent (unless GOGC is set) while the controllers
// make their first pass, so that peak stays near the live heap instead of twice it; the
// collector then goes back to its default. After the cache has synced it samples the bytes allocated each Poll; when
// QuietPolls Polls in a row each allocated less than Quiet (the start-up is over: the controllers
// begin their first pass only after the sync, so one quiet Poll is not enough), or after Max, it
// collects and releases once (one forced GC, tens of milliseconds at 10,000 workspaces), restores
// the collector's target and ends.
type ReleaseAfterSync struct {
	Cache interface{ WaitForCacheSync(context.Context) bool }
	// StartupGCPercent is the GC target during the start-up (0: leave the collector alone).
	StartupGCPercent int
	// Poll is the sampling period, Quiet the allocation per Poll below which a Poll counts as
	// quiet, QuietPolls how many quiet Polls in a row end the start-up, Max the longest wait
	// after the sync (defaults: 500ms, 4 MiB, 4, 60s).
	Poll, Max  time.Duration
	Quiet      uint64
	QuietPolls int
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica caches.
func (ReleaseAfterSync) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (r ReleaseAfterSync) Start(ctx context.Context) error {
	if r.Poll <= 0 {
		r.Poll = 500 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = time.Minute
	}
	if r.Quiet == 0 {
		r.Quiet = 4 << 20
	}
	if r.QuietPolls <= 0 {
		r.QuietPolls = 4
	}
	if !r.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	// The initial list and the read path's first handling of it are on the cold start's path:
	// they run at the default target and nothing is released then (a forced collection there took
	// the CPU the first list needed); the controllers' first pass, after the sync (after the
	// StartupGate in main.go), runs at the lower one, and the release comes when it is over.
	if r.StartupGCPercent > 0 && os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(r.StartupGCPercent))
	}
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	deadline := time.Now().Add(r.Max)
	last, quiet := allocated(), 0
	for quiet < r.QuietPolls && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Poll):
		}
		now := allocated()
		if now-last < r.Quiet {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	debug.FreeOSMemory()
	return nil
}

// OptionsFor is Options over several namespaces (--namespaces): the same objects, stripped the
// same way, in each. OptionsFor([]string{ns}) equals Options(ns).
func OptionsFor(namespaces []string) cache.Options {
	o := Options(namespaces[0])
	for _, ns := range namespaces[1:] {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}
