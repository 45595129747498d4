// Package config_test builds the Kustomize manifests with kubectl and checks what operators read
// before they install nogoo9: the RBAC is least privilege, every Deployment is hardened, the
// namespace enforces Pod Security, the admission policy guards nogoo9's bookkeeping keys, and the
// NetworkPolicies select the pods nogoo9 really creates (network_test.go).
package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

const (
	namespace      = "nogoo9-system"
	serviceAccount = "nogoo9-manager"
)

// allowedRole is every (group, resource) nogoo9 touches in its namespace and the exact verbs; see
// the comments in config/rbac/role.yaml for which code needs which. Widening the Role means
// changing this table on purpose.
var allowedRole = map[string][]string{
	"/pods":                      {"create", "delete", "get", "list", "patch", "watch"},
	"/configmaps":                {"create", "delete", "get", "list", "update", "watch"},
	"/persistentvolumeclaims":    {"create", "delete", "get", "list", "watch"},
	"/events":                    {"create", "list", "patch", "watch"},
	"events.k8s.io/events":       {"create", "patch"},
	"coordination.k8s.io/leases": {"create", "get", "update"},
}

var allowedClusterRole = map[string][]string{
	"authentication.k8s.io/tokenreviews":        {"create"},
	"authorization.k8s.io/subjectaccessreviews": {"create"},
	"/nodes": {"get", "list", "watch"},
}

// manifests is the parsed output of `kubectl kustomize dir`.
type manifests struct {
	roles           []rbacv1.Role
	clusterRoles    []rbacv1.ClusterRole
	roleBindings    []rbacv1.RoleBinding
	clusterBindings []rbacv1.ClusterRoleBinding
	deployments     []appsv1.Deployment
	services        []corev1.Service
	serviceAccounts []corev1.ServiceAccount
	namespaces      []corev1.Namespace
	policies        []admissionv1.ValidatingAdmissionPolicy
	bindings        []admissionv1.ValidatingAdmissionPolicyBinding
	networkPolicies []networkingv1.NetworkPolicy
	kinds           []string
}

func build(t *testing.T, dir string) *manifests {
	t.Helper()
	return parse(t, dir, kustomize(t, dir))
}

// kustomize returns the output of `kubectl kustomize dir`.
func kustomize(t *testing.T, dir string) *bytes.Buffer {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		// make test needs kubectl anyway (README; the e2e specs run it): a missing one is a
		// failure, not a silent skip, except with -short.
		if testing.Short() {
			t.Skip("kubectl not on PATH: install it to check the manifests (it has Kustomize built in)")
		}
		t.Fatal("kubectl not on PATH: install it to check the manifests (it has Kustomize built in); -short skips this")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	return &stdout
}

// parse sorts the objects of a kustomize output by kind.
func parse(t *testing.T, dir string, out *bytes.Buffer) *manifests {
	t.Helper()
	m := &manifests{}
	dec := utilyaml.NewYAMLOrJSONDecoder(out, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubectl kustomize %s: parse output: %v", dir, err)
		}
		if u.Object == nil {
			continue
		}
		m.kinds = append(m.kinds, u.GetKind()+"/"+u.GetName())
		var target any
		switch u.GetKind() {
		case "Role":
			m.roles = append(m.roles, rbacv1.Role{})
			target = &m.roles[len(m.roles)-1]
		case "ClusterRole":
			m.clusterRoles = append(m.clusterRoles, rbacv1.ClusterRole{})
			target = &m.clusterRoles[len(m.clusterRoles)-1]
		case "RoleBinding":
			m.roleBindings = append(m.roleBindings, rbacv1.RoleBinding{})
			target = &m.roleBindings[len(m.roleBindings)-1]
		case "ClusterRoleBinding":
			m.clusterBindings = append(m.clusterBindings, rbacv1.ClusterRoleBinding{})
			target = &m.clusterBindings[len(m.clusterBindings)-1]
		case "Deployment":
			m.deployments = append(m.deployments, appsv1.Deployment{})
			target = &m.deployments[len(m.deployments)-1]
		case "Service":
			m.services = append(m.services, corev1.Service{})
			target = &m.services[len(m.services)-1]
		case "ServiceAccount":
			m.serviceAccounts = append(m.serviceAccounts, corev1.ServiceAccount{})
			target = &m.serviceAccounts[len(m.serviceAccounts)-1]
		case "Namespace":
			if u.GetName() != namespace {
				t.Errorf("%s: Namespace %q, want %q", dir, u.GetName(), namespace)
			}
			m.namespaces = append(m.namespaces, corev1.Namespace{})
			target = &m.namespaces[len(m.namespaces)-1]
		case "ValidatingAdmissionPolicy":
			m.policies = append(m.policies, admissionv1.ValidatingAdmissionPolicy{})
			target = &m.policies[len(m.policies)-1]
		case "ValidatingAdmissionPolicyBinding":
			m.bindings = append(m.bindings, admissionv1.ValidatingAdmissionPolicyBinding{})
			target = &m.bindings[len(m.bindings)-1]
		case "NetworkPolicy":
			m.networkPolicies = append(m.networkPolicies, networkingv1.NetworkPolicy{})
			target = &m.networkPolicies[len(m.networkPolicies)-1]
		default:
			t.Errorf("%s: unexpected object %s/%s: the install should hold only RBAC, Deployments, Services, the Namespace, the admission policy and NetworkPolicies", dir, u.GetKind(), u.GetName())
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, target, true); err != nil {
			t.Errorf("%s: %s/%s has fields its type does not know: %v", dir, u.GetKind(), u.GetName(), err)
		}
	}
	return m
}

