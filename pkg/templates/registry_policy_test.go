package templates

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// registryEnv is a registry watching a fresh namespace of the envtest API server.
type registryEnv struct {
	reg *Registry
	c   client.Client
	ns  string
	dir string
	log *syncBuffer
}

// syncBuffer collects the registry's log for assertions and echoes it to the test log.
type syncBuffer struct {
	t  *testing.T
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Log(strings.TrimRight(string(p), "\n"))
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startRegistry creates a namespace and a template directory, lets prepare fill them, then starts
// a manager with the registry (opts gets the namespace and directory) until the test ends.
func startRegistry(t *testing.T, opts Options, prepare func(e *registryEnv)) *registryEnv {
	t.Helper()
	needAPIServer(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &registryEnv{c: c, ns: "tp-" + hex.EncodeToString(b), dir: t.TempDir(), log: &syncBuffer{t: t}}
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}})).To(Succeed())
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}})
	})
	if prepare != nil {
		prepare(e)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.Scheme,
		Logger:                 zap.New(zap.WriteTo(e.log), zap.UseDevMode(true)),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{e.ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{workspace.LabelPodTemplate: "true"}), Transform: workspace.StripManagedFields},
			},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	opts.Namespace, opts.TemplateDir = e.ns, e.dir
	e.reg, err = Setup(mgr, opts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()
	g.Expect(e.reg.WaitForSync(ctx)).To(BeTrue())
	return e
}

func (e *registryEnv) version(name string) string {
	if t, ok := e.reg.Get(name); ok {
		return t.Version
	}
	return ""
}

// info is the List entry of name from the given source kind ("configmap:" or "file:").
func (e *registryEnv) info(name, kind string) Info {
	for _, i := range e.reg.List() {
		if i.Name == name && strings.HasPrefix(i.Source, kind) {
			return i
		}
	}
	return Info{}
}

// events are the messages of Events with reason on ConfigMap name.
func (e *registryEnv) events(g Gomega, name, reason string) []string {
	var evs corev1.EventList
	g.Expect(e.c.List(context.Background(), &evs, client.InNamespace(e.ns))).To(Succeed())
	var msgs []string
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind == "ConfigMap" && ev.InvolvedObject.Name == name && ev.Reason == reason {
			msgs = append(msgs, ev.Message)
		}
	}
	return msgs
}

