package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Logf, when set, logs the progress of long waits (the bench command sets it to its log).
var Logf func(format string, args ...any)

// ProgressEvery is how often a wait that has not ended logs what it sees.
const ProgressEvery = time.Minute

// podWatch keeps an up-to-date view of the pods of one namespace through an informer, so waiting
// for a rollout costs one watch instead of repeated lists of thousands of pods.
type podWatch struct {
	store   toolscache.Store
	changed chan struct{}
	stop    context.CancelFunc
}

// watchPods starts an informer on the pods of ns that match selector (may be empty) and waits for
// its first list. Stop it with close.
func watchPods(ctx context.Context, cs kubernetes.Interface, ns, selector string) (*podWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Core().V1().Pods().Informer()
	w := &podWatch{store: inf.GetStore(), changed: make(chan struct{}, 1), stop: cancel}
	poke := func() {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watch pods in %s: cache did not sync: %w", ns, ctx.Err())
	}
	return w, nil
}

func (w *podWatch) close() { w.stop() }

// pods returns the pods currently known.
func (w *podWatch) pods() []*corev1.Pod {
	items := w.store.List()
	out := make([]*corev1.Pod, 0, len(items))
	for _, it := range items {
		out = append(out, it.(*corev1.Pod))
	}
	return out
}

// wait returns when cond holds for the current pods, re-checking after every change (and every
// second, for conditions that also look elsewhere), or fails when ctx ends.
// Every ProgressEvery it logs what the watch shows (Logf), so a stalled set-up shows where.
func (w *podWatch) wait(ctx context.Context, what string, cond func([]*corev1.Pod) bool) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start, logged := time.Now(), time.Now()
	for {
		if cond(w.pods()) {
			return nil
		}
		if Logf != nil && time.Since(logged) >= ProgressEvery {
			logged = time.Now()
			Logf("still waiting for %s after %s: the watch shows %s", what, time.Since(start).Round(time.Second), describePods(w.pods()))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; the watch shows %s", what, ctx.Err(), describePods(w.pods()))
		case <-w.changed:
		case <-tick.C:
		}
	}
}

// describePods counts pods by revision (the benchmark's LabelRev, else a workspace's template
// version; "-" for neither) and state, for an error that says what did not come up:
// "rev 0: 1000 pods (Ready 612, unscheduled 388, deleting 0, other 0)".
func describePods(pods []*corev1.Pod) string {
	type counts struct{ all, ready, unscheduled, deleting int }
	byRev := map[string]*counts{}
	for _, p := range pods {
		rev := p.Labels[LabelRev]
		if rev == "" {
			rev = workspace.TemplateVersion(p)
		}
		if rev == "" {
			rev = "-"
		}
		c := byRev[rev]
		if c == nil {
			c = &counts{}
			byRev[rev] = c
		}
		c.all++
		switch {
		case p.DeletionTimestamp != nil:
			c.deleting++
		case podReady(p):
			c.ready++
		case p.Spec.NodeName == "":
			c.unscheduled++
		}
	}
	if len(byRev) == 0 {
		return "no pods"
	}
	revs := make([]string, 0, len(byRev))
	for r := range byRev {
		revs = append(revs, r)
	}
	slices.Sort(revs)
	parts := make([]string, 0, len(revs))
	for _, r := range revs {
		c := byRev[r]
		parts = append(parts, fmt.Sprintf("rev %s: %d pods (Ready %d, unscheduled %d, deleting %d, other %d)",
			r, c.all, c.ready, c.unscheduled, c.deleting, c.all-c.ready-c.unscheduled-c.deleting))
	}
	return strings.Join(parts, "; ")
}

// podReady reports whether pod is Running, not being deleted, and Ready.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idx := make(chan int)
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := range idx {
				if err := fn(ctx, i); err != nil {
					errs <- err
					cancel()
					for range idx {
					}
					return
				}
			}
			errs <- nil
		}()
	}
	go func() {
		defer close(idx)
		for i := 0; i < n; i++ {
			select {
			case idx <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// WaitPods watches the pods of ns matching selector until cond holds for them.
func WaitPods(ctx context.Context, cs kubernetes.Interface, ns, selector, what string, cond func([]*corev1.Pod) bool) error {
	w, err := watchPods(ctx, cs, ns, selector)
	if err != nil {
		return err
	}
	defer w.close()
	return w.wait(ctx, what, cond)
}

// Parallel runs fn(i) for i in [0, n) on workers goroutines and returns the first error.
func Parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	return parallel(ctx, n, workers, fn)
}

// Watch is a pod watch started ahead of a measurement, so that the watch's own list is not timed.
type Watch struct{ w *podWatch }

// StartWatch starts a watch of the pods of ns matching selector (may be empty) and waits for its
// first list.
func StartWatch(ctx context.Context, cs kubernetes.Interface, ns, selector string) (*Watch, error) {
	w, err := watchPods(ctx, cs, ns, selector)
	if err != nil {
		return nil, err
	}
	return &Watch{w: w}, nil
}

// Wait returns when cond holds for the current pods (see podWatch.wait).
func (w *Watch) Wait(ctx context.Context, what string, cond func([]*corev1.Pod) bool) error {
	return w.w.wait(ctx, what, cond)
}

// Close stops the watch.
func (w *Watch) Close() { w.w.close() }

// Poke makes Wait check its condition again now (something it reads besides the pods changed).
func (w *Watch) Poke() {
	select {
	case w.w.changed <- struct{}{}:
	default:
	}
}
