package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// fakeTemplates is a TemplateSource whose templates the test sets.
type fakeTemplates struct {
	mu   sync.Mutex
	m    map[string]*templates.Template
	subs []func(string)
}

func (f *fakeTemplates) Get(name string) (*templates.Template, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.m[name]
	if !ok {
		return nil, false
	}
	return t.DeepCopy(), true
}

func (f *fakeTemplates) Subscribe(fn func(string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
}

func (f *fakeTemplates) set(t *templates.Template) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*templates.Template{}
	}
	f.m[t.Name] = t
	subs := append([]func(string){}, f.subs...)
	f.mu.Unlock()
	for _, fn := range subs {
		fn(t.Name)
	}
}

// testClock is the controller's clock, moved by the test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ideTemplate is template "ide" at version with image, optionally with a claim of mode.
func ideTemplate(version, image string, mode corev1.PersistentVolumeAccessMode) *templates.Template {
	t := &templates.Template{Name: "ide", Version: version, Source: "test",
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: image, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
	if mode != "" {
		t.VolumeClaims = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "home"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{mode},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
		t.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "home", MountPath: "/home/user"}}
	}
	return t
}

// upgradeEnv is one namespace on the shared API server with a manager running the upgrade
// controller, and the helpers a story needs.
type upgradeEnv struct {
	t     *testing.T
	g     *gomega.WithT
	cfg   *rest.Config
	c     client.Client
	ns    string
	reg   *fakeTemplates
	clock *testClock
	opts  UpgradeOptions
	view  client.Reader // the manager's cache: what the controller sees
	stop  func()
}

var managerSeq struct {
	sync.Mutex
	n int
}

// start runs a manager like main.go's (stripped pod cache, one namespace) with the controller.
func (e *upgradeEnv) start() {
	e.t.Helper()
	e.startWithClient(nil)
}

// startWithClient is start with the manager's client wrapped by wrap (an interceptor; nil: none).
func (e *upgradeEnv) startWithClient(wrap func(client.WithWatch) client.WithWatch) {
	e.t.Helper()
	mgr := newTestManager(e.t, e.cfg, func(o *ctrl.Options) {
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{e.ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}: podcache.Pods(),
			},
		}
		if wrap != nil {
			o.NewClient = func(cfg *rest.Config, opts client.Options) (client.Client, error) {
				cl, err := client.NewWithWatch(cfg, opts)
				if err != nil {
					return nil, err
				}
				return wrap(cl), nil
			}
		}
	})
	opts := e.opts
	opts.Now = e.clock.Now
	managerSeq.Lock()
	managerSeq.n++
	opts.Name = fmt.Sprintf("%s-%d", UpgradeControllerName, managerSeq.n)
	managerSeq.Unlock()
	if err := SetupWorkspaceReconciler(mgr, e.reg, opts); err != nil {
		e.t.Fatal(err)
	}
	e.view = mgr.GetCache()
	e.stop = runManager(e.t, context.Background(), mgr)
}

// spawn creates a Ready workspace of owner with id from the current template, as the spawner would.
func (e *upgradeEnv) spawn(owner, id string) *corev1.Pod {
	e.t.Helper()
	tmpl, _ := e.reg.Get("ide")
	pod, claims, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: owner, ID: id, Namespace: e.ns}, workspace.PodName(owner, id))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range claims {
		c.Namespace = e.ns
		e.g.Expect(e.c.Create(ctx, c)).To(gomega.Succeed())
	}
	pod.Namespace = e.ns
	e.g.Expect(e.c.Create(ctx, pod)).To(gomega.Succeed())
	e.setReady(pod.Name)
	return e.get(pod.Name)
}

func (e *upgradeEnv) get(name string) *corev1.Pod {
	e.t.Helper()
	var p corev1.Pod
	e.g.Expect(e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: name}, &p)).To(gomega.Succeed())
	return &p
}

