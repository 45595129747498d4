package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// keysWith returns "namespace/id" of the workspaces of ws whose id starts with prefix, in order.
func keysWith(ws []frontend.Workspace, prefix string) []string {
	out := []string{}
	for _, w := range ws {
		if strings.HasPrefix(w.ID, prefix) {
			out = append(out, w.Namespace+"/"+w.ID)
		}
	}
	return out
}

// The kubectl-style list across namespaces, in REST (?allNamespaces=true) and MCP
// (allNamespaces): every watched namespace, sorted by (namespace, id), each workspace naming its
// namespace; a user sees their own, an admin everyone's; paging across namespaces lists each
// workspace once; bad combinations are 400s saying what to do.
func TestListAcrossNamespaces(t *testing.T) {
	skipShort(t)
	seedIn(t, teamNS, "gina", "gx-a", "1.0")
	seedIn(t, ns, "gina", "gx-b", "1.0")
	seedIn(t, ns, "hank", "gx-a", "1.0")
	seedIn(t, teamNS, "gina", "gx-c", "1.0")
	gina, hank, admin := userToken("gina"), userToken("hank"), adminToken("root")
	type page struct {
		Workspaces []frontend.Workspace
		Continue   string
	}
	list := func(g Gomega, token, path string) page {
		code, body := rest(t, token, "GET", path, nil)
		g.Expect(code).To(Equal(200), string(body))
		var p page
		g.Expect(json.Unmarshal(body, &p)).To(Succeed())
		return p
	}

	t.Run("REST: a user's list across namespaces holds their own workspaces, by namespace then id", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(keysWith(list(g, gina, "/api/v1/workspaces?allNamespaces=true").Workspaces, "gx-")).To(Equal([]string{"default/gx-b", "team/gx-a", "team/gx-c"}))
		g.Expect(keysWith(list(g, hank, "/api/v1/workspaces?allNamespaces=true").Workspaces, "gx-")).To(Equal([]string{"default/gx-a"}))
		// Without allNamespaces the list stays nogoo9's own namespace, as before.
		g.Expect(keysWith(list(g, gina, "/api/v1/workspaces").Workspaces, "gx-")).To(Equal([]string{"default/gx-b"}))
	})

	t.Run("REST: an admin pages through every user's workspaces of every namespace, each once", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(keysWith(list(g, admin, "/api/v1/workspaces?allNamespaces=true&all=true").Workspaces, "gx-")).To(Equal([]string{"default/gx-a", "default/gx-b", "team/gx-a", "team/gx-c"}))
		var got []frontend.Workspace
		path := "/api/v1/workspaces?allNamespaces=true&all=true&limit=1"
		for i := 0; ; i++ {
			g.Expect(i).To(BeNumerically("<", 1000), "paging does not end")
			p := list(g, admin, path)
			g.Expect(len(p.Workspaces)).To(BeNumerically("<=", 1))
			got = append(got, p.Workspaces...)
			if p.Continue == "" {
				break
			}
			path = "/api/v1/workspaces?allNamespaces=true&all=true&limit=1&continue=" + p.Continue
		}
		g.Expect(keysWith(got, "gx-")).To(Equal([]string{"default/gx-a", "default/gx-b", "team/gx-a", "team/gx-c"}))
		seen := map[string]bool{}
		for _, w := range got {
			k := w.Namespace + "/" + w.ID
			g.Expect(seen).NotTo(HaveKey(k), "listed twice")
			seen[k] = true
		}
	})

	t.Run("REST: bad combinations and continue values of the other list are 400s", func(t *testing.T) {
		g := NewWithT(t)
		code, body := rest(t, gina, "GET", "/api/v1/namespaces/team/workspaces?allNamespaces=true", nil)
		g.Expect(code).To(Equal(400))
		g.Expect(string(body)).To(And(ContainSubstring(`names namespace \"team\"`), ContainSubstring("GET /api/v1/workspaces?allNamespaces=true")))
		code, body = rest(t, gina, "GET", "/api/v1/workspaces?allNamespaces=perhaps", nil)
		g.Expect(code).To(Equal(400))
		g.Expect(string(body)).To(ContainSubstring(`allNamespaces=\"perhaps\" is not a boolean`))
		code, body = rest(t, hank, "GET", "/api/v1/workspaces?allNamespaces=true&all=true", nil)
		g.Expect(code).To(Equal(403), string(body))

		one := list(g, gina, "/api/v1/namespaces/team/workspaces?limit=1")
		g.Expect(one.Continue).NotTo(BeEmpty())
		code, body = rest(t, gina, "GET", "/api/v1/workspaces?allNamespaces=true&continue="+one.Continue, nil)
		g.Expect(code).To(Equal(400))
		g.Expect(string(body)).To(ContainSubstring("continue belongs to a list of one namespace"))
		across := list(g, gina, "/api/v1/workspaces?allNamespaces=true&limit=1")
		g.Expect(across.Continue).NotTo(BeEmpty())
		code, body = rest(t, gina, "GET", "/api/v1/namespaces/team/workspaces?continue="+across.Continue, nil)
		g.Expect(code).To(Equal(400))
		g.Expect(string(body)).To(ContainSubstring("continue belongs to a list across namespaces"))
	})

	t.Run("MCP: list_workspaces with allNamespaces", func(t *testing.T) {
		g := NewWithT(t)
		s := mustSession(t, gina)
		var p page
		g.Expect(call(t, s, "list_workspaces", map[string]any{"allNamespaces": true}, &p)).To(BeEmpty())
		g.Expect(keysWith(p.Workspaces, "gx-")).To(Equal([]string{"default/gx-b", "team/gx-a", "team/gx-c"}))
		p = page{}
		g.Expect(call(t, s, "list_workspaces", map[string]any{"allNamespaces": true, "limit": 2}, &p)).To(BeEmpty())
		g.Expect(p.Continue).NotTo(BeEmpty())
		first := keysWith(p.Workspaces, "gx-")
		cont := p.Continue
		p = page{}
		g.Expect(call(t, s, "list_workspaces", map[string]any{"allNamespaces": true, "limit": 2, "continue": cont}, &p)).To(BeEmpty())
		g.Expect(append(first, keysWith(p.Workspaces, "gx-")...)).To(Equal([]string{"default/gx-b", "team/gx-a", "team/gx-c"}))
		g.Expect(call(t, s, "list_workspaces", map[string]any{"allNamespaces": true, "namespace": "team"}, nil)).To(ContainSubstring(`namespace "team" and allNamespaces=true both given`))
		g.Expect(call(t, s, "list_workspaces", map[string]any{"namespace": "team", "continue": cont}, nil)).To(ContainSubstring("continue belongs to a list across namespaces"))
	})
}