// flatten turns rules into "group/resource" -> sorted verbs, failing on anything beyond plain
// resource rules.
func flatten(t *testing.T, where string, rules []rbacv1.PolicyRule) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("%s: rule %+v: only plain resource rules are expected", where, r)
		}
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
			t.Errorf("%s: rule %+v has a wildcard", where, r)
		}
		for _, res := range r.Resources {
			if res == "secrets" || strings.HasPrefix(res, "secrets/") {
				t.Errorf("%s: rule %+v grants access to secrets", where, r)
			}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					key := g + "/" + res
					if !slices.Contains(out[key], v) {
						out[key] = append(out[key], v)
					}
				}
			}
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

func equalRules(got, want map[string][]string) string {
	var diffs []string
	for k, v := range got {
		w, ok := want[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("unexpected resource %s %v", k, v))
		case !slices.Equal(v, w):
			diffs = append(diffs, fmt.Sprintf("%s: verbs %v, want exactly %v", k, v, w))
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %s %v (nogoo9 needs it)", k, w))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

func TestManifests(t *testing.T) {
	for _, dir := range []string{"default", "split"} {
		t.Run(dir, func(t *testing.T) {
			m := build(t, dir)
			checkRBAC(t, dir, m)
			checkDeployments(t, dir, m)
			checkOneImage(t, dir, m)
			checkServices(t, dir, m)
			checkPodSecurity(t, dir, m)
			checkAdmission(t, dir, m)
			for _, p := range checkNetwork(m, samplePods(t)) {
				t.Errorf("%s: %s", dir, p)
			}
		})
	}
}

// checkOneImage: every Deployment of an overlay runs one and the same image, so config/split's
// controller and server never run different builds of nogoo9.
func checkOneImage(t *testing.T, dir string, m *manifests) {
	t.Helper()
	users := map[string][]string{} // image -> deployment/container
	for _, d := range m.deployments {
		spec := d.Spec.Template.Spec
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			users[c.Image] = append(users[c.Image], d.Name+"/"+c.Name)
		}
	}
	if len(users) > 1 {
		t.Errorf("%s: the Deployments run %d different images, want one: %v (set the image once, in config/default's images: entry)", dir, len(users), users)
	}
}

// TestImageSetInDefault: the install sets the image in one place, config/default (docs/deploy.md:
// `kustomize edit set image nogoo9=...` there), and every Deployment of both overlays must then
// run it. config/split once had an images: entry of its own, and its controller kept running
// that image whatever the install set. The test sets an image in a copy of the overlays.
func TestImageSetInDefault(t *testing.T) {
	const name, tag = "example.invalid/nogoo9", "v0.0.0-config-test"
	tmp := t.TempDir()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			if err := os.CopyFS(filepath.Join(tmp, e.Name()), os.DirFS(e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	k := filepath.Join(tmp, "default", "kustomization.yaml")
	data, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	// What `kustomize edit set image nogoo9=example.invalid/nogoo9:v0.0.0-config-test` writes.
	doc["images"] = []any{map[string]any{"name": "nogoo9", "newName": name, "newTag": tag}}
	if data, err = yaml.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, overlay := range []string{"default", "split"} {
		m := build(t, filepath.Join(tmp, overlay))
		if len(m.deployments) == 0 {
			t.Fatalf("%s: no Deployments rendered", overlay)
		}
		for _, d := range m.deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Image != name+":"+tag {
					t.Errorf("%s: Deployment %s container %s runs image %q, want %q, the image set in config/default: set the image in one place only", overlay, d.Name, c.Name, c.Image, name+":"+tag)
				}
			}
		}
	}
}

// checkPodSecurity: the install namespace enforces the restricted Pod Security Standard, the
// level of nogoo9's default template policy, and warns and audits at it.
func checkPodSecurity(t *testing.T, dir string, m *manifests) {
	if len(m.namespaces) != 1 {
		t.Fatalf("%s: want one Namespace, got %v", dir, m.kinds)
	}
	l := m.namespaces[0].Labels
	for _, mode := range []string{"enforce", "warn", "audit"} {
		key := "pod-security.kubernetes.io/" + mode
		if l[key] != templates.LevelRestricted || l[key+"-version"] != "latest" {
			t.Errorf("%s: Namespace %s: label %s=%q (version %q), want %q at \"latest\"", dir, m.namespaces[0].Name, key, l[key], l[key+"-version"], templates.LevelRestricted)
		}
	}
	if d := templates.DefaultPolicy(); d.Level != templates.LevelRestricted {
		t.Errorf("the default template policy is %q but the namespace enforces restricted: templates that load would not start", d.Level)
	}
}

// checkAdmission: one ValidatingAdmissionPolicy, bound with Deny to the install namespace only,
// failing closed, exempting exactly the install's ServiceAccount and letting people write exactly
// workspace.PersonWritableKeys.
func checkAdmission(t *testing.T, dir string, m *manifests) {
	if len(m.policies) != 1 || len(m.bindings) != 1 {
		t.Fatalf("%s: want one ValidatingAdmissionPolicy and one binding, got %v", dir, m.kinds)
	}
	p, b := m.policies[0], m.bindings[0]
	if b.Spec.PolicyName != p.Name {
		t.Errorf("%s: binding %s names policy %q, want %q", dir, b.Name, b.Spec.PolicyName, p.Name)
	}
	if !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("%s: binding %s: validationActions %v, want [Deny]", dir, b.Name, b.Spec.ValidationActions)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("%s: policy %s must fail closed (failurePolicy: Fail)", dir, p.Name)
	}
	if b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil {
		t.Fatalf("%s: binding %s has no namespaceSelector: it would apply to every namespace", dir, b.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.MatchResources.NamespaceSelector)
	if err != nil {
		t.Fatalf("%s: binding %s: %v", dir, b.Name, err)
	}
	if !sel.Matches(labels.Set{"kubernetes.io/metadata.name": namespace}) || sel.Matches(labels.Set{"kubernetes.io/metadata.name": "default"}) {
		t.Errorf("%s: binding %s selects namespaces %v, want exactly %s", dir, b.Name, sel, namespace)
	}
	var exempt string
	for _, c := range p.Spec.MatchConditions {
		exempt += c.Expression
	}
	if want := "':" + serviceAccount + "'"; !strings.Contains(exempt, want) || !strings.Contains(exempt, "request.namespace") {
		t.Errorf("%s: policy %s matchConditions %q do not exempt exactly the install's ServiceAccount %s in its namespace", dir, p.Name, exempt, serviceAccount)
	}
	var keys string
	for _, v := range p.Spec.Variables {
		if v.Name == "personKeys" {
			keys = v.Expression
		}
	}
	quoted := make([]string, len(workspace.PersonWritableKeys))
	for i, k := range workspace.PersonWritableKeys {
		quoted[i] = "'" + k + "'"
	}
	if want := "[" + strings.Join(quoted, ", ") + "]"; keys != want {
		t.Errorf("%s: policy %s lets people write %s, want workspace.PersonWritableKeys %s", dir, p.Name, keys, want)
	}
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		if slices.Contains(r.Operations, admissionv1.Delete) {
			t.Errorf("%s: policy %s matches DELETE: deleting a workspace pod or a ledger stays an operator's right", dir, p.Name)
		}
	}
	checkGuardedResources(t, dir, p)
}