// setStatus plays the kubelet.
func (e *upgradeEnv) setStatus(name string, mut func(s *corev1.PodStatus)) {
	e.t.Helper()
	e.g.Eventually(func() error {
		var p corev1.Pod
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: name}, &p); err != nil {
			return err
		}
		mut(&p.Status)
		return e.c.Status().Update(context.Background(), &p)
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

func (e *upgradeEnv) setReady(name string) {
	e.setStatus(name, func(s *corev1.PodStatus) {
		s.Phase, s.PodIP = corev1.PodRunning, "10.244.0.9"
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Ready: true, Image: "x",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	})
}

func (e *upgradeEnv) setWaiting(name, reason, msg string) {
	e.setStatus(name, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Image: "x",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	})
}

// annotate is `kubectl annotate pod <name> key=value --overwrite` (value nil: key-).
func (e *upgradeEnv) annotate(name, key string, value *string) {
	e.t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}}
	e.g.Expect(e.c.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch)))).To(gomega.Succeed())
}

// poke changes an unrelated annotation of pod name, so the controller looks again (as the
// kubelet's next status write would).
func (e *upgradeEnv) poke(name string) {
	e.t.Helper()
	v := time.Now().Format(time.RFC3339Nano)
	e.annotate(name, "test.nogoo9/poke", &v)
}

// pods lists the workspace's pods that are not being deleted, by name.
// envSeq numbers the namespaces of newNamespaceEnv.
var envSeq atomic.Int64

// newNamespaceEnv is an upgradeEnv in a namespace of its own on the API server of cfg and c, with
// tmpl as its template; start runs its controller.
func newNamespaceEnv(t *testing.T, cfg *rest.Config, c client.Client, tmpl *templates.Template, opts UpgradeOptions) *upgradeEnv {
	t.Helper()
	ns := fmt.Sprintf("env-%d", envSeq.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	reg := &fakeTemplates{}
	reg.set(tmpl)
	return &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg, clock: &testClock{now: time.Now()}, opts: opts}
}

// only is the one live pod of workspace id (it fails g while there is not exactly one).
func (e *upgradeEnv) only(g gomega.Gomega, id string) *corev1.Pod {
	pods := e.pods(g, id)
	g.Expect(pods).To(gomega.HaveLen(1), "one live pod")
	for _, p := range pods {
		return p
	}
	return nil
}

