package podcache

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// TestCacheTimesEachInitialListAndWaitsForTheirSync runs nogoo9's Cache over a real API server
// with workspace pods and other pods: its WaitForCacheSync returns only once every informer has
// synced (it waits on their sync signals instead of polling, and still waits for an informer
// made after the first wait), and each informer's initial list is timed in order (request sent,
// answered, first and last workspace pod through the transform, synced), the pods counted once
// each although the informer hands its reduced list to the transform a second time.
func TestCacheTimesEachInitialListAndWaitsForTheirSync(t *testing.T) {
	cfg, c := apiserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, pods = "timeline", 15
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for i := range pods + 5 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "img"}}}}
		if i < pods { // the others are not workspace pods: the cache does not list them
			p.Labels = map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: fmt.Sprintf("w%d", i)}
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options(ns)
	opts.Scheme = clientgoscheme.Scheme
	// Secrets with a field selector the API server refuses: an informer that never syncs.
	opts.ByObject[&corev1.Secret{}] = cache.ByObject{Field: fields.OneTermEqualSelector("spec.nope", "x")}
	ca, err := NewCache(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	cc := ca.(*Cache)
	for _, obj := range []*corev1.ConfigMap{{}} {
		if _, err := ca.GetInformer(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ca.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	if cc.WaitForCacheSync(stopped) {
		t.Fatal("WaitForCacheSync reported a sync for a context that ended before the cache started")
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("the cache never synced")
	}
	lists := cc.initialLists()
	if len(lists) != 2 {
		t.Fatalf("%d initial lists timed, want 2 (pods, template ConfigMaps)", len(lists))
	}
	for _, l := range lists {
		if !l.inf.HasSynced() {
			t.Errorf("%s: WaitForCacheSync returned before the informer synced", l.kind)
		}
		if !l.waitSynced(ctx) {
			t.Fatalf("%s: no sync stamp", l.kind)
		}
		l.mu.Lock()
		order := []time.Time{l.requested, l.answered}
		if l.kind == "v1.Pod" {
			if l.objects != pods {
				t.Errorf("pods: %d objects through the transform, want %d (each once)", l.objects, pods)
			}
			order = append(order, l.first, l.last)
		}
		order = append(order, l.synced)
		for i, tm := range order {
			if tm.IsZero() || (i > 0 && tm.Before(order[i-1])) {
				t.Errorf("%s: stamps %v are not all set and in order (request, answer, first, last, synced)", l.kind, order)
				break
			}
		}
		l.mu.Unlock()
		kv := l.keysAndValues(order[0])
		if fmt.Sprint(kv[0:2]) != fmt.Sprint([]any{"kind", l.kind}) {
			t.Errorf("log values %v do not start with the kind", kv)
		}
	}
	// An informer made after the cache started: the wait covers it too. It cannot sync (a field
	// selector the API server refuses), so the wait must not return true while the cache holds it,
	// and must once the informer is removed.
	if _, err := ca.GetInformer(ctx, &corev1.Secret{}, cache.BlockUntilSynced(false)); err != nil {
		t.Fatal(err)
	}
	if n := len(cc.initialLists()); n != 3 {
		t.Errorf("%d initial lists timed after a third informer, want 3", n)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if ca.WaitForCacheSync(short) {
		t.Error("WaitForCacheSync returned true while an informer made after the start had not synced")
	}
	if err := ca.RemoveInformer(ctx, &corev1.Secret{}); err != nil {
		t.Fatal(err)
	}
	bounded, cancelBounded := context.WithTimeout(ctx, 20*time.Second)
	defer cancelBounded()
	if !ca.WaitForCacheSync(bounded) {
		t.Error("WaitForCacheSync did not return true once the informer that cannot sync was removed")
	}

	// The start-up gate, as main.go runs it (Started set: it logs each initial list), opens
	// although the removed informer never synced.
	gate := NewStartupGate(ca)
	gate.Started = time.Now()
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	go func() { _ = gate.Start(gctx) }()
	select {
	case <-gate.Opened():
	case <-time.After(20 * time.Second):
		t.Fatal("the start-up gate did not open within 20 s: it waited for an informer the cache dropped before its sync")
	}
}