// guardedResources are what the bookkeeping policies must match: the status subresources can
// change labels and annotations too, and a Binding's annotations (and, since Kubernetes 1.35, its
// labels) are copied onto its pod, whether it is posted to pods/{name}/binding or to the legacy
// bindings resource (POST /api/v1/namespaces/{ns}/bindings runs the same storage code).
var guardedResources = []string{"pods", "pods/status", "pods/binding", "bindings", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"}

func checkGuardedResources(t *testing.T, dir string, p admissionv1.ValidatingAdmissionPolicy) {
	t.Helper()
	var resources []string
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		resources = append(resources, r.Resources...)
	}
	for _, want := range guardedResources {
		if !slices.Contains(resources, want) {
			t.Errorf("%s: policy %s does not cover %s (the status subresources can change labels and annotations too; a binding's annotations and labels are copied onto its pod, through pods/binding and the legacy bindings resource alike)", dir, p.Name, want)
		}
	}
}

func checkRBAC(t *testing.T, dir string, m *manifests) {
	if len(m.serviceAccounts) != 1 || m.serviceAccounts[0].Name != serviceAccount || m.serviceAccounts[0].Namespace != namespace {
		t.Errorf("%s: want exactly ServiceAccount %s/%s, got %v", dir, namespace, serviceAccount, m.kinds)
	}
	if len(m.roles) != 1 || len(m.clusterRoles) != 1 || len(m.roleBindings) != 1 || len(m.clusterBindings) != 1 {
		t.Fatalf("%s: want one Role, ClusterRole, RoleBinding and ClusterRoleBinding, got %v", dir, m.kinds)
	}
	role, cr := m.roles[0], m.clusterRoles[0]
	if role.Namespace != namespace {
		t.Errorf("%s: Role in namespace %q, want %q", dir, role.Namespace, namespace)
	}
	if d := equalRules(flatten(t, dir+" Role", role.Rules), allowedRole); d != "" {
		t.Errorf("%s: Role %s is not the least privilege nogoo9 needs: %s", dir, role.Name, d)
	}
	if d := equalRules(flatten(t, dir+" ClusterRole", cr.Rules), allowedClusterRole); d != "" {
		t.Errorf("%s: ClusterRole %s is not the least privilege nogoo9 needs: %s", dir, cr.Name, d)
	}
	if cr.AggregationRule != nil {
		t.Errorf("%s: ClusterRole %s aggregates other roles", dir, cr.Name)
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}
	rb, crb := m.roleBindings[0], m.clusterBindings[0]
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) || !slices.Equal(rb.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("%s: RoleBinding %s binds %+v to %+v, want Role %s to %+v", dir, rb.Name, rb.RoleRef, rb.Subjects, role.Name, sa)
	}
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}) || !slices.Equal(crb.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("%s: ClusterRoleBinding %s binds %+v to %+v, want ClusterRole %s to %+v", dir, crb.Name, crb.RoleRef, crb.Subjects, cr.Name, sa)
	}
}

