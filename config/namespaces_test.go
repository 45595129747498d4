package config_test

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nogoo9/no-crd/pkg/namespaces"
)

// allowedWorkspacesRole is what nogoo9 may do in a watched namespace: its own namespace's Role
// without the Lease and without updating ConfigMaps (quota ledgers stay in nogoo9's namespace).
// ConfigMaps: team templates are cached (list, watch), and their history ConfigMaps live beside
// them (create a kept version, delete those past the limit, get one for a rollback).
var allowedWorkspacesRole = map[string][]string{
	"/pods":                   {"create", "delete", "get", "list", "patch", "watch"},
	"/configmaps":             {"create", "delete", "get", "list", "watch"},
	"/persistentvolumeclaims": {"create", "delete", "get", "list", "watch"},
	"/events":                 {"create", "list", "patch", "watch"},
	"events.k8s.io/events":    {"create", "patch"},
	// One List per watched namespace at start (namespaces.Unisolated): a team namespace whose
	// workspace pods no NetworkPolicy isolates is named in an error. Read only.
	"networking.k8s.io/networkpolicies": {"list"},
}

// beyondHome is what nogoo9-workspaces may grant although nogoo9's own Role does not: in its own
// namespace nogoo9 reads no NetworkPolicy (config/network ships them with the install).
var beyondHome = map[string][]string{"networking.k8s.io/networkpolicies": {"list"}}

// allowedNamespaceReader lets --namespaces=<selector> list the labelled namespaces at start.
var allowedNamespaceReader = map[string][]string{"/namespaces": {"list"}}

const watchedLabel, watchedValue = "nogoo9/enabled", "true"

// TestSeveralNamespacesStayLeastPrivilege renders config/namespaces-example (config/default, the
// config/namespaces component and one team namespace) and checks what the component adds: one
// ClusterRole no wider than the home Role, bound only per namespace by RoleBindings, `list
// namespaces` for the selector and nothing else cluster-wide, the admission policy extended to
// the watched namespaces unchanged, and the Deployment watching exactly what the policy guards.
func TestSeveralNamespacesStayLeastPrivilege(t *testing.T) {
	const dir = "namespaces-example"
	m := build(t, dir)
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}

	if len(m.roles) != 1 || m.roles[0].Namespace != namespace {
		t.Fatalf("%s: want the one Role of %s, got %v", dir, namespace, m.kinds)
	}
	if d := equalRules(flatten(t, dir+" Role", m.roles[0].Rules), allowedRole); d != "" {
		t.Errorf("%s: the home Role changed: %s", dir, d)
	}
	roles := map[string]map[string][]string{}
	for _, cr := range m.clusterRoles {
		if cr.AggregationRule != nil {
			t.Errorf("%s: ClusterRole %s aggregates other roles", dir, cr.Name)
		}
		roles[cr.Name] = flatten(t, dir+" ClusterRole "+cr.Name, cr.Rules)
	}
	want := map[string]map[string][]string{
		"nogoo9-tokenreview":      allowedClusterRole,
		"nogoo9-workspaces":       allowedWorkspacesRole,
		"nogoo9-namespace-reader": allowedNamespaceReader,
	}
	if len(roles) != len(want) {
		t.Errorf("%s: ClusterRoles %v, want exactly %v", dir, slices.Sorted(maps.Keys(roles)), slices.Sorted(maps.Keys(want)))
	}
	for name, w := range want {
		if d := equalRules(roles[name], w); d != "" {
			t.Errorf("%s: ClusterRole %s is not the least privilege nogoo9 needs: %s", dir, name, d)
		}
	}
	// The watched-namespace role never grants more than the home Role does.
	for k, verbs := range allowedWorkspacesRole {
		for _, v := range verbs {
			if !slices.Contains(allowedRole[k], v) && !slices.Contains(beyondHome[k], v) {
				t.Errorf("nogoo9-workspaces grants %s %s, which nogoo9 does not even have in its own namespace", v, k)
			}
		}
	}

	// Cluster-wide: only TokenReview, SubjectAccessReview, reading nodes and listing namespaces
	// (config_test.go holds the rules). The workspaces role is bound per
	// namespace, never cluster-wide.
	for _, crb := range m.clusterBindings {
		if crb.RoleRef.Name == "nogoo9-workspaces" {
			t.Errorf("%s: ClusterRoleBinding %s binds nogoo9-workspaces cluster-wide: bind it per namespace with a RoleBinding", dir, crb.Name)
		}
		if !slices.Equal(crb.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("%s: ClusterRoleBinding %s binds %+v, want only %+v", dir, crb.Name, crb.Subjects, sa)
		}
	}
	var watched []string
	for _, rb := range m.roleBindings {
		if !slices.Equal(rb.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("%s: RoleBinding %s/%s binds %+v, want only %+v", dir, rb.Namespace, rb.Name, rb.Subjects, sa)
		}
		if rb.RoleRef.Kind == "ClusterRole" {
			if rb.RoleRef.Name != "nogoo9-workspaces" || rb.Namespace == namespace || rb.Namespace == "" {
				t.Errorf("%s: RoleBinding %s/%s binds ClusterRole %s: only nogoo9-workspaces, in a watched namespace", dir, rb.Namespace, rb.Name, rb.RoleRef.Name)
			}
			watched = append(watched, rb.Namespace)
		}
	}
	if !slices.Equal(watched, []string{"team-a"}) {
		t.Errorf("%s: nogoo9-workspaces is bound in %v, want [team-a]", dir, watched)
	}

	// The Deployment watches the namespaces the label selects; the admission policy guards them.
	if len(m.deployments) != 1 {
		t.Fatalf("%s: want one Deployment, got %v", dir, m.kinds)
	}
	var flag string
	for _, a := range m.deployments[0].Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--namespaces="); ok {
			flag = v
		}
	}
	spec, err := namespaces.Parse(flag)
	if err != nil || !spec.IsSelector() {
		t.Fatalf("%s: --namespaces=%q: want a label selector (%v)", dir, flag, err)
	}
	if !spec.Selector.Matches(labels.Set{watchedLabel: watchedValue}) || spec.Selector.Matches(labels.Set{}) {
		t.Errorf("%s: --namespaces=%s does not select exactly namespaces labelled %s=%s", dir, flag, watchedLabel, watchedValue)
	}
	checkWatchedAdmission(t, dir, m)
}

