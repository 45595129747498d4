package templates

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// One kube-apiserver for the package's integration tests (nil with -short).
var (
	cfg   *rest.Config
	nsSeq atomic.Int32
)

func TestMain(m *testing.M) {
	apiserver.Main(m, func(c *rest.Config) int {
		cfg = c
		return m.Run()
	}, apiserver.BenchmarksNeedNone) // the package has no benchmarks
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
}

func templateCM(ns, name, version, spec string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{workspace.LabelPodTemplate: "true"},
			Annotations: map[string]string{workspace.AnnTemplateVersion: version, workspace.AnnDescription: "d"}},
		Data: map[string]string{workspace.DataSpec: spec},
	}
}

// okSpec fits the default template policy (Pod Security restricted, no API token).
const okSpec = `{"automountServiceAccountToken":false,
  "securityContext":{"runAsNonRoot":true,"runAsUser":1000,"seccompProfile":{"type":"RuntimeDefault"}},
  "containers":[{"name":"ide","image":"node:22","ports":[{"containerPort":8080}],
    "securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}`

// hostileSpec asks for what the default policy refuses: nogoo9's own service account, the host's
// network and root file system, a privileged container.
const hostileSpec = `{"serviceAccountName":"nogoo9-manager","hostNetwork":true,
  "containers":[{"name":"ide","image":"node:22","ports":[{"containerPort":8080}],
    "securityContext":{"privileged":true},"volumeMounts":[{"name":"root","mountPath":"/host"}]}],
  "volumes":[{"name":"root","hostPath":{"path":"/"}}]}`