// An admin rolls a template's workspaces back with POST /api/v1/templates/{name}/rollback: every
// watched namespace's workspaces of nogoo9's template get the intent, each entry of the answer
// names its namespace, and a team namespace's workspace that follows its own template of the same
// name is left alone.
func TestTemplateRollbackCoversEveryWatchedNamespace(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	home := seedIn(t, ns, "rita", "rb-a", "0.9")
	team := seedIn(t, teamNS, "sam", "rb-b", "0.9")
	own := seedWith(t, teamNS, "tom", "rb-c", "0.9", map[string]string{workspace.AnnTemplateNamespace: teamNS})

	code, body := rest(t, adminToken("root"), "POST", "/api/v1/templates/python/rollback", map[string]string{"version": "1.0"})
	g.Expect(code).To(Equal(202), string(body))
	var answer struct{ Upgrades []frontend.UpgradeResult }
	g.Expect(json.Unmarshal(body, &answer)).To(Succeed())
	var got []string
	for _, r := range answer.Upgrades {
		if strings.HasPrefix(r.ID, "rb-") {
			got = append(got, r.Namespace+"/"+r.ID+":"+r.Status)
		}
	}
	g.Expect(got).To(Equal([]string{"default/rb-a:upgrading", "team/rb-b:upgrading"}))

	for _, p := range []*corev1.Pod{home, team, own} {
		var now corev1.Pod
		g.Expect(env.k8s.Get(boundedCtx(t), client.ObjectKeyFromObject(p), &now)).To(Succeed())
		want := "1.0"
		if p == own {
			want = ""
		}
		g.Expect(now.Annotations[workspace.AnnTargetVersion]).To(Equal(want), "pod %s/%s", p.Namespace, p.Name)
	}
}