// checkWatchedAdmission: the watched namespaces get the bookkeeping policy's twin, which differs
// only in naming nogoo9's service account in full, bound to the label --namespaces selects.
func checkWatchedAdmission(t *testing.T, dir string, m *manifests) {
	pol := map[string]admissionv1.ValidatingAdmissionPolicy{}
	for _, p := range m.policies {
		pol[p.Name] = p
	}
	home, ok1 := pol["nogoo9-bookkeeping"]
	twin, ok2 := pol["nogoo9-bookkeeping-watched"]
	if !ok1 || !ok2 || len(pol) != 2 {
		t.Fatalf("%s: want policies nogoo9-bookkeeping and nogoo9-bookkeeping-watched, got %v", dir, m.kinds)
	}
	checkGuardedResources(t, dir, home)
	checkGuardedResources(t, dir, twin)
	a, b := home.Spec.DeepCopy(), twin.Spec.DeepCopy()
	a.MatchConditions, b.MatchConditions = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s: nogoo9-bookkeeping-watched differs from nogoo9-bookkeeping in more than its match condition: change config/namespaces/bookkeeping_watched_policy.yaml with config/admission/bookkeeping_policy.yaml", dir)
	}
	if len(twin.Spec.MatchConditions) != 1 || twin.Spec.MatchConditions[0].Expression != "request.userInfo.username != 'system:serviceaccount:"+namespace+":"+serviceAccount+"'" {
		t.Errorf("%s: nogoo9-bookkeeping-watched match conditions %+v: want exactly nogoo9's service account %s/%s exempt", dir, twin.Spec.MatchConditions, namespace, serviceAccount)
	}
	var found bool
	for _, bd := range m.bindings {
		if bd.Spec.PolicyName != twin.Name {
			continue
		}
		found = true
		if !slices.Equal(bd.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) || bd.Spec.MatchResources == nil || bd.Spec.MatchResources.NamespaceSelector == nil {
			t.Fatalf("%s: binding %s: want Deny and a namespaceSelector", dir, bd.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(bd.Spec.MatchResources.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set{watchedLabel: watchedValue}) || sel.Matches(labels.Set{"kubernetes.io/metadata.name": "default"}) {
			t.Errorf("%s: binding %s selects %v, want the namespaces labelled %s=%s", dir, bd.Name, sel, watchedLabel, watchedValue)
		}
	}
	if !found {
		t.Errorf("%s: no binding for %s: the watched namespaces would be unguarded", dir, twin.Name)
	}
}

// TestTeamNamespaceNetwork: a team namespace gets the workspace NetworkPolicies of nogoo9's own
// namespace (config/namespaces/workspace-network), the ingress naming nogoo9's namespace for the
// proxy. Without them a workspace of one team reaches another team's IDE port directly. The base
// carries no namespace (`kubectl apply -k ... -n team` places it), config/namespaces-example puts
// it in team-a, and both isolate the pods nogoo9 renders as the home policies do.
func TestTeamNamespaceNetwork(t *testing.T) {
	pods := samplePods(t)
	home := build(t, "default")
	homePolicies := map[string]networkingv1.NetworkPolicy{}
	for _, np := range home.networkPolicies {
		homePolicies[np.Name] = np
	}

	base := build(t, "namespaces/workspace-network")
	if len(base.networkPolicies) != 2 || len(base.kinds) != 2 {
		t.Fatalf("namespaces/workspace-network renders %v, want the two workspace NetworkPolicies only", base.kinds)
	}
	for i := range base.networkPolicies {
		np := &base.networkPolicies[i]
		if np.Namespace != "" {
			t.Errorf("namespaces/workspace-network: NetworkPolicy %s is in namespace %q: leave it empty, so `kubectl apply -k ... -n <team>` places it", np.Name, np.Namespace)
		}
		np.Namespace = otherTeam // as kubectl apply -n otherTeam does
		h, ok := homePolicies[np.Name]
		if !ok {
			t.Errorf("namespaces/workspace-network: NetworkPolicy %s has no twin in nogoo9's namespace", np.Name)
			continue
		}
		// The same policy but for naming the proxy's namespace.
		team := np.Spec.DeepCopy()
		for j := range team.Ingress {
			for k := range team.Ingress[j].From {
				team.Ingress[j].From[k].NamespaceSelector = nil
			}
		}
		if !reflect.DeepEqual(*team, h.Spec) {
			t.Errorf("namespaces/workspace-network: NetworkPolicy %s differs from nogoo9's namespace's in more than the proxy's namespace:\n team %+v\n home %+v", np.Name, np.Spec, h.Spec)
		}
	}
	base.deployments = home.deployments // the proxy the team's policies let in
	for _, p := range checkNetworkIn(base, pods, otherTeam) {
		t.Errorf("namespaces/workspace-network applied to %s: %s", otherTeam, p)
	}

	m := build(t, "namespaces-example")
	for _, ns := range []string{namespace, "team-a"} {
		for _, p := range checkNetworkIn(m, pods, ns) {
			t.Errorf("namespaces-example: %s", p)
		}
	}
}
