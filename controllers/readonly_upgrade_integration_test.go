package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// witnessReader is snapshotReader (every listed pod remembered with a copy) that also remembers
// every pod and claim it hands out by Get: the upgrade controller reads claims, and a pod after
// its create, without deep copies too.
type witnessReader struct {
	*snapshotReader
	mu     sync.Mutex
	claims []gotClaim
}

type gotClaim struct{ claim, copy *corev1.PersistentVolumeClaim }

func (w *witnessReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := w.snapshotReader.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		w.snapshotReader.mu.Lock()
		w.seen = append(w.seen, listed{pod: o, copy: o.DeepCopy()})
		w.snapshotReader.mu.Unlock()
	case *corev1.PersistentVolumeClaim:
		w.mu.Lock()
		w.claims = append(w.claims, gotClaim{claim: o, copy: o.DeepCopy()})
		w.mu.Unlock()
	}
	return nil
}

// changed returns the differences between every pod and claim handed out and its copy.
func (w *witnessReader) changed() []string {
	out := w.snapshotReader.changed()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.claims {
		if d := cmp.Diff(c.copy, c.claim); d != "" {
			out = append(out, "claim "+c.claim.Name+": "+d)
		}
	}
	return out
}

// sharedTemplates hands out its templates themselves, as templates.Shared does (no copy per
// Get), and keeps a copy of each as it was set, to compare with afterwards.
type sharedTemplates struct {
	fakeTemplates
	mu   sync.Mutex
	set  []*templates.Template
	copy []*templates.Template
	gets int
}

func (s *sharedTemplates) Get(name string) (*templates.Template, bool) {
	s.fakeTemplates.mu.Lock()
	t, ok := s.m[name]
	s.fakeTemplates.mu.Unlock()
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	return t, ok
}

func (s *sharedTemplates) serve(t *templates.Template) {
	s.mu.Lock()
	s.set, s.copy = append(s.set, t), append(s.copy, t.DeepCopy())
	s.mu.Unlock()
	s.fakeTemplates.set(t)
}

func (s *sharedTemplates) changed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, t := range s.set {
		// The template's memo (templates.Template.Derived) is written once by design.
		if d := cmp.Diff(s.copy[i], t, cmpopts.IgnoreUnexported(templates.Template{})); d != "" {
			out = append(out, t.Name+" "+t.Version+": "+d)
		}
	}
	return out
}

