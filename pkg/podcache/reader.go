package podcache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Cache is controller-runtime's cache with Pod reads served from the pod informers' stores,
// which hold *Pod (Transform): controller-runtime's own reader assigns the stored object to the
// caller's *corev1.Pod and refuses another type. A Get or List of pods materialises each pod
// (Pod.Materialize); every other kind, and everything else (informers, indexes, sync), is the
// wrapped cache's.
//
// The stores are the informers' own (captured as controller-runtime creates them, one per
// watched namespace), read the way controller-runtime reads them: by key, by the namespace index,
// by a field index ("field:<name>", "<namespace>/<value>"; the workspace-id index files pods by
// "<namespace>/<bucket of the id>", and a List keeps the id's own), then filtered by label selector. So a
// reconcile sees every pod write its triggering event reflected, as before. A Get's result and a
// List's items are the caller's: their maps and slices are copies, except with
// client.UnsafeDisableDeepCopy, whose results share their slices with the cache (read only; the
// label and annotation maps are built for each result either way: the cache holds none).
//
// NewCache is the manager's NewCache (main.go); the integration tests build their managers with
// it too.
type Cache struct {
	cache.Cache

	mu        sync.RWMutex
	informers []toolscache.SharedIndexInformer // the pod informers, one per watched namespace
	stores    []toolscache.Indexer             // their stores
	idBuckets atomic.Bool                      // the workspace-id index files pods by bucket (AddWorkspaceIDIndex)
	lists     []*initialList                   // every informer's initial list, timed for the start-up's log
	ctx       context.Context                  // Start's
}

// Start implements cache.Cache: it starts the informers and stamps each one's sync as it comes
// (initialList).
func (c *Cache) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	for _, l := range c.lists {
		go l.waitSynced(ctx)
	}
	c.mu.Unlock()
	return c.Cache.Start(ctx)
}

// WaitForCacheSync implements cache.Cache. controller-runtime's polls its informers every 100 ms
// (client-go's WaitForCacheSync), and the manager starts every other runnable, the StartupGate
// included, only once it returns: a replica turned ready 0-100 ms after its informers had synced
// (bench/history.md, "Eleventh round: cold start"). This one first waits for the informers
// made so far to signal their sync, then asks the wrapped cache, which then finds them synced at
// its first look (and waits as before for any informer made since). The wrapped cache's own
// wait runs beside the signals' and ends this one if it returns first: an informer made but then
// dropped by the wrapped cache (its set-up failing after it was made) never signals, and must not
// hold the start.
func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	polled := make(chan bool, 1)
	go func() { polled <- c.Cache.WaitForCacheSync(ctx) }()
	for _, l := range c.initialLists() {
		select {
		case <-l.inf.HasSyncedChecker().Done():
		case ok := <-polled:
			return ok
		case <-ctx.Done():
			return false
		}
	}
	return c.Cache.WaitForCacheSync(ctx)
}

// initialLists returns the timelines of the initial lists of the informers made so far.
func (c *Cache) initialLists() []*initialList {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]*initialList(nil), c.lists...)
}

// NewCache is cache.New, with Pod Get and List served by Cache.
func NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	c := &Cache{}
	newInformer := opts.NewInformer
	if newInformer == nil {
		newInformer = toolscache.NewSharedIndexInformer
	}
	opts.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		l, lw := newInitialList(lw, obj)
		inf := newInformer(lw, obj, resync, idx)
		l.inf = inf
		c.mu.Lock()
		c.lists = append(c.lists, l)
		if c.ctx != nil {
			go l.waitSynced(c.ctx)
		}
		c.mu.Unlock()
		if _, ok := obj.(*corev1.Pod); ok {
			c.mu.Lock()
			c.informers = append(c.informers, inf)
			c.stores = append(c.stores, inf.GetIndexer())
			c.mu.Unlock()
		}
		return timedInformer{SharedIndexInformer: inf, l: l}
	}
	inner, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	c.Cache = inner
	return c, nil
}

