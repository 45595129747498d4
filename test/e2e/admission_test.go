package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// kustomizeObjects renders a config/ directory (relative to the repository root) with kubectl.
func kustomizeObjects(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	root, err := filepath.Abs("../..")
	Expect(err).NotTo(HaveOccurred())
	out, err := kubectl(Cluster.Kubeconfig, "kustomize", filepath.Join(root, dir))
	Expect(err).NotTo(HaveOccurred(), "kubectl kustomize %s:\n%s", dir, out)
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else {
			Expect(err).NotTo(HaveOccurred())
		}
		if u.Object != nil {
			objs = append(objs, u)
		}
	}
	return objs
}

// objectOf returns the rendered object of kind (and name, when not empty), converted into into.
func objectOf(objs []*unstructured.Unstructured, kind, name string, into any) {
	GinkgoHelper()
	for _, u := range objs {
		if u.GetKind() == kind && (name == "" || u.GetName() == name) {
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)).To(Succeed())
			return
		}
	}
	Fail(fmt.Sprintf("the kustomize output has no %s %s", kind, name))
}

// impersonating is an admin client acting as user: the API server authorizes and admits its
// requests as that user's.
func impersonating(user string) client.Client {
	GinkgoHelper()
	// controller-runtime warns (with a stack trace) about a client made without a logger.
	setLoggerOnce.Do(func() { ctrllog.SetLogger(GinkgoLogr) })
	cfg := rest.CopyConfig(Cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

var setLoggerOnce sync.Once

// mergePatch sends a JSON merge patch of metadata (labels or annotations: key -> value, nil
// removes) to obj as c.
func mergePatch(ctx context.Context, c client.Client, obj client.Object, field string, kv map[string]*string, subResource ...string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{field: kv}})
	Expect(err).NotTo(HaveOccurred())
	if len(subResource) > 0 {
		return c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body))
	}
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body))
}

// renderSample renders sample template file (config/samples) with the spawner, as a spawn of id
// would, in namespace ns.
func renderSample(file, ns, id string) (*corev1.Pod, []*corev1.PersistentVolumeClaim) {
	GinkgoHelper()
	loaded, err := templates.LoadDir("../../config/samples")
	Expect(err).NotTo(HaveOccurred())
	for _, l := range loaded {
		if filepath.Base(strings.TrimPrefix(l.Source, "file:")) != file {
			continue
		}
		Expect(l.Err).NotTo(HaveOccurred())
		ident := spawner.Identity{Owner: "jane@example.com", ID: id, Namespace: ns, Context: map[string]string{"repo": "https://example.com/r.git"}}
		pod, pvcs, err := spawner.BuildPod(l.Template, ident, workspace.PodName(ident.Owner, ident.ID))
		Expect(err).NotTo(HaveOccurred())
		pod.Namespace = ns
		for _, p := range pvcs {
			p.Namespace = ns
		}
		return pod, pvcs
	}
	Fail("no sample template in " + file)
	return nil, nil
}