func TestRegistryFollowsTemplateConfigMaps(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ns := fmt.Sprintf("reg-%d-%d", time.Now().UnixNano()%100000, nsSeq.Add(1)) // unique under -count=N
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

	// A file template next to the ConfigMaps.
	dir := t.TempDir()
	g.Expect(os.WriteFile(dir+"/local.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\n  annotations: {nogoo9/template-version: \"7\"}\ndata:\n  spec: '"+okSpec+"'\n"), 0o600)).To(Succeed())

	// Present before the registry starts: read in the initial list.
	g.Expect(c.Create(ctx, templateCM(ns, "node", "1", okSpec))).To(Succeed())
	// Decoys: another namespace and an unlabelled ConfigMap are not templates.
	elsewhere := templateCM("default", "elsewhere", "1", okSpec)
	g.Expect(c.Create(ctx, elsewhere)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), elsewhere) }) // a fixed name: -count=N creates it again
	plain := templateCM(ns, "plain", "1", okSpec)
	plain.Labels = nil
	g.Expect(c.Create(ctx, plain)).To(Succeed())

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.Scheme,
		Logger:                 zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{workspace.LabelPodTemplate: "true"}), Transform: workspace.StripManagedFields},
			},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	reg, err := Setup(mgr, Options{Namespace: ns, TemplateDir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	notified := map[string]int{}
	reg.Subscribe(func(name string) { mu.Lock(); notified[name]++; mu.Unlock() })
	notifications := func(name string) int { mu.Lock(); defer mu.Unlock(); return notified[name] }
	stopped := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(stopped) }()
	// The manager logs to t: it must be gone before the test ends (the deferred cancel runs first).
	t.Cleanup(func() { cancel(); <-stopped })

	g.Expect(reg.WaitForSync(ctx)).To(BeTrue())
	version := func(name string) string {
		if t, ok := reg.Get(name); ok {
			return t.Version
		}
		return ""
	}
	g.Expect(version("node")).To(Equal("1"))
	g.Expect(version("local")).To(Equal("7"))
	g.Expect(version(elsewhere.Name)).To(BeEmpty())
	g.Expect(version("plain")).To(BeEmpty())

	// A version bump is served within moments, without restart, and subscribers hear of it.
	before := notifications("node")
	var cm corev1.ConfigMap
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node"}, &cm)).To(Succeed())
	cm.Annotations[workspace.AnnTemplateVersion] = "2"
	g.Expect(c.Update(ctx, &cm)).To(Succeed())
	g.Eventually(func() string { return version("node") }).WithTimeout(30 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal("2"))
	g.Eventually(func() int { return notifications("node") }).WithTimeout(30 * time.Second).Should(BeNumerically(">", before))

	// A broken edit: version 2 keeps serving, List says why, a Warning Event lands on the ConfigMap.
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node"}, &cm)).To(Succeed())
	cm.Annotations[workspace.AnnTemplateVersion] = "3"
	cm.Data[workspace.DataSpec] = `{"containers":[{"name":"ide","image":"x","imagePullPolicyy":"Always"}]}`
	g.Expect(c.Update(ctx, &cm)).To(Succeed())
	// A broken new template never blocks the valid ones.
	g.Expect(c.Create(ctx, templateCM(ns, "broken", "1", `{"containers":`))).To(Succeed())
	g.Expect(c.Create(ctx, templateCM(ns, "fresh", "1", okSpec))).To(Succeed())
	infoOf := func(name string) Info {
		for _, i := range reg.List() {
			if i.Name == name && strings.HasPrefix(i.Source, "configmap:") {
				return i
			}
		}
		return Info{}
	}
	g.Eventually(func() Info { return infoOf("node") }).WithTimeout(30 * time.Second).Should(And(
		HaveField("Valid", false), HaveField("Version", "3"), HaveField("ServingVersion", "2"),
		HaveField("Error", ContainSubstring("imagePullPolicyy"))))
	g.Expect(version("node")).To(Equal("2"))
	g.Eventually(func() Info { return infoOf("broken") }).WithTimeout(30 * time.Second).Should(And(
		HaveField("Valid", false), HaveField("ServingVersion", ""), HaveField("Error", ContainSubstring("invalid JSON"))))
	g.Eventually(func() string { return version("fresh") }).WithTimeout(30 * time.Second).Should(Equal("1"))
	_, ok := reg.Get("broken")
	g.Expect(ok).To(BeFalse())
	g.Eventually(func(g Gomega) {
		var evs corev1.EventList
		g.Expect(c.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		var msgs []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "node" && e.Type == corev1.EventTypeWarning && e.Reason == ReasonTemplateInvalid {
				msgs = append(msgs, e.Message)
			}
		}
		g.Expect(msgs).To(ContainElement(And(ContainSubstring("version 2 keeps serving"), ContainSubstring("imagePullPolicyy"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Deleting the ConfigMap removes the template.
	g.Expect(c.Delete(ctx, &cm)).To(Succeed())
	g.Eventually(func() string { return version("node") }).WithTimeout(30 * time.Second).Should(BeEmpty())
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSharedHandsOutTheRegistrysOwnValue: Get copies (a caller may write into its copy), the
// Shared view does not (every caller reads the one value), and both serve the same template.
func TestSharedHandsOutTheRegistrysOwnValue(t *testing.T) {
	r := NewStatic(&Template{Name: "ide", Version: "v1", Annotations: map[string]string{"k": "v"}})
	got, ok := r.Get("ide")
	if !ok || got.Version != "v1" {
		t.Fatalf("Get = %v, %v", got, ok)
	}
	got.Annotations["k"] = "written by a caller"
	a, okA := r.Shared().Get("ide")
	b, okB := r.Shared().Get("ide")
	if !okA || !okB || a != b {
		t.Fatalf("Shared().Get gave %p and %p (%v, %v), want the same value twice", a, b, okA, okB)
	}
	if a.Annotations["k"] != "v" {
		t.Errorf("a write into Get's copy reached the registry's value: %q", a.Annotations["k"])
	}
	if _, ok := r.Shared().Get("missing"); ok {
		t.Error("Shared().Get found a template the registry does not have")
	}
	if !r.Shared().Synced() {
		t.Error("Shared().Synced is false for a synced registry")
	}
}

// TestSharedResolveFollowsTheLookupRule: Shared().Resolve finds what Resolve finds, by the same
// key (a team template in its namespace, nogoo9's elsewhere), and hands out the registry's own
// value; List, ListFor and WaitForSync are the registry's.
func TestSharedResolveFollowsTheLookupRule(t *testing.T) {
	r := NewStatic(&Template{Name: "ide", Version: "home"}, &Template{Name: "ide", Namespace: "team", Version: "team"})
	s := r.Shared()
	for _, ns := range []string{"team", "other", ""} {
		want, wantKey, wantOK := r.Resolve(ns, "ide")
		got, key, ok := s.Resolve(ns, "ide")
		if ok != wantOK || key != wantKey || got == nil || got.Version != want.Version {
			t.Errorf("namespace %q: Shared().Resolve = %v, %q, %v; Resolve = %v, %q, %v", ns, got, key, ok, want, wantKey, wantOK)
		}
		if again, _, _ := s.Resolve(ns, "ide"); again != got || got == want {
			t.Errorf("namespace %q: Shared().Resolve gave %p, then %p (Resolve's copy %p): want the registry's value twice", ns, got, again, want)
		}
	}
	if _, key, ok := s.Resolve("team", "missing"); ok || key != "missing" {
		t.Errorf("Shared().Resolve of a missing template = %q, %v", key, ok)
	}
	if len(s.List()) != 2 || len(s.ListFor("team")) != 1 || s.ListFor("team")[0].Version != "team" || !s.WaitForSync(context.Background()) {
		t.Errorf("List = %v, ListFor(team) = %v", s.List(), s.ListFor("team"))
	}
}

// TestDerivedIsComputedOncePerTemplateValue: Derived keeps build's result with a decoded
// template (every caller, every goroutine gets the one result), computes it again for a copy
// (whose owner may change it first), and per call for a Template literal and a copy by
// assignment (which shares the original's slot).
func TestDerivedIsComputedOncePerTemplateValue(t *testing.T) {
	tmpl, err := Decode("ide", "test", map[string]string{workspace.AnnTemplateVersion: "1"},
		map[string]string{"spec": `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}]}]}`})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	build := func(t *Template) any { calls++; return t.Version + "/" + strconv.Itoa(calls) }
	if a, b := tmpl.Derived(build), tmpl.Derived(build); a != "1/1" || b != "1/1" || calls != 1 {
		t.Errorf("a decoded template: %v then %v after %d builds, want 1/1 twice after 1", a, b, calls)
	}
	cp := tmpl.DeepCopy()
	cp.Version = "2"
	if got := cp.Derived(build); got != "2/2" {
		t.Errorf("a copy changed before its first use derived %v, want 2/2 (its own value)", got)
	}
	lit := &Template{Version: "3"}
	if a, b := lit.Derived(build), lit.Derived(build); a != "3/3" || b != "3/4" {
		t.Errorf("a literal: %v then %v, want 3/3 then 3/4 (computed per call)", a, b)
	}
	// A copy by assignment shares the original's slot, which already holds "1/1".
	val := *tmpl
	val.Version = "5"
	if a, b := val.Derived(build), val.Derived(build); a != "5/5" || b != "5/6" {
		t.Errorf("a copy by assignment, changed after the original's use: %v then %v, want 5/5 then 5/6 (its own value, per call)", a, b)
	}
	if got := tmpl.Derived(build); got != "1/1" {
		t.Errorf("the original after its copy's use: %v, want 1/1 (still kept)", got)
	}
}

// TestDerivedBuildsOnceUnderConcurrentCalls: many goroutines ask a decoded template for the same
// derived value at once; build runs once, while the others wait for it, and every one gets its
// result. (Run with -race too: a slot filled without synchronisation is a data race.)
func TestDerivedBuildsOnceUnderConcurrentCalls(t *testing.T) {
	tmpl, err := Decode("ide", "test", map[string]string{workspace.AnnTemplateVersion: "1"},
		map[string]string{"spec": `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}]}]}`})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 16
	var entered sync.WaitGroup
	entered.Add(callers)
	allEntered := make(chan struct{})
	go func() { entered.Wait(); close(allEntered) }()
	var builds atomic.Int32
	build := func(*Template) any {
		n := builds.Add(1)
		// Hold the build until every caller has asked, so that a slot without a once would
		// let the others build too.
		select {
		case <-allEntered:
		case <-time.After(10 * time.Second):
			t.Error("not every caller asked Derived within 10s")
		}
		return n
	}
	results := make([]any, callers)
	var done sync.WaitGroup
	for i := range callers {
		done.Add(1)
		go func() {
			defer done.Done()
			entered.Done()
			results[i] = tmpl.Derived(build)
		}()
	}
	done.Wait()
	if n := builds.Load(); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
	for i, r := range results {
		if r != int32(1) {
			t.Errorf("caller %d got %v, want the one build's result 1", i, r)
		}
	}
}