func (e *upgradeEnv) pods(g gomega.Gomega, id string) map[string]*corev1.Pod {
	var list corev1.PodList
	g.Expect(e.c.List(context.Background(), &list, client.InNamespace(e.ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(gomega.Succeed())
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out
}

// upgradedPod waits for the one pod of id that replaces from, and returns it.
func (e *upgradeEnv) upgradedPod(id, from string) *corev1.Pod {
	e.t.Helper()
	var up *corev1.Pod
	e.g.Eventually(func(g gomega.Gomega) {
		up = nil
		for _, p := range e.pods(g, id) {
			if p.Annotations[workspace.AnnUpgradeFrom] == from {
				g.Expect(up).To(gomega.BeNil(), "two upgraded pods")
				up = p
			}
		}
		g.Expect(up).NotTo(gomega.BeNil())
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	return up
}

// recreatedPod waits until id's one pod is another than from (a recreate upgrade has deleted
// from and created the pod that replaces it), and returns it.
func (e *upgradeEnv) recreatedPod(id, from string) *corev1.Pod {
	e.t.Helper()
	var up *corev1.Pod
	e.g.Eventually(func(g gomega.Gomega) {
		pods := e.pods(g, id)
		g.Expect(pods).To(gomega.HaveLen(1))
		for _, p := range pods {
			up = p
		}
		g.Expect(up.Name).NotTo(gomega.Equal(from))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	return up
}

// recreateOntoBroken publishes v2 of the ReadWriteOnce template with an image that never starts,
// asks for old's upgrade and returns the pod that replaced old (the Recreate upgrade's new pod).
func (e *upgradeEnv) recreateOntoBroken(old *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	e.reg.set(ideTemplate("v2", "ide:broken", corev1.ReadWriteOnce))
	e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
	return e.recreatedPod(old.Labels[workspace.LabelWorkspaceID], old.Name)
}

// cached waits until the controller's cache shows pod name as check wants it. A test that moves
// the clock after writing a pod waits for it first: a pass reads the clock before the pods, so a
// pass that sees the new time then sees the write too.
func (e *upgradeEnv) cached(name string, check func(gomega.Gomega, *corev1.Pod)) {
	e.t.Helper()
	if e.view == nil {
		e.t.Fatal("upgradeEnv.cached needs the manager's cache: call start, or set view")
	}
	e.g.Eventually(func(g gomega.Gomega) {
		var p corev1.Pod
		g.Expect(e.view.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &p)).To(gomega.Succeed())
		check(g, &p)
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

// failPastDeadline leaves pod name waiting with reason and msg, moves the clock past the
// 10-minute upgrade deadline once the controller's cache shows the wait (as a kubelet's status
// lands long before the deadline; moved before, a pass could judge the deadline on the pod
// without it) and wakes the controller (any change to the pod does).
func (e *upgradeEnv) failPastDeadline(name, reason, msg string) {
	e.t.Helper()
	e.setWaiting(name, reason, msg)
	e.cached(name, func(g gomega.Gomega, p *corev1.Pod) {
		got, _, _ := upgrade.FailureReason(p)
		g.Expect(got).To(gomega.Equal(reason))
	})
	e.clock.Add(11 * time.Minute)
	e.poke(name)
}

// rolledBack checks that id's one pod is the rollback of the failed upgraded pod up (an
// ide:1 pod of version v1 that names the CrashLoopBackOff), and returns it.
func (e *upgradeEnv) rolledBack(g gomega.Gomega, id string, up *corev1.Pod) *corev1.Pod {
	pods := e.pods(g, id)
	g.Expect(pods).To(gomega.HaveLen(1))
	var back *corev1.Pod
	for _, p := range pods {
		back = p
	}
	g.Expect(back.Name).NotTo(gomega.Equal(up.Name))
	g.Expect(back.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.Rollback)))
	g.Expect(workspace.TemplateVersion(back)).To(gomega.Equal("v1"))
	g.Expect(back.Spec.Containers[0].Image).To(gomega.Equal("ide:1"))
	g.Expect(back.Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring("CrashLoopBackOff"))
	return back
}

// events returns the reasons of the Events on pod name.
func (e *upgradeEnv) events(g gomega.Gomega, name string) []string {
	var list corev1.EventList
	g.Expect(e.c.List(context.Background(), &list, client.InNamespace(e.ns))).To(gomega.Succeed())
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name && strings.HasPrefix(ev.Source.Component, UpgradeControllerName) {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// queued counts the "queued" Events (upgrade.ReasonUpgradeRequested) on the pods olds holds for ids.
func (e *upgradeEnv) queued(g gomega.Gomega, ids []string, olds map[string]*corev1.Pod) int {
	n := 0
	for _, id := range ids {
		for _, r := range e.events(g, olds[id].Name) {
			if r == upgrade.ReasonUpgradeRequested {
				n++
			}
		}
	}
	return n
}

func (e *upgradeEnv) expectIdentity(g gomega.Gomega, p, orig *corev1.Pod) {
	for _, k := range []string{workspace.LabelUserSub, workspace.LabelWorkspaceID, workspace.LabelType} {
		g.Expect(p.Labels[k]).To(gomega.Equal(orig.Labels[k]), "label %s", k)
	}
	for _, k := range []string{workspace.AnnOwner, workspace.AnnWorkspaceName, workspace.AnnWorkspacePath, workspace.AnnPreviewPath, workspace.AnnWorkspacePort, workspace.AnnPreviewPort} {
		g.Expect(p.Annotations[k]).To(gomega.Equal(orig.Annotations[k]), "annotation %s", k)
	}
}

// TestUpgradeControllerOnAPIServer runs the upgrade user stories on one real kube-apiserver
// (envtest; the test plays the kubelet by writing pod status). Each story has its namespace.
func TestUpgradeControllerOnAPIServer(t *testing.T) {
	cfg, c := startAPIServer(t)
	// The node the tests bind new pods to: a pod bound to a node that does not exist is on a lost
	// node, and its upgrade fails at once (upgrade.ReasonNodeLost).
	if err := c.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	nsSeq := 0
	newEnv := func(t *testing.T, tmpl *templates.Template, opts UpgradeOptions) *upgradeEnv {
		nsSeq++
		ns := fmt.Sprintf("up-%d", nsSeq)
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		reg := &fakeTemplates{}
		reg.set(tmpl)
		e := &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg,
			clock: &testClock{now: time.Now()}, opts: opts}
		return e
	}

	t.Run("side-by-side upgrade requested with kubectl annotate keeps the owner and replaces the pod once the new one is Ready", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		old := e.spawn("auth0|jane", "demo")
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		before := testutil.ToFloat64(upgradesTotal.WithLabelValues(upgrade.ResultSucceeded, string(upgrade.SideBySide)))

		// An admin requests it, by hand: only the intent annotation.
		yes := "true"
		e.annotate(old.Name, workspace.AnnUpgradeRequested, &yes)
		up := e.upgradedPod("demo", old.Name)
		e.g.Expect(up.Name).To(gomega.HavePrefix(workspace.PodName("auth0|jane", "demo") + "-up-"))
		e.g.Expect(workspace.TemplateVersion(up)).To(gomega.Equal("v2"))
		e.g.Expect(up.Spec.Containers[0].Image).To(gomega.Equal("ide:2"))
		e.g.Expect(up.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.SideBySide)))
		e.g.Expect(up.Annotations[workspace.AnnUpgradeFromUID]).To(gomega.Equal(string(old.UID)))
		e.expectIdentity(e.g, up, old)
		// The old pod serves until the new one is Ready.
		e.g.Consistently(func(g gomega.Gomega) {
			g.Expect(e.pods(g, "demo")).To(gomega.HaveLen(2))
		}).WithTimeout(time.Second).Should(gomega.Succeed())

		e.setReady(up.Name)
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "demo")
			g.Expect(pods).To(gomega.HaveLen(1))
			g.Expect(pods).To(gomega.HaveKey(up.Name))
			g.Expect(e.events(g, old.Name)).To(gomega.ContainElement(upgrade.ReasonUpgradeStarted))
			g.Expect(e.events(g, up.Name)).To(gomega.ContainElement(upgrade.ReasonUpgradeSucceeded))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		// The counter moves right after the Event is recorded, not before: wait for it too.
		e.g.Eventually(func() float64 {
			return testutil.ToFloat64(upgradesTotal.WithLabelValues(upgrade.ResultSucceeded, string(upgrade.SideBySide)))
		}).WithTimeout(30 * time.Second).Should(gomega.Equal(before + 1))
	})

	t.Run("side-by-side upgrade that misses the deadline leaves the old pod serving with the error and no intent", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{Timeout: 10 * time.Minute})
		e.start()
		old := e.spawn("bob", "api")
		e.reg.set(ideTemplate("v2", "registry.invalid/ide:2", ""))
		yes := "true"
		e.annotate(old.Name, workspace.AnnUpgradeRequested, &yes)
		up := e.upgradedPod("api", old.Name)
		e.setWaiting(up.Name, "ImagePullBackOff", `Back-off pulling image "registry.invalid/ide:2"`)
		e.g.Consistently(func(g gomega.Gomega) {
			g.Expect(e.pods(g, "api")).To(gomega.HaveLen(2))
		}).WithTimeout(time.Second).Should(gomega.Succeed())

		// Eleven minutes later.
		e.failPastDeadline(up.Name, "ErrImagePull", `failed to pull image "registry.invalid/ide:2": not found`)
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "api")
			g.Expect(pods).To(gomega.HaveLen(1))
			stays := pods[old.Name]
			g.Expect(stays).NotTo(gomega.BeNil())
			g.Expect(stays.Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeRequested))
			g.Expect(stays.Annotations[workspace.AnnLastUpgradeError]).To(gomega.MatchRegexp(`^Upgrade failed at \S+Z: ErrImagePull: container ide: failed to pull image`))
			g.Expect(e.events(g, old.Name)).To(gomega.ContainElement(upgrade.ReasonUpgradeFailed))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("recreate upgrade over a ReadWriteOncePod claim, requested by the API with the pod name, succeeds and keeps the claim", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", corev1.ReadWriteOncePod), UpgradeOptions{})
		e.start()
		old := e.spawn("carol", "data")
		e.reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOncePod))
		name := workspace.NextPodName(old, "v2")
		e.g.Expect(e.c.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(
			`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, workspace.AnnUpgradeRequested, time.Now().UTC().Format(time.RFC3339),
			workspace.AnnUpgradePod, name))))).To(gomega.Succeed())

		// The new pod appears first, holding the old spec; then the old pod goes.
		var up *corev1.Pod
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "data")
			g.Expect(pods).To(gomega.HaveLen(1))
			up = pods[name]
			g.Expect(up).NotTo(gomega.BeNil())
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		e.g.Expect(up.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.Recreate)))
		e.g.Expect(up.Annotations[workspace.AnnRollbackSpec]).To(gomega.HavePrefix("gzip+base64:"), "the spec is written compressed")
		spec, err := upgrade.DecodeRollbackSpec(up.Annotations[workspace.AnnRollbackSpec])
		e.g.Expect(err).NotTo(gomega.HaveOccurred())
		e.g.Expect(string(spec)).To(gomega.ContainSubstring(`"image":"ide:1"`))
		e.expectIdentity(e.g, up, old)

		e.setReady(name)
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.pods(g, "data")[name]
			g.Expect(p).NotTo(gomega.BeNil())
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnRollbackSpec))
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeStartedAt))
			g.Expect(e.events(g, name)).To(gomega.ContainElement(upgrade.ReasonUpgradeSucceeded))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		var claims corev1.PersistentVolumeClaimList
		e.g.Expect(e.c.List(context.Background(), &claims, client.InNamespace(e.ns))).To(gomega.Succeed())
		e.g.Expect(claims.Items).To(gomega.HaveLen(1))
		e.g.Expect(claims.Items[0].DeletionTimestamp).To(gomega.BeNil())
	})

	t.Run("recreate upgrade that times out brings the workspace back on its previous spec with the error", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", corev1.ReadWriteOnce), UpgradeOptions{Timeout: 10 * time.Minute})
		e.start()
		old := e.spawn("dave", "ml")
		up := e.recreateOntoBroken(old)
		e.failPastDeadline(up.Name, "CrashLoopBackOff", "back-off 5m0s restarting failed container")
		e.g.Eventually(func(g gomega.Gomega) {
			e.expectIdentity(g, e.rolledBack(g, "ml", up), old)
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("garbage intent is removed with a Warning Event and starts nothing", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		old := e.spawn("erin", "web")
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		junk := "yes please, tomorrow"
		e.annotate(old.Name, workspace.AnnUpgradeRequested, &junk)
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "web")
			g.Expect(pods).To(gomega.HaveLen(1))
			g.Expect(pods[old.Name].Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeRequested))
			g.Expect(e.events(g, old.Name)).To(gomega.ContainElement(upgrade.ReasonInvalidUpgradeRequest))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		// A valid request afterwards works: nothing is wedged.
		yes := "true"
		e.annotate(old.Name, workspace.AnnUpgradeRequested, &yes)
		e.upgradedPod("web", old.Name)
	})

	t.Run("a restart mid-upgrade converges: the new manager finishes what the old one started", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		a := e.spawn("frank", "one")
		b := e.spawn("frank", "two")
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		yes := "true"
		e.annotate(a.Name, workspace.AnnUpgradeRequested, &yes)
		e.annotate(b.Name, workspace.AnnUpgradeRequested, &yes)
		upA := e.upgradedPod("one", a.Name)
		upB := e.upgradedPod("two", b.Name)
		e.stop()

		// While nogoo9 is down: one new pod becomes Ready, the other misses its deadline.
		e.setReady(upA.Name)
		e.setWaiting(upB.Name, "ErrImagePull", "not found")
		e.clock.Add(30 * time.Minute)
		e.start()
		e.g.Eventually(func(g gomega.Gomega) {
			one, two := e.pods(g, "one"), e.pods(g, "two")
			g.Expect(one).To(gomega.HaveLen(1))
			g.Expect(one).To(gomega.HaveKey(upA.Name))
			g.Expect(two).To(gomega.HaveLen(1))
			g.Expect(two).To(gomega.HaveKey(b.Name))
			g.Expect(two[b.Name].Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring("ErrImagePull"))
			g.Expect(two[b.Name].Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeRequested))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("the concurrency cap holds: with a cap of 1, three requested upgrades run one at a time", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{MaxConcurrentUpgrades: 1})
		e.start()
		ids := []string{"w1", "w2", "w3"}
		olds := map[string]*corev1.Pod{}
		for _, id := range ids {
			olds[id] = e.spawn("gina", id)
		}
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		yes := "true"
		for _, id := range ids {
			e.annotate(olds[id].Name, workspace.AnnUpgradeRequested, &yes)
		}
		done := map[string]bool{}
		e.g.Eventually(func(g gomega.Gomega) {
			// One List per poll: per-workspace Lists would see w1 in flight and, a moment later,
			// w2 started after w1 finished, and count two upgrades that never overlapped.
			var list corev1.PodList
			g.Expect(e.c.List(context.Background(), &list, client.InNamespace(e.ns))).To(gomega.Succeed())
			byID := map[string]map[string]*corev1.Pod{}
			for i := range list.Items {
				if p := &list.Items[i]; p.DeletionTimestamp == nil {
					if byID[workspace.ID(p)] == nil {
						byID[workspace.ID(p)] = map[string]*corev1.Pod{}
					}
					byID[workspace.ID(p)][p.Name] = p
				}
			}
			inFlight := 0
			for _, id := range ids {
				pods := byID[id]
				if len(pods) == 2 {
					inFlight++
					for _, p := range pods {
						if p.Annotations[workspace.AnnUpgradeFrom] != "" && !workspace.IsReady(p) {
							e.setReady(p.Name)
						}
					}
				}
				if len(pods) == 1 && pods[olds[id].Name] == nil {
					done[id] = true
				}
			}
			// Checked on every poll, not only at the end.
			if inFlight > 1 {
				e.t.Fatalf("%d upgrades in flight with a cap of 1", inFlight)
			}
			g.Expect(done).To(gomega.HaveLen(3))
		}).WithTimeout(60 * time.Second).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
		e.g.Eventually(func(g gomega.Gomega) {
			queued := e.queued(g, ids, olds)
			g.Expect(queued).To(gomega.BeNumerically(">=", 1))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("a bulk upgrade of many workspaces under a small cap converges with every workspace on the new version", func(t *testing.T) {
		const n, limit = 60, 8
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{MaxConcurrentUpgrades: limit, Workers: 8})
		e.start()
		olds := map[string]*corev1.Pod{}
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("bulk-%02d", i)
			olds[id] = e.spawn("hana", id)
		}
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		yes := "true"
		for _, p := range olds {
			e.annotate(p.Name, workspace.AnnUpgradeRequested, &yes)
		}
		e.g.Eventually(func(g gomega.Gomega) {
			var list corev1.PodList
			g.Expect(e.c.List(context.Background(), &list, client.InNamespace(e.ns))).To(gomega.Succeed())
			byID := map[string][]*corev1.Pod{}
			for i := range list.Items {
				p := &list.Items[i]
				if p.DeletionTimestamp == nil {
					byID[workspace.ID(p)] = append(byID[workspace.ID(p)], p)
				}
			}
			inFlight, done := 0, 0
			for id, pods := range byID {
				if len(pods) == 0 || len(pods) > 2 {
					e.t.Fatalf("workspace %s has %d live pods", id, len(pods))
				}
				if len(pods) == 2 {
					inFlight++
				}
				for _, p := range pods {
					// The kubelet: upgraded pods start.
					if p.Annotations[workspace.AnnUpgradeFrom] != "" && !workspace.IsReady(p) {
						e.setReady(p.Name)
					}
					if len(pods) == 1 && workspace.TemplateVersion(p) == "v2" {
						done++
					}
				}
			}
			if inFlight > limit {
				e.t.Fatalf("%d upgrades in flight with a cap of %d", inFlight, limit)
			}
			g.Expect(byID).To(gomega.HaveLen(n))
			g.Expect(done).To(gomega.Equal(n))
		}).WithTimeout(120 * time.Second).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
	})

	t.Run("pacing by room: with --max-pending-upgrades=2, five requested upgrades start two new pods while none is bound, and the rest as the scheduler binds them, before any upgrade finishes", func(t *testing.T) {
		const n, limit = 5, 2
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{MaxPendingUpgrades: limit})
		e.start()
		ids := make([]string, n)
		olds := map[string]*corev1.Pod{}
		for i := range ids {
			ids[i] = fmt.Sprintf("pace-%d", i)
			olds[ids[i]] = e.spawn("ines", ids[i])
		}
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		for _, id := range ids {
			e.annotate(olds[id].Name, workspace.AnnUpgradeRequested, str("true"))
		}
		// newPods lists the upgraded pods (one List, so the counts agree) and checks on every
		// poll that every old pod is still there: no upgrade finishes in this story.
		newPods := func(g gomega.Gomega) (unbound, bound []*corev1.Pod) {
			var list corev1.PodList
			g.Expect(e.c.List(context.Background(), &list, client.InNamespace(e.ns))).To(gomega.Succeed())
			live := map[string]bool{}
			for i := range list.Items {
				p := &list.Items[i]
				if p.DeletionTimestamp != nil {
					continue
				}
				live[p.Name] = true
				switch {
				case p.Annotations[workspace.AnnUpgradeFrom] == "":
				case p.Spec.NodeName == "":
					unbound = append(unbound, p)
				default:
					bound = append(bound, p)
				}
			}
			for _, id := range ids {
				if !live[olds[id].Name] {
					e.t.Fatalf("old pod %s gone: an upgrade finished although no new pod became Ready", olds[id].Name)
				}
			}
			if len(unbound) > limit {
				e.t.Fatalf("%d upgraded pods wait for a node with --max-pending-upgrades=%d", len(unbound), limit)
			}
			return unbound, bound
		}
		// (a) None is bound: two start, and the other three are queued (their Event says so)
		// with still only two new pods.
		e.g.Eventually(func(g gomega.Gomega) {
			queued := e.queued(g, ids, olds)
			g.Expect(queued).To(gomega.Equal(n - limit))
			unbound, bound := newPods(g)
			g.Expect(unbound).To(gomega.HaveLen(limit))
			g.Expect(bound).To(gomega.BeEmpty())
		}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
		// (b) The test plays the scheduler: each new pod it binds frees its slot, so the rest
		// start although none of the upgrades finishes (no new pod becomes Ready).
		e.g.Eventually(func(g gomega.Gomega) {
			unbound, bound := newPods(g)
			for _, p := range unbound {
				g.Expect(e.c.SubResource("binding").Create(context.Background(), p, &corev1.Binding{
					Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}})).To(gomega.Succeed())
			}
			g.Expect(bound).To(gomega.HaveLen(n))
		}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(gomega.Succeed())
	})

	t.Run("the concurrency cap still holds with the pending limit: bound new pods do not let a second upgrade start under --max-concurrent-upgrades=1", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{MaxConcurrentUpgrades: 1, MaxPendingUpgrades: 200})
		e.start()
		a, b := e.spawn("jon", "cap-a"), e.spawn("jon", "cap-b")
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		e.annotate(a.Name, workspace.AnnUpgradeRequested, str("true"))
		upA := e.upgradedPod("cap-a", a.Name)
		e.g.Expect(e.c.SubResource("binding").Create(context.Background(), upA, &corev1.Binding{
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}})).To(gomega.Succeed())
		e.annotate(b.Name, workspace.AnnUpgradeRequested, str("true"))
		// b is queued behind a (its Event names the cap) and has no second pod while a is in flight.
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(e.events(g, b.Name)).To(gomega.ContainElement(upgrade.ReasonUpgradeRequested))
			g.Expect(e.pods(g, "cap-b")).To(gomega.HaveLen(1))
			g.Expect(e.pods(g, "cap-a")).To(gomega.HaveLen(2))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		// a finishes: b starts.
		e.setReady(upA.Name)
		e.upgradedPod("cap-b", b.Name)
	})
}
