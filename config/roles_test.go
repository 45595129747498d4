package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The Roles config/roles ships for the people around nogoo9, and exactly what each grants in
// nogoo9's namespace. The built-in edit and admin roles there are nogoo9 itself (docs/deploy.md,
// "Who else may act in nogoo9-system"); these are what to bind instead.
var peopleRoles = map[string]map[string][]string{
	// Template authors: ConfigMaps, and nothing else. The admission policy keeps quota ledgers and
	// kept template versions nogoo9's; the template policy bounds what a template may ask for.
	"nogoo9-template-author": {
		"/configmaps": {"create", "delete", "get", "list", "patch", "update", "watch"},
	},
	// Operators: look at workspace pods and their Events, and delete a pod. No create (a pod
	// naming nogoo9's service account runs as nogoo9), no patch (a patch may change the image of
	// a running pod, nogoo9's own included), no exec, attach or port-forward (into nogoo9's pod:
	// its token).
	"nogoo9-workspace-operator": {
		"/pods":   {"delete", "get", "list", "watch"},
		"/events": {"get", "list", "watch"},
	},
}

// forbiddenForPeople: any of these in nogoo9's namespace lets a person act as nogoo9-manager (write
// every bookkeeping key, read the integrity key, forge an upgrade record) or grant themselves more.
func forbiddenForPeople(where string, rules []rbacv1.PolicyRule) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, where+": "+fmt.Sprintf(format, args...)) }
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
			add("rule %+v has a wildcard", r)
		}
		for _, v := range r.Verbs {
			if v == "impersonate" || v == "escalate" || v == "bind" {
				add("rule %+v grants %s", r, v)
			}
		}
		for _, res := range r.Resources {
			switch base, sub, _ := strings.Cut(res, "/"); {
			case base == "secrets":
				add("rule %+v grants access to secrets (the integrity key)", r)
			case base == "serviceaccounts":
				add("rule %+v grants %s (a token, or impersonation, of nogoo9-manager)", r, res)
			case base == "pods" && slices.Contains([]string{"exec", "attach", "portforward", "proxy", "ephemeralcontainers"}, sub):
				add("rule %+v grants %s: a shell in nogoo9's own pod reads its token", r, res)
			case base == "pods" && sub == "" && slices.ContainsFunc(r.Verbs, func(v string) bool { return v == "create" || v == "patch" || v == "update" }):
				add("rule %+v may create or change pods: a pod that names nogoo9's service account, or nogoo9's own pod with another image, runs as nogoo9", r)
			}
		}
		if slices.Contains(r.APIGroups, "rbac.authorization.k8s.io") || slices.Contains(r.APIGroups, "admissionregistration.k8s.io") {
			add("rule %+v touches RBAC or admission", r)
		}
		if len(r.NonResourceURLs) > 0 {
			add("rule %+v grants non-resource URLs", r)
		}
	}
	return problems
}

// TestPeopleRolesGrantNothingOfNogoo9s renders config/roles into an overlay of each install and
// holds each Role to its table and away from everything that makes a person nogoo9.
func TestPeopleRolesGrantNothingOfNogoo9s(t *testing.T) {
	for _, base := range []string{"default", "split"} {
		t.Run(base, func(t *testing.T) {
			m := buildWithComponent(t, base, "roles")
			got := map[string]rbacv1.Role{}
			for _, r := range m.roles {
				if r.Name != "nogoo9-manager" {
					got[r.Name] = r
				}
			}
			if len(got) != len(peopleRoles) {
				t.Errorf("%s with config/roles: Roles %v, want nogoo9-manager and exactly %v", base, m.kinds, peopleRoles)
			}
			for name, want := range peopleRoles {
				r, ok := got[name]
				if !ok {
					t.Errorf("%s with config/roles: no Role %s", base, name)
					continue
				}
				if r.Namespace != namespace {
					t.Errorf("Role %s in namespace %q, want %q", name, r.Namespace, namespace)
				}
				if d := equalRules(flatten(t, "Role "+name, r.Rules), want); d != "" {
					t.Errorf("Role %s: %s", name, d)
				}
				for _, p := range forbiddenForPeople("Role "+name, r.Rules) {
					t.Error(p)
				}
			}
			// The component binds nobody: the operator chooses who gets which Role.
			if len(m.roleBindings) != 1 || len(m.clusterRoles) != 1 || len(m.clusterBindings) != 1 {
				t.Errorf("%s with config/roles: %v: the component should add Roles only, no bindings", base, m.kinds)
			}
		})
	}
}

// The check itself catches what the built-in edit role has in nogoo9's namespace.
func TestForbiddenForPeopleCatchesWhatEditGrants(t *testing.T) {
	edit := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles"}, Verbs: []string{"escalate", "bind"}},
		{APIGroups: []string{"*"}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
	}
	got := forbiddenForPeople("edit", edit)
	for i, want := range []string{"impersonate", "serviceaccounts/token", "secrets", "pods/exec", "create or change pods", "create or change pods", "escalate", "wildcard"} {
		if !slices.ContainsFunc(got, func(p string) bool {
			return strings.Contains(p, want) && strings.Contains(p, fmt.Sprint(edit[i].Resources))
		}) {
			t.Errorf("rule %+v: not reported as %q; reported %v", edit[i], want, got)
		}
	}
}