// components returns the --components value of c and whether --leader-elect is on (the binary's
// default is on).
func components(c corev1.Container) (string, bool) {
	comps, leader := "controller,api,proxy", true
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--components="):
			comps = strings.TrimPrefix(a, "--components=")
		case a == "--leader-elect" || a == "--leader-elect=true":
			leader = true
		case a == "--leader-elect=false":
			leader = false
		}
	}
	return comps, leader
}

func checkDeployments(t *testing.T, dir string, m *manifests) {
	var controllers, frontends int
	for _, d := range m.deployments {
		where := dir + " Deployment " + d.Name
		spec := d.Spec.Template.Spec
		if d.Namespace != namespace || spec.ServiceAccountName != serviceAccount {
			t.Errorf("%s: namespace %q service account %q, want %q and %q", where, d.Namespace, spec.ServiceAccountName, namespace, serviceAccount)
		}
		if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v", where, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", where, psc)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", where, len(spec.Containers))
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 || (sc.Privileged != nil && *sc.Privileged) {
			t.Errorf("%s: container securityContext %+v: want no privilege escalation, read-only root, all capabilities dropped", where, sc)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
			c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: want liveness /healthz and readiness /readyz probes", where)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: want CPU and memory requests and a memory limit, got %+v", where, c.Resources)
		}
		if !strings.Contains(c.Image, "/") {
			t.Errorf("%s: image %q was not set by the images transformer", where, c.Image)
		}
		var podNS bool
		for _, e := range c.Env {
			podNS = podNS || (e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace")
		}
		if !podNS {
			t.Errorf("%s: want POD_NAMESPACE from the downward API", where)
		}
		comps, leader := components(c)
		if strings.Contains(comps, "controller") {
			controllers++
			if !leader {
				t.Errorf("%s: runs the controller without leader election", where)
			}
		} else {
			frontends++
			if leader {
				t.Errorf("%s: components %s need no leader election: set --leader-elect=false so every replica serves at once", where, comps)
			}
		}
	}
	want := map[string][2]int{"default": {1, 0}, "split": {1, 1}}[dir]
	if controllers != want[0] || frontends != want[1] {
		t.Errorf("%s: %d controller and %d front-end Deployments, want %d and %d", dir, controllers, frontends, want[0], want[1])
	}
}