func (e *registryEnv) writeFile(t *testing.T, file, name, version, spec string) {
	t.Helper()
	body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  annotations: {nogoo9/template-version: \"" + version + "\"}\ndata:\n  spec: '" + spec + "'\n"
	if err := os.WriteFile(filepath.Join(e.dir, file), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A namespace editor can create template ConfigMaps, and nogoo9's service account creates the pod:
// without a policy, a template would run anything as anyone. A version the policy refuses is not
// served; the error lists every violation; the last valid version keeps serving.
func TestRegistryRefusesTemplatesThePolicyForbids(t *testing.T) {
	e := startRegistry(t, Options{}, nil) // no Policy: the default one
	g := NewWithT(t)
	ctx := context.Background()

	g.Expect(e.c.Create(ctx, templateCM(e.ns, "node", "1", okSpec))).To(Succeed())
	g.Eventually(func() string { return e.version("node") }).WithTimeout(30 * time.Second).Should(Equal("1"))

	// An edit that asks for nogoo9's service account, the host network, a privileged container and
	// the host's disk.
	patch := `{"metadata":{"annotations":{"nogoo9/template-version":"2"}},"data":{"spec":` + jsonString(hostileSpec) + `}}`
	g.Expect(e.c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "node"}}, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	every := []string{"--template-policy=restricted", `"nogoo9-manager"`, "hostNetwork=true", "privileged", "hostPath", "automountServiceAccountToken"}
	g.Eventually(func(g Gomega) {
		i := e.info("node", "configmap:")
		g.Expect(i.Valid).To(BeFalse())
		g.Expect(i.Version).To(Equal("2"))
		g.Expect(i.ServingVersion).To(Equal("1"))
		for _, w := range every {
			g.Expect(i.Error).To(ContainSubstring(w))
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(e.version("node")).To(Equal("1"), "the last valid version keeps serving")
	g.Eventually(func(g Gomega) {
		msgs := e.events(g, "node", ReasonTemplateInvalid)
		g.Expect(msgs).To(ContainElement(And(ContainSubstring("version 1 keeps serving"), ContainSubstring("nogoo9-manager"), ContainSubstring("hostNetwork=true"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// A new template that was never valid is never served.
	g.Expect(e.c.Create(ctx, templateCM(e.ns, "evil", "1", hostileSpec))).To(Succeed())
	g.Eventually(func() Info { return e.info("evil", "configmap:") }).WithTimeout(30 * time.Second).Should(And(
		HaveField("Valid", false), HaveField("ServingVersion", ""), HaveField("Error", ContainSubstring("refuses"))))
	_, ok := e.reg.Get("evil")
	g.Expect(ok).To(BeFalse())
}

// An operator can relax the policy with flags; what they relaxed is served, the rest stays
// enforced.
func TestRegistryServesWhatARelaxedPolicyAllows(t *testing.T) {
	p := Policy{Level: LevelPrivileged, ServiceAccounts: []string{"default", "builder"}, AllowAutomountToken: true}
	e := startRegistry(t, Options{Policy: &p}, nil)
	g := NewWithT(t)
	relaxed := `{"serviceAccountName":"builder","hostNetwork":true,"containers":[{"name":"ide","image":"x","ports":[{"containerPort":8080}]}]}`
	g.Expect(e.c.Create(context.Background(), templateCM(e.ns, "relaxed", "1", relaxed))).To(Succeed())
	g.Expect(e.c.Create(context.Background(), templateCM(e.ns, "manager", "1", hostileSpec))).To(Succeed())
	g.Eventually(func() string { return e.version("relaxed") }).WithTimeout(30 * time.Second).Should(Equal("1"))
	g.Eventually(func() Info { return e.info("manager", "configmap:") }).WithTimeout(30 * time.Second).Should(And(
		HaveField("Valid", false), HaveField("Error", ContainSubstring(`"nogoo9-manager" is not allowed`))))
}

// A template file (written by whoever runs nogoo9) and a ConfigMap (written by anyone who may
// create ConfigMaps in the namespace) with the same name are a clash: the file keeps serving, the
// ConfigMap is reported (Warning Event on it, a log line naming both, invalid in List), never a
// silent override either way. When the file goes, the ConfigMap is served.
func TestRegistryNameClashIsAnErrorNotAnOverride(t *testing.T) {
	e := startRegistry(t, Options{FileRescan: 50 * time.Millisecond}, func(e *registryEnv) {
		e.writeFile(t, "shared.yaml", "shared", "file-1", okSpec)
		// A ConfigMap that exists first; its file appears later.
		if err := e.c.Create(context.Background(), templateCM(e.ns, "later", "cm-1", okSpec)); err != nil {
			t.Fatal(err)
		}
	})
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(e.version("shared")).To(Equal("file-1"))
	g.Eventually(func() string { return e.version("later") }).WithTimeout(30 * time.Second).Should(Equal("cm-1"))

	// A ConfigMap takes the name of the file template.
	g.Expect(e.c.Create(ctx, templateCM(e.ns, "shared", "cm-1", okSpec))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.events(g, "shared", ReasonTemplateNameClash)).To(ContainElement(And(ContainSubstring("is also defined by file:"), ContainSubstring("this ConfigMap is ignored"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(e.version("shared")).To(Equal("file-1"), "the file keeps serving")
	g.Expect(e.info("shared", "configmap:")).To(And(HaveField("Valid", false), HaveField("ServingVersion", ""), HaveField("Error", ContainSubstring("rename the ConfigMap"))))
	g.Expect(e.info("shared", "file:")).To(HaveField("Valid", true))
	g.Expect(e.log.String()).To(And(ContainSubstring("template name clash"), ContainSubstring(filepath.Join(e.dir, "shared.yaml")), ContainSubstring(`"name":"shared","namespace":"`+e.ns+`"`)))

	// An edit of the clashing ConfigMap still changes nothing that is served.
	patch := `{"metadata":{"annotations":{"nogoo9/template-version":"cm-2"}}}`
	g.Expect(e.c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "shared"}}, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	g.Eventually(func() string { return e.info("shared", "configmap:").Version }).WithTimeout(30 * time.Second).Should(Equal("cm-2"))
	g.Expect(e.version("shared")).To(Equal("file-1"))

	// A file appears with the name of a served ConfigMap: the file is served from then on, and
	// the ConfigMap is told why it no longer is.
	e.writeFile(t, "later.yaml", "later", "file-1", okSpec)
	g.Eventually(func() string { return e.version("later") }).WithTimeout(30 * time.Second).Should(Equal("file-1"))
	g.Eventually(func(g Gomega) {
		g.Expect(e.events(g, "later", ReasonTemplateNameClash)).NotTo(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// The file goes: the ConfigMap is served again, and says so.
	g.Expect(os.Remove(filepath.Join(e.dir, "shared.yaml"))).To(Succeed())
	g.Eventually(func() string { return e.version("shared") }).WithTimeout(30 * time.Second).Should(Equal("cm-2"))
	g.Expect(e.info("shared", "configmap:")).To(HaveField("Valid", true))
	g.Eventually(func(g Gomega) {
		g.Expect(e.events(g, "shared", ReasonTemplateLoaded)).To(ContainElement(ContainSubstring("no template file has its name any more")))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
