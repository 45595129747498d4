package podcache

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// initialList is the timeline of one informer's initial list, for the start-up's log
// (StartupGate, bench/history.md "Eleventh round: cold start"): when its first request was
// sent and answered (client-go's streaming list: a watch with the initial events), for pods when
// the first and the last object of the list went through Transform (the last one is about when
// the stream ended: the informer then hands the whole list to its store and its handlers), and
// when the informer synced. It costs an atomic load per event once the informer has synced.
type initialList struct {
	kind string
	inf  toolscache.SharedIndexInformer

	done sync.Once // the request's stamps are taken once
	over atomic.Bool

	mu                  sync.Mutex
	requested, answered time.Time
	first, last         time.Time
	objects             int
	synced              time.Time
}

// newInitialList wraps lw so that its first request is timed.
func newInitialList(lw toolscache.ListerWatcher, obj runtime.Object) (*initialList, toolscache.ListerWatcher) {
	l := &initialList{kind: strings.TrimPrefix(reflect.TypeOf(obj).String(), "*")}
	return l, &timedListerWatcher{lw: toolscache.ToListerWatcherWithContext(lw), orig: lw, l: l}
}

// request stamps the first request (a streaming list's watch, or a list) and its answer.
func (l *initialList) request(call func()) {
	first := false
	l.done.Do(func() { first = true })
	if !first {
		call()
		return
	}
	s := time.Now()
	call()
	e := time.Now()
	l.mu.Lock()
	l.requested, l.answered = s, e
	l.mu.Unlock()
}

// transformed counts a pod of the initial list as Transform sees it. A pod already transformed
// (the informer hands the reduced list to its queue again when the stream ends) is not counted.
func (l *initialList) transformed(obj any) {
	if l.over.Load() {
		return
	}
	if _, ok := obj.(*corev1.Pod); !ok {
		return
	}
	now := time.Now()
	l.mu.Lock()
	if l.objects == 0 {
		l.first = now
	}
	l.last = now
	l.objects++
	l.mu.Unlock()
}

// waitSynced stamps the informer's sync; false if ctx ended first.
func (l *initialList) waitSynced(ctx context.Context) bool {
	select {
	case <-l.inf.HasSyncedChecker().Done():
	case <-ctx.Done():
		return false
	}
	l.over.Store(true)
	l.mu.Lock()
	if l.synced.IsZero() {
		l.synced = time.Now()
	}
	l.mu.Unlock()
	return true
}

// keysAndValues is the timeline as log key-value pairs, each time since start.
func (l *initialList) keysAndValues(start time.Time) []any {
	l.mu.Lock()
	defer l.mu.Unlock()
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(start).Round(time.Millisecond).String()
	}
	kv := []any{"kind", l.kind, "requestSent", since(l.requested), "answered", since(l.answered)}
	if l.objects > 0 {
		kv = append(kv, "objects", l.objects, "firstObject", since(l.first), "lastObject", since(l.last))
	}
	kv = append(kv, "objectsStored", len(l.inf.GetStore().ListKeys()), "synced", since(l.synced))
	return kv
}

// timedListerWatcher is a ListerWatcher that times its first request (initialList).
type timedListerWatcher struct {
	lw   toolscache.ListerWatcherWithContext
	orig toolscache.ListerWatcher
	l    *initialList
}

func (t *timedListerWatcher) List(o metav1.ListOptions) (runtime.Object, error) {
	return t.ListWithContext(context.Background(), o)
}

func (t *timedListerWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return t.WatchWithContext(context.Background(), o)
}

func (t *timedListerWatcher) ListWithContext(ctx context.Context, o metav1.ListOptions) (out runtime.Object, err error) {
	t.l.request(func() { out, err = t.lw.ListWithContext(ctx, o) })
	return out, err
}

func (t *timedListerWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (out watch.Interface, err error) {
	t.l.request(func() { out, err = t.lw.WatchWithContext(ctx, o) })
	return out, err
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher says (client-go's
// reflector asks, to choose between a streaming list and a list): the wrapper changes nothing.
func (t *timedListerWatcher) IsWatchListSemanticsUnSupported() bool {
	u, ok := t.orig.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

// timedInformer counts the initial list's pods as the informer's transform sees them.
type timedInformer struct {
	toolscache.SharedIndexInformer
	l *initialList
}

func (i timedInformer) SetTransform(f toolscache.TransformFunc) error {
	if f == nil {
		return i.SharedIndexInformer.SetTransform(nil)
	}
	return i.SharedIndexInformer.SetTransform(func(obj any) (any, error) {
		i.l.transformed(obj)
		return f(obj)
	})
}