// checkServices: every Service selects pods of some Deployment that has the named target port and
// runs the component behind it.
func checkServices(t *testing.T, dir string, m *manifests) {
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			var found bool
			for _, d := range m.deployments {
				if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
					continue
				}
				c := d.Spec.Template.Spec.Containers[0]
				comps, _ := components(c)
				for _, cp := range c.Ports {
					if cp.Name == p.TargetPort.String() && (cp.Name == "metrics" || strings.Contains(comps, cp.Name)) {
						found = true
					}
				}
				if p.Name != "metrics" && !strings.Contains(comps, p.Name) {
					t.Errorf("%s: Service %s port %s selects Deployment %s, which runs only %s", dir, s.Name, p.Name, d.Name, comps)
				}
			}
			if !found {
				t.Errorf("%s: Service %s port %s reaches no Deployment serving it", dir, s.Name, p.Name)
			}
		}
	}
}

// The integrity-key component mounts the operator's Secret into every Deployment of either
// overlay and points --integrity-key-file at it, so every replica verifies what another signed.
func TestIntegrityKeyComponent(t *testing.T) {
	for _, base := range []string{"default", "split"} {
		t.Run(base, func(t *testing.T) {
			m := buildWithComponent(t, base, "integrity-key")
			if len(m.deployments) == 0 {
				t.Fatalf("%s: no Deployments rendered", base)
			}
			checkOneImage(t, base+" with integrity-key", m)
			for _, d := range m.deployments {
				spec := d.Spec.Template.Spec
				if !slices.Contains(spec.Containers[0].Args, "--integrity-key-file=/etc/nogoo9/integrity/keys") {
					t.Errorf("%s: Deployment %s lacks --integrity-key-file: %v", base, d.Name, spec.Containers[0].Args)
				}
				mounted := slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(v corev1.VolumeMount) bool {
					return v.Name == "integrity-key" && v.MountPath == "/etc/nogoo9/integrity" && v.ReadOnly
				})
				fromSecret := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
					return v.Name == "integrity-key" && v.Secret != nil && v.Secret.SecretName == "nogoo9-integrity-key"
				})
				if !mounted || !fromSecret {
					t.Errorf("%s: Deployment %s does not mount Secret nogoo9-integrity-key read-only at /etc/nogoo9/integrity", base, d.Name)
				}
				// The kubelet writes the files as root (uid 0, gid 0 unless fsGroup): before fsGroup was
				// set, the process (uid 65532) could not read its key, and crash-looped at start.
				for _, v := range spec.Volumes {
					if v.Name != "integrity-key" || v.Secret == nil {
						continue
					}
					mode := int32(0o644)
					if v.Secret.DefaultMode != nil {
						mode = *v.Secret.DefaultMode
					}
					sc := spec.SecurityContext
					byGroup := sc != nil && sc.FSGroup != nil && sc.RunAsGroup != nil && *sc.FSGroup == *sc.RunAsGroup && mode&0o040 != 0
					if mode&0o004 == 0 && !byGroup {
						t.Errorf("%s: Deployment %s: the key's files (mode %#o, owner root:root) are not readable by the process: set the pod's fsGroup to its runAsGroup", base, d.Name, mode)
					}
				}
			}
		})
	}
}

// buildWithComponent renders base (default or split) with component added, as an operator's
// overlay in a directory of its own beside them.
func buildWithComponent(t *testing.T, base, component string) *manifests {
	t.Helper()
	dir, err := os.MkdirTemp(".", ".overlay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k := fmt.Sprintf("resources: [../%s]\ncomponents: [../%s]\n", base, component)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return build(t, dir)
}