// TestUpgradeReconcilerNeverMutatesTheCache proves what lets the upgrade controller observe
// without deep copies (client.UnsafeDisableDeepCopy) and read the registry's templates without a
// copy per pass (templates.Shared): a whole upgrade, side by side and Recreate (the create, the
// gate, the delete, the rollback record's removal), and one that fails at its deadline (the
// error's patch and Event), only read the pods, claims and templates the controller was handed.
// It runs the controller on a real kube-apiserver and cache with a reader that copies everything
// it hands out, and compares afterwards. The last steps write into a handed-out pod and template
// on purpose and expect the checks to see it, so they can fail.
func TestUpgradeReconcilerNeverMutatesTheCache(t *testing.T) {
	cfg, c := startAPIServer(t)
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, c, "readonly-up")
	src := &sharedTemplates{}
	rwop := ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod)
	rwop.Name = "ide-rwop"
	src.serve(ideTemplate("v1", "ide:1", ""))
	src.serve(rwop)
	e := &upgradeEnv{t: t, g: g, cfg: cfg, c: c, ns: ns, reg: &src.fakeTemplates, clock: &testClock{now: time.Now()}}

	mgr := newTestManager(t, cfg, func(o *ctrl.Options) {
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject:          map[client.Object]cache.ByObject{&corev1.Pod{}: podcache.Pods()},
		}
	})
	e.view = mgr.GetCache()
	writer, err := newPodDeletes(mgr.GetClient(), mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	managerSeq.Lock()
	managerSeq.n++
	name := fmt.Sprintf("%s-%d", UpgradeControllerName, managerSeq.n)
	managerSeq.Unlock()
	reader := &witnessReader{snapshotReader: &snapshotReader{Reader: mgr.GetCache()}}
	r := &WorkspaceReconciler{Client: writer, Reader: reader, APIReader: mgr.GetAPIReader(), Templates: src,
		Recorder: mgr.GetEventRecorderFor(name), //nolint:staticcheck // as SetupWorkspaceReconciler
		Opts:     UpgradeOptions{Name: name, Now: e.clock.Now}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	stop := runManager(t, ctx, mgr)

	spawn := func(tmpl *templates.Template, owner, id string) *corev1.Pod {
		t.Helper()
		pod, claims, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: owner, ID: id, Namespace: ns}, workspace.PodName(owner, id))
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range claims {
			cl.Namespace = ns
			g.Expect(c.Create(ctx, cl)).To(gomega.Succeed())
		}
		pod.Namespace = ns
		g.Expect(c.Create(ctx, pod)).To(gomega.Succeed())
		e.setReady(pod.Name)
		return e.get(pod.Name)
	}
	sideOld := spawn(ideTemplate("v1", "ide:1", ""), "jane", "side")
	failOld := spawn(ideTemplate("v1", "ide:1", ""), "jane", "fails")
	recOld := spawn(rwop, "carol", "data")
	src.serve(ideTemplate("v2", "ide:2", ""))
	v2 := ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod)
	v2.Name = "ide-rwop"
	src.serve(v2)
	for _, p := range []*corev1.Pod{sideOld, failOld, recOld} {
		e.annotate(p.Name, workspace.AnnUpgradeRequested, str("true"))
	}

	// Side by side: the new pod, Ready, replaces the old one.
	side := e.upgradedPod("side", sideOld.Name)
	e.setReady(side.Name)
	// Recreate: the old pod goes, the new one comes up and the rollback record is removed.
	rec := e.recreatedPod("data", recOld.Name)
	e.setReady(rec.Name)
	// The third one never becomes Ready and fails at the deadline.
	fail := e.upgradedPod("fails", failOld.Name)
	e.setWaiting(fail.Name, "ImagePullBackOff", "Back-off pulling image")
	g.Eventually(func(g gomega.Gomega) {
		pods := e.pods(g, "side")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods).To(gomega.HaveKey(side.Name))
		pods = e.pods(g, "data")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods[rec.Name]).NotTo(gomega.BeNil())
		g.Expect(pods[rec.Name].Annotations).NotTo(gomega.HaveKey(workspace.AnnRollbackSpec))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	e.failPastDeadline(fail.Name, "ErrImagePull", "not found")
	g.Eventually(func(g gomega.Gomega) {
		pods := e.pods(g, "fails")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods[failOld.Name]).NotTo(gomega.BeNil())
		g.Expect(pods[failOld.Name].Annotations).To(gomega.HaveKey(workspace.AnnLastUpgradeError))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	stop() // no pass runs while the copies are compared

	reader.snapshotReader.mu.Lock()
	seen := len(reader.seen)
	reader.snapshotReader.mu.Unlock()
	if seen < 20 || len(reader.claims) == 0 || src.gets < 10 {
		t.Fatalf("the controller was handed %d pods, %d claims and %d templates through the witnesses: too few for the check to mean anything", seen, len(reader.claims), src.gets)
	}
	for _, d := range reader.changed() {
		t.Errorf("the upgrade controller changed a cached object it was handed (-as handed out +after):\n%s", d)
	}
	for _, d := range src.changed() {
		t.Errorf("the upgrade controller changed a shared template (-as served +after):\n%s", d)
	}

	// The checks see a write into a handed-out pod, a claim and a template.
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil || len(list.Items) == 0 {
		t.Fatalf("list: %v (%d pods)", err, len(list.Items))
	}
	list.Items[0].Labels["example.com/written"] = "by the test"
	if len(reader.changed()) == 0 {
		t.Error("a label written into a listed pod went unnoticed: the check cannot fail")
	}
	claimWritten := func() bool {
		for _, d := range reader.changed() {
			if len(d) > 6 && d[:6] == "claim " {
				return true
			}
		}
		return false
	}
	reader.claims[0].claim.Labels = map[string]string{"example.com/written": "by the test"}
	if !claimWritten() {
		t.Error("a label written into a claim handed out went unnoticed: the check cannot fail")
	}
	src.set[0].Annotations = map[string]string{"example.com/written": "by the test"}
	if len(src.changed()) == 0 {
		t.Error("an annotation written into a served template went unnoticed: the check cannot fail")
	}
}