// podStores makes sure the pod informers exist (and, once the cache has started, have synced,
// as the wrapped cache's reads would) and returns their stores.
// Once they have all synced, a read goes to the stores at once: asking the wrapped cache for the
// informer again would build a map of the namespaces' informers per read (two reads per workspace
// in the controllers' first pass).
func (c *Cache) podStores(ctx context.Context) ([]toolscache.Indexer, error) {
	if stores, ok := c.synced(); ok {
		return stores, nil
	}
	if _, err := c.Cache.GetInformer(ctx, &corev1.Pod{}); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stores, nil
}

func (c *Cache) synced() ([]toolscache.Indexer, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.informers) == 0 {
		return nil, false
	}
	for _, i := range c.informers {
		if !i.HasSynced() {
			return nil, false
		}
	}
	return c.stores, true
}

// Get implements client.Reader.
func (c *Cache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	out, ok := obj.(*corev1.Pod)
	if !ok {
		return c.Cache.Get(ctx, key, obj, opts...)
	}
	o := client.GetOptions{}
	o.ApplyOptions(opts)
	stores, err := c.podStores(ctx)
	if err != nil {
		return err
	}
	for _, s := range stores {
		item, exists, err := s.GetByKey(key.Namespace + "/" + key.Name)
		if err != nil {
			return err
		}
		if exists {
			return into(item, out, o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy)
		}
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

// FullPod fills out with pod key in full (labels, annotations, spec) as its last watch event
// brought it, when the cache kept its spec (KeepsSpec) and holds it as uid at resourceVersion rv:
// then it is what a read from the API server at that version would give, but for the
// annotations Transform drops (nogoo9/rollback-spec, kubectl's last-applied copy). false:
// not kept, or another version or pod; read it from the API server. out's status is the cached
// one; its spec is shared with the cache (read only).
func (c *Cache) FullPod(ctx context.Context, key client.ObjectKey, uid types.UID, rv string, out *corev1.Pod) bool {
	stores, err := c.podStores(ctx)
	if err != nil {
		return false
	}
	for _, s := range stores {
		item, exists, err := s.GetByKey(key.Namespace + "/" + key.Name)
		if err != nil || !exists {
			continue
		}
		p := Of(item)
		if p == nil || p.UID != uid || p.ResourceVersion != rv || p.Rare == nil || p.Rare.Spec == nil {
			return false
		}
		p.MaterializeInto(out)
		out.Spec = *p.Rare.Spec
		return true
	}
	return false
}

// List implements client.Reader.
func (c *Cache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	out, ok := list.(*corev1.PodList)
	if !ok {
		return c.Cache.List(ctx, list, opts...)
	}
	o := client.ListOptions{}
	o.ApplyOptions(opts)
	kept, err := c.selectPods(ctx, &o)
	if err != nil {
		return err
	}
	deep := o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy
	out.Items = make([]corev1.Pod, len(kept))
	for i, item := range kept {
		if err := into(item, &out.Items[i], deep); err != nil {
			return err
		}
	}
	out.ResourceVersion, out.Continue = "", ""
	return nil
}

// ReadWorkspace calls fn with the cached pods of workspace id in namespace ns (the same pods a
// List by the workspace-id index returns; neither has a fixed order), materialised into a
// Scratch: read only, their slices the cache's, and valid only until fn returns. A reader that keeps nothing of the
// pods past its pass (the phase controller, several times per workspace during a bulk upgrade)
// then makes no pod struct and no label and annotation map per pod and pass, as a List does.
func (c *Cache) ReadWorkspace(ctx context.Context, ns, id string, fn func(pods []*corev1.Pod) error) error {
	o := client.ListOptions{}
	o.ApplyOptions([]client.ListOption{client.InNamespace(ns), client.MatchingFields{IndexWorkspaceID: id}})
	kept, err := c.selectPods(ctx, &o)
	if err != nil {
		return err
	}
	cached := make([]*Pod, len(kept))
	for i, item := range kept {
		if cached[i], err = ofPod(item); err != nil {
			return fmt.Errorf("read the pods of workspace %s/%s: %w", ns, id, err)
		}
	}
	s := GetScratch()
	defer s.Release()
	return fn(s.Materialize(cached))
}

// selectPods returns the stored pods a List with o selects.
func (c *Cache) selectPods(ctx context.Context, o *client.ListOptions) ([]any, error) {
	if o.Continue != "" {
		return nil, fmt.Errorf("list cached pods: the continue option is not supported by the cache (as controller-runtime's): list from the API server to page")
	}
	field, value, err := exactField(o.FieldSelector)
	if err != nil {
		return nil, err
	}
	// The workspace-id index files pods by a bucket of their id (AddWorkspaceIDIndex): read the
	// bucket, keep the id's pods.
	byID := field == IndexWorkspaceID && c.idBuckets.Load()
	if byID && o.Namespace == "" {
		return nil, fmt.Errorf("list cached pods by %s=%q: the index is per namespace; name the namespace (client.InNamespace)", field, value)
	}
	stores, err := c.podStores(ctx)
	if err != nil {
		return nil, err
	}
	var items []any
	for _, s := range stores {
		var got []any
		switch {
		case byID:
			got, err = s.ByIndex("field:"+field, idBucketKey(o.Namespace, value))
		case field != "":
			key := value
			if o.Namespace != "" {
				key = o.Namespace + "/" + value
			} else {
				key = "__all_namespaces/" + value // controller-runtime's key for lists across namespaces
			}
			got, err = s.ByIndex("field:"+field, key)
		case o.Namespace != "":
			got, err = s.ByIndex(toolscache.NamespaceIndex, o.Namespace)
		default:
			got = s.List()
		}
		if err != nil {
			return nil, fmt.Errorf("list cached pods: %w", err)
		}
		items = append(items, got...)
	}
	// Select first, then make the items at their exact number: a bucket of the id index holds
	// other ids' pods too, and a pod struct per candidate (about 2.5 a bucket at 10,000 workspaces)
	// would be a few KB of garbage per List by id (12 KB with 1,024 buckets, measured).
	kept := items[:0]
	for _, item := range items {
		if o.LabelSelector != nil && !o.LabelSelector.Matches(labelsOf(item)) {
			continue
		}
		if o.Namespace != "" && namespaceOf(item) != o.Namespace {
			continue
		}
		if byID && labelsOf(item).Get(workspace.LabelWorkspaceID) != value {
			continue
		}
		if o.Limit > 0 && int64(len(kept)) >= o.Limit {
			break
		}
		kept = append(kept, item)
	}
	return kept, nil
}

// exactField is the one field a List selects on ("" for none); the cache serves only exact
// matches on one indexed field, as controller-runtime's does.
func exactField(s fields.Selector) (field, value string, err error) {
	if s == nil || s.Empty() {
		return "", "", nil
	}
	reqs := s.Requirements()
	if len(reqs) != 1 || (reqs[0].Operator != selection.Equals && reqs[0].Operator != selection.DoubleEquals) {
		return "", "", fmt.Errorf("list cached pods: field selector %q: the cache serves one exact match on an indexed field", s.String())
	}
	return reqs[0].Field, reqs[0].Value, nil
}

// labelsOf is a stored object's labels for a selector: a cached Pod's without building a map.
func labelsOf(item any) labels.Labels {
	switch p := item.(type) {
	case *Pod:
		return p.Labels()
	case *corev1.Pod:
		return labels.Set(p.Labels)
	}
	return labels.Set(nil)
}

func namespaceOf(item any) string {
	switch p := item.(type) {
	case *Pod:
		return p.Namespace
	case *corev1.Pod:
		return p.Namespace
	}
	return ""
}

// into fills out from a stored object; deep copies its maps and slices.
func into(item any, out *corev1.Pod, deep bool) error {
	switch p := item.(type) {
	case *Pod:
		if deep {
			p = p.DeepCopy()
		}
		p.MaterializeInto(out)
	case *corev1.Pod:
		if deep {
			p.DeepCopyInto(out)
		} else {
			*out = *p
		}
		out.TypeMeta = podTypeMeta
	default:
		return fmt.Errorf("cached pod store holds a %T", item)
	}
	return nil
}