// What config/ asks of the API server, tried on the real one: Pod Security admission from the
// namespace labels, the bookkeeping ValidatingAdmissionPolicy, and the NetworkPolicies. The policy
// is bound to this spec's namespace only, so other specs (which simulate crashes by writing
// bookkeeping annotations as the admin) are not affected.
var _ = Describe("Admission from config/: Pod Security, nogoo9's bookkeeping keys, NetworkPolicies", Ordered, Label("admission"), func() {
	var (
		ns                string
		manager, operator client.Client
		managerUser       string
		operatorUser      string
		defaultObjs       []*unstructured.Unstructured
	)

	BeforeAll(func(ctx SpecContext) {
		defaultObjs = kustomizeObjects("config/default")
		ns = NewNamespace()

		By("labelling the namespace for Pod Security as config/ labels nogoo9-system")
		var rendered corev1.Namespace
		objectOf(defaultObjs, "Namespace", "", &rendered)
		psa := map[string]*string{}
		for k, v := range rendered.Labels {
			if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
				psa[k] = ptr.To(v)
			}
		}
		Expect(psa).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", ptr.To("restricted")))
		Expect(mergePatch(ctx, K8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, "labels", psa)).To(Succeed())

		By("creating nogoo9's ServiceAccount with the Role of config/rbac, and an operator allowed to patch pods")
		var sa corev1.ServiceAccount
		var role rbacv1.Role
		var binding rbacv1.RoleBinding
		objectOf(defaultObjs, "ServiceAccount", installSA, &sa)
		objectOf(defaultObjs, "Role", "", &role)
		objectOf(defaultObjs, "RoleBinding", "", &binding)
		for _, o := range []client.Object{&sa, &role, &binding} {
			o.SetNamespace(ns)
			o.SetResourceVersion("")
		}
		binding.Subjects[0].Namespace = ns
		operatorRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "configmaps", "persistentvolumeclaims"}, Verbs: []string{"get", "list", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status", "persistentvolumeclaims/status"}, Verbs: []string{"patch"}},
			// pods/binding and the legacy bindings resource (POST /api/v1/namespaces/{ns}/bindings): the
			// same storage code binds the pod and copies the Binding's annotations onto it.
			{APIGroups: []string{""}, Resources: []string{"pods/binding", "bindings"}, Verbs: []string{"create"}},
		}}
		operatorBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "operator"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "operator", Namespace: ns}}}
		for _, o := range []client.Object{&sa, &role, &binding, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator"}}, operatorRole, operatorBinding} {
			Expect(K8s.Create(ctx, o)).To(Succeed())
		}
		managerUser = "system:serviceaccount:" + ns + ":" + installSA
		operatorUser = "system:serviceaccount:" + ns + ":operator"
		manager, operator = impersonating(managerUser), impersonating(operatorUser)

		By("applying the ValidatingAdmissionPolicy of config/default, bound to this namespace only")
		suffix := randomSuffix()
		var policy, policyBinding *unstructured.Unstructured
		for _, u := range defaultObjs {
			switch u.GetKind() {
			case "ValidatingAdmissionPolicy":
				policy = u.DeepCopy()
			case "ValidatingAdmissionPolicyBinding":
				policyBinding = u.DeepCopy()
			}
		}
		Expect(policy).NotTo(BeNil())
		Expect(policyBinding).NotTo(BeNil())
		policy.SetName(policy.GetName() + "-" + suffix)
		policy.SetNamespace("")
		policyBinding.SetName(policyBinding.GetName() + "-" + suffix)
		policyBinding.SetNamespace("")
		Expect(unstructured.SetNestedField(policyBinding.Object, policy.GetName(), "spec", "policyName")).To(Succeed())
		Expect(unstructured.SetNestedStringMap(policyBinding.Object, map[string]string{"kubernetes.io/metadata.name": ns},
			"spec", "matchResources", "namespaceSelector", "matchLabels")).To(Succeed())
		for _, u := range []*unstructured.Unstructured{policy, policyBinding} {
			Expect(K8s.Create(ctx, u)).To(Succeed(), "create %s %s", u.GetKind(), u.GetName())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(K8s.Delete(ctx, u))).To(Succeed()) })
		}

		By("waiting until nogoo9's ServiceAccount may write a ledger (its RBAC is in effect)")
		Eventually(func() error {
			return manager.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nogoo9-quota-probe"}}, client.DryRunAll)
		}).Should(Succeed())

		By("waiting until the API server enforces the policy (a dry-run write by the operator is refused)")
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nogoo9-quota-probe"}}
		Eventually(func() error {
			return operator.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		}).Should(MatchError(ContainSubstring(policy.GetName())))
	})

	It("refuses a privileged workspace pod and admits the pods nogoo9 renders from the samples", func(ctx SpecContext) {
		By("a pod asking for privileges, host network and the host's disk, created as nogoo9 itself")
		pod, _ := renderSample("template-node.yaml", ns, "priv")
		pod.Spec.HostNetwork = true
		pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		err := manager.Create(ctx, pod)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		Expect(err.Error()).To(And(ContainSubstring(`violates PodSecurity "restricted:latest"`), ContainSubstring("hostNetwork=true"),
			ContainSubstring("privileged"), ContainSubstring("hostPath")))

		By("the samples as nogoo9 renders them (with the nogoo9-init container) are admitted, and kwok's status updates pass")
		for _, file := range []string{"template-node.yaml", "template-node-persistent.yaml"} {
			pod, pvcs := renderSample(file, ns, "ok-"+strings.TrimSuffix(strings.TrimPrefix(file, "template-"), ".yaml"))
			for _, p := range pvcs {
				Expect(manager.Create(ctx, p)).To(Succeed(), "create claim %s", p.Name)
			}
			Expect(manager.Create(ctx, pod)).To(Succeed(), "create the pod rendered from %s", file)
			if len(pvcs) == 0 {
				WaitPodReady(ns, pod.Name)
			}
		}
	})

	Describe("nogoo9's bookkeeping labels and annotations on pods", Ordered, func() {
		var pod *corev1.Pod

		BeforeAll(func(ctx SpecContext) {
			pod, _ = renderSample("template-node.yaml", ns, "keys")
			// What an upgrade in flight carries, written by nogoo9.
			for k, v := range map[string]string{
				workspace.AnnUpgradeFrom: "ws-old", workspace.AnnUpgradeFromUID: "uid", workspace.AnnUpgradeFromVersion: "0.9",
				workspace.AnnUpgradeStrategy: "Recreate", workspace.AnnUpgradeStartedAt: "2026-01-01T00:00:00Z",
				workspace.AnnRollbackSpec: `{"containers":[]}`, workspace.AnnUpgradePod: "ws-next",
				workspace.AnnTemplateNamespace: ns, // as spawned from a template of its own namespace
			} {
				pod.Annotations[k] = v
			}
			Expect(manager.Create(ctx, pod)).To(Succeed())
			WaitPodReady(ns, pod.Name)
		})

		DescribeTable("an operator with patch pods is refused each bookkeeping key, to add, change or remove",
			func(ctx SpecContext, field, key string) {
				target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
				for _, value := range []*string{ptr.To("forged"), nil} {
					err := mergePatch(ctx, operator, target, field, map[string]*string{key: value})
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s %s=%v: want Forbidden, got %v", field, key, value, err)
					Expect(err.Error()).To(And(ContainSubstring(key), ContainSubstring("only nogoo9"), ContainSubstring("nogoo9/upgrade-requested, nogoo9/maintenance, nogoo9/stop-requested, nogoo9/pinned")))
				}
				// A key nogoo9 has not written yet cannot be added either.
				if field == "annotations" {
					err := mergePatch(ctx, operator, target, field, map[string]*string{workspace.AnnLastUpgradeError: ptr.To("x")})
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "adding %s: %v", workspace.AnnLastUpgradeError, err)
				}
				var got corev1.Pod
				Expect(K8s.Get(ctx, client.ObjectKeyFromObject(target), &got)).To(Succeed())
				Expect(got.Labels).To(Equal(pod.Labels))
				for k, v := range pod.Annotations {
					Expect(got.Annotations).To(HaveKeyWithValue(k, v))
				}
			},
			Entry("rollback-spec (the spec of a pod nogoo9 would create)", "annotations", workspace.AnnRollbackSpec),
			Entry("upgrade-strategy", "annotations", workspace.AnnUpgradeStrategy),
			Entry("upgrade-from (the pod nogoo9 would delete)", "annotations", workspace.AnnUpgradeFrom),
			Entry("upgrade-started-at (the deadline)", "annotations", workspace.AnnUpgradeStartedAt),
			Entry("upgrade-pod (the name nogoo9 would create)", "annotations", workspace.AnnUpgradePod),
			Entry("owner (who the workspace belongs to)", "annotations", workspace.AnnOwner),
			Entry("workspace-path (where the proxy routes)", "annotations", workspace.AnnWorkspacePath),
			Entry("template-namespace (whose template the workspace follows)", "annotations", workspace.AnnTemplateNamespace),
			Entry("label workspace-id", "labels", workspace.LabelWorkspaceID),
			Entry("label user-sub", "labels", workspace.LabelUserSub),
			Entry("label type", "labels", workspace.LabelType),
		)

		It("lets the operator write the keys people may write, their own keys, and delete", func(ctx SpecContext) {
			target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
			for _, key := range workspace.PersonWritableKeys {
				Expect(mergePatch(ctx, operator, target, "annotations", map[string]*string{key: ptr.To("true")})).To(Succeed(), "add %s", key)
				Expect(mergePatch(ctx, operator, target, "annotations", map[string]*string{key: ptr.To("disk migration")})).To(Succeed(), "change %s", key)
				Expect(mergePatch(ctx, operator, target, "annotations", map[string]*string{key: nil})).To(Succeed(), "remove %s", key)
			}
			Expect(mergePatch(ctx, operator, target, "labels", map[string]*string{"team": ptr.To("payments")})).To(Succeed())
			Expect(mergePatch(ctx, operator, target, "annotations", map[string]*string{"example.com/note": ptr.To("hi")})).To(Succeed())
		})

		It("guards pods/status too, which can change metadata, but lets status through", func(ctx SpecContext) {
			target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
			err := mergePatch(ctx, operator, target, "annotations", map[string]*string{workspace.AnnOwner: ptr.To("mallory")}, "status")
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
			body := []byte(`{"status":{"conditions":[{"type":"WorkspaceChecked","status":"True"}]}}`)
			Expect(operator.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, body))).To(Succeed())
		})

		It("guards pods/binding, whose annotations the API server copies onto the pod", func(ctx SpecContext) {
			// The operator may bind (RBAC above): what refuses it is the policy, which the message names.
			forged := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name, Annotations: map[string]string{workspace.AnnOwner: "mallory"}},
				Target: corev1.ObjectReference{Kind: "Node", Name: "nowhere"}}
			err := operator.SubResource("binding").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}, forged)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
			Expect(err.Error()).To(And(ContainSubstring("only nogoo9"), ContainSubstring(workspace.AnnOwner)))
		})

		It("guards the legacy bindings resource too, which binds an unbound pod and copies the Binding's annotations and labels onto it", func(ctx SpecContext) {
			// A workspace pod no node can take: it stays unbound, so a Binding would be accepted by
			// the storage code and re-own it (nogoo9/owner, nogoo9/user-sub) if admission let it through.
			unbound, _ := renderSample("template-node.yaml", ns, "unbound")
			unbound.Spec.NodeSelector = map[string]string{"nogoo9-e2e/no-such-node": randomSuffix()}
			Expect(manager.Create(ctx, unbound)).To(Succeed())
			forged := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: unbound.Name,
				Annotations: map[string]string{workspace.AnnOwner: "mallory"}, Labels: map[string]string{workspace.LabelUserSub: "mallory"}},
				Target: corev1.ObjectReference{Kind: "Node", Name: "nowhere"}}
			// POST /api/v1/namespaces/{ns}/bindings, not the pods/{name}/binding subresource.
			err := operator.Create(ctx, forged)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
			Expect(err.Error()).To(And(ContainSubstring("only nogoo9"), ContainSubstring(workspace.AnnOwner), ContainSubstring(workspace.LabelUserSub)))
			var got corev1.Pod
			Expect(K8s.Get(ctx, client.ObjectKeyFromObject(unbound), &got)).To(Succeed())
			Expect(got.Spec.NodeName).To(BeEmpty(), "the pod stays unbound")
			Expect(got.Annotations).To(HaveKeyWithValue(workspace.AnnOwner, unbound.Annotations[workspace.AnnOwner]))
			Expect(got.Labels).To(HaveKeyWithValue(workspace.LabelUserSub, unbound.Labels[workspace.LabelUserSub]))
			// A binding without nogoo9's keys (what a scheduler sends) is still the operator's to make.
			plain := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: unbound.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "nowhere"}}
			Expect(operator.Create(ctx, plain, client.DryRunAll)).To(Succeed())
		})

		It("lets nogoo9's service account write every key", func(ctx SpecContext) {
			target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
			for _, key := range []string{workspace.AnnRollbackSpec, workspace.AnnUpgradeStrategy, workspace.AnnUpgradeFrom, workspace.AnnUpgradeStartedAt,
				workspace.AnnOwner, workspace.AnnLastUpgradeError, workspace.AnnUpgradeRequested, workspace.AnnMaintenance} {
				Expect(mergePatch(ctx, manager, target, "annotations", map[string]*string{key: ptr.To("v2")})).To(Succeed(), "write %s", key)
				Expect(mergePatch(ctx, manager, target, "annotations", map[string]*string{key: nil})).To(Succeed(), "remove %s", key)
			}
			Expect(mergePatch(ctx, manager, target, "labels", map[string]*string{workspace.LabelTemplateVersion: ptr.To("2.0.0")})).To(Succeed())
		})

		It("refuses a pod an operator creates with nogoo9's labels, and lets the operator delete workspace pods", func(ctx SpecContext) {
			forged, _ := renderSample("template-node.yaml", ns, "forged")
			err := operator.Create(ctx, forged)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
			Expect(err.Error()).To(And(ContainSubstring(workspace.LabelWorkspaceID), ContainSubstring(workspace.AnnOwner)))
			Expect(operator.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}})).To(Succeed())
		})
	})

	It("keeps quota ledgers and nogoo9's claim labels to nogoo9, and leaves templates to people", func(ctx SpecContext) {
		ledger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spawner.LedgerName("jane@example.com"),
			Labels: map[string]string{workspace.LabelQuotaLedger: "true"}}, Data: map[string]string{"reservations": "{}"}}
		err := operator.Create(ctx, ledger.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an operator creating a ledger: %v", err)
		Expect(err.Error()).To(ContainSubstring("quota ledger"))
		disguised := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "looks-harmless", Labels: map[string]string{workspace.LabelQuotaLedger: "true"}}}
		Expect(apierrors.IsForbidden(operator.Create(ctx, disguised))).To(BeTrue(), "a ConfigMap labelled as a ledger")

		Expect(manager.Create(ctx, ledger)).To(Succeed())
		err = mergePatch(ctx, operator, ledger, "annotations", map[string]*string{"x": ptr.To("y")})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an operator changing a ledger: %v", err)
		Expect(operator.Delete(ctx, ledger)).To(Succeed(), "deleting a ledger resets it and stays allowed")

		// A kept template version (the updates area's history) is nogoo9's to write, like a ledger.
		kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: templates.HistoryName("node", "1"),
			Labels: map[string]string{workspace.LabelTemplateHistory: "node"}, Annotations: map[string]string{workspace.AnnTemplateVersion: "1"}}}
		err = operator.Create(ctx, kept.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an operator forging a kept template version: %v", err)
		Expect(err.Error()).To(ContainSubstring("kept template version"))
		Expect(apierrors.IsForbidden(operator.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "innocent",
			Labels: map[string]string{workspace.LabelTemplateHistory: "node"}}}))).To(BeTrue(), "a ConfigMap labelled as history")
		Expect(manager.Create(ctx, kept)).To(Succeed())
		Expect(operator.Delete(ctx, kept)).To(Succeed(), "deleting a kept version only forgets it")

		tmpl := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node",
			Labels: map[string]string{workspace.LabelPodTemplate: "true"}, Annotations: map[string]string{workspace.AnnTemplateVersion: "1"}}}
		Expect(operator.Create(ctx, tmpl)).To(Succeed(), "templates are written by people")

		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged-home",
			Annotations: map[string]string{workspace.AnnOwner: "jane@example.com"}},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		err = operator.Create(ctx, claim.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a claim with nogoo9/owner: %v", err)
		claim.Annotations = nil
		Expect(operator.Create(ctx, claim)).To(Succeed())
		// persistentvolumeclaims/status changes a claim's metadata too: a forged owner there would
		// count the claim against another user's --max-claims-per-user.
		err = mergePatch(ctx, operator, claim, "annotations", map[string]*string{workspace.AnnOwner: ptr.To("jane@example.com")}, "status")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a claim's nogoo9/owner written through its status: %v", err)
	})

	It("has NetworkPolicies the API server accepts, in config/default, config/split and with config/egress-restricted", func(ctx SpecContext) {
		root, err := filepath.Abs("../..")
		Expect(err).NotTo(HaveOccurred())
		overlay, err := os.MkdirTemp(filepath.Join(root, "test/e2e"), ".overlay-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = os.RemoveAll(overlay) })
		Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
			"resources: [../../../config/split]\ncomponents: [../../../config/egress-restricted]\n"), 0o600)).To(Succeed())
		rel, err := filepath.Rel(root, overlay)
		Expect(err).NotTo(HaveOccurred())

		for i, dir := range []string{"config/default", "config/split", rel} {
			var n int
			for _, u := range kustomizeObjects(dir) {
				if u.GetKind() != "NetworkPolicy" {
					continue
				}
				n++
				u.SetNamespace(ns)
				u.SetName(fmt.Sprintf("%s-%d", u.GetName(), i)) // each overlay's beside the others'
				Expect(K8s.Create(ctx, u)).To(Succeed(), "%s: NetworkPolicy %s", dir, u.GetName())
			}
			Expect(n).To(Equal(2), "%s: NetworkPolicies", dir)
		}
	})
})
