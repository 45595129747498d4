package e2e

import (
	"context"
	"encoding/json"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	rbacv1 "k8s.io/api/rbac/v1"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Several namespaces (--namespaces) and clean URLs, end to end: one nogoo9 whose own namespace is
// A also watches namespace B. A workspace in B (created there as another nogoo9 or an operator
// would, from the same template) is routed by the proxy, upgraded by the controller with the
// template of nogoo9's namespace, and counted in its owner's quota; a workspace id used in both
// namespaces stays two workspaces with two paths; a pod stamped with the old path shape still
// routes. A team namespace's own template serves spawns there (docs/templates.md, "Where a
// template is looked up").
var _ = Describe("Several namespaces and clean URLs", Label("namespaces"), func() {
	It("routes, upgrades and counts quota for workspaces in two namespaces, and keeps old-style paths", func(ctx SpecContext) {
		nsA, nsB := NewNamespace(), NewNamespace()
		port := pxFreePort()
		tmplCM := pxTemplate(nsA, "ide", "1.0", "example.com/ide:1.0", port)
		Expect(K8s.Create(ctx, tmplCM)).To(Succeed())
		alice, bob := pxUserToken(ctx, nsA, "alice"), pxUserToken(ctx, nsA, "bob")
		aliceSub := "system:serviceaccount:" + nsA + ":alice"
		p := StartNogoo9("--namespace="+nsA, "--namespaces="+nsA+","+nsB, "--max-workspaces-per-user=3")

		By("naming namespace B in an error at start: it lacks nogoo9/enabled=true, so the admission policy does not cover it")
		var warned []string
		for _, l := range strings.Split(p.logOfLastStart(), "\n") {
			if strings.Contains(l, "is not labelled nogoo9/enabled=true") {
				warned = append(warned, l)
			}
		}
		Expect(warned).To(HaveLen(1), "one error, for namespace B alone (A is nogoo9's own)")
		Expect(warned[0]).To(ContainSubstring(nsB))

		By("spawning workspace box in nogoo9's namespace: its path names the namespace")
		wA := pxSpawn(p, alice, "ide", "box")
		Expect(wA.WorkspacePath).To(Equal("/ws/" + nsA + "/box/"))
		Expect(wA.PreviewPath).To(Equal("/preview/" + nsA + "/box/"))
		podA := WaitPodReady(nsA, wA.ActivePod)

		By("creating workspace box of the same owner in namespace B, and a workspace with an old-style path in A")
		tmpl, err := templates.FromConfigMap(tmplCM, "test")
		Expect(err).NotTo(HaveOccurred())
		create := func(id spawner.Identity) *corev1.Pod {
			GinkgoHelper()
			pod, _, err := spawner.BuildPod(tmpl, id, workspace.PodName(id.Owner, id.ID))
			Expect(err).NotTo(HaveOccurred())
			pod.Namespace = id.Namespace
			Expect(K8s.Create(ctx, pod)).To(Succeed())
			return WaitPodReady(pod.Namespace, pod.Name)
		}
		podB := create(spawner.Identity{Owner: aliceSub, ID: "box", Namespace: nsB})
		Expect(podB.Annotations[workspace.AnnWorkspacePath]).To(Equal("/ws/" + nsB + "/box/"))
		oldPath := "/ws/" + workspace.UserLabel(aliceSub) + "/legacy/"
		podOld := create(spawner.Identity{Owner: aliceSub, ID: "legacy", Namespace: nsA,
			WorkspacePath: oldPath, PreviewPath: "/preview/" + workspace.UserLabel(aliceSub) + "/legacy/"})
		for _, pod := range []*corev1.Pod{podA, podB, podOld} {
			pxStartBackend(pod.Status.PodIP, port, pod.Name)
		}

		By("the proxy routes each path to its own namespace's pod, and only for the owner")
		for path, pod := range map[string]string{
			"/ws/" + nsA + "/box/": podA.Name, "/ws/" + nsB + "/box/": podB.Name, oldPath: podOld.Name,
		} {
			Eventually(func(g Gomega) {
				code, rep, body := pxGet(p.ProxyURL+path+"index.html", alice)
				g.Expect(code).To(Equal(http.StatusOK), "%s", body)
				g.Expect(rep.Pod).To(Equal(pod))
			}).Should(Succeed(), "%s is served by pod %s", path, pod)
		}
		code, _, body := pxGet(p.ProxyURL+"/ws/"+nsB+"/box/", bob)
		Expect(code).To(Equal(http.StatusForbidden), "%s", body)

		By("the quota counts alice's workspaces in both namespaces")
		code, raw := pxAPI(p, alice, http.MethodPost, "/api/v1/workspaces", map[string]any{"template": "ide", "id": "fourth"})
		Expect(code).To(Equal(http.StatusTooManyRequests), "%s", raw)
		Expect(string(raw)).To(ContainSubstring(nsB + "/box"))

		By("the controller upgrades the workspace in B with the template of nogoo9's namespace, and its path stays")
		tmplCM.Annotations[workspace.AnnTemplateVersion] = "2.0"
		tmplCM.Data[workspace.DataSpec] = pxTemplateSpec("example.com/ide:2.0", port)
		Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "ide"}}, client.RawPatch(types.MergePatchType,
			mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]string{workspace.AnnTemplateVersion: "2.0"}},
				"data": map[string]string{workspace.DataSpec: tmplCM.Data[workspace.DataSpec]}})))).To(Succeed())
		// Requested again until the controller has seen version 2.0 (it clears a request it cannot act on).
		var upgraded *corev1.Pod
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(nsB), client.MatchingLabels{workspace.LabelWorkspaceID: "box"})).To(Succeed())
			for i := range list.Items {
				if pod := &list.Items[i]; pod.Labels[workspace.LabelTemplateVersion] == "2.0" && pod.DeletionTimestamp == nil {
					upgraded = pod
					return
				}
			}
			cur := &corev1.Pod{}
			g.Expect(K8s.Get(ctx, client.ObjectKeyFromObject(podB), cur)).To(Succeed())
			if cur.Annotations[workspace.AnnUpgradeRequested] == "" {
				g.Expect(K8s.Patch(ctx, cur, client.RawPatch(types.MergePatchType,
					mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]string{workspace.AnnUpgradeRequested: "true"}}})))).To(Succeed())
			}
			g.Expect(upgraded).NotTo(BeNil(), "no pod of version 2.0 in %s yet", nsB)
		}).Should(Succeed(), "the controller creates the 2.0 pod of %s/box", nsB)
		Expect(upgraded.Annotations[workspace.AnnWorkspacePath]).To(Equal("/ws/" + nsB + "/box/"))
		upgraded = WaitPodReady(nsB, upgraded.Name)
		pxStartBackend(upgraded.Status.PodIP, port, upgraded.Name)
		Eventually(func(g Gomega) {
			code, rep, body := pxGet(p.ProxyURL+"/ws/"+nsB+"/box/", alice)
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
			g.Expect(rep.Pod).To(Equal(upgraded.Name))
		}).Should(Succeed(), "the proxy moves /ws/%s/box/ to the upgraded pod", nsB)
		Expect(strings.HasPrefix(upgraded.Name, podB.Name)).To(BeTrue(), "upgraded pod %s is named after %s", upgraded.Name, podB.Name)
	})

	It("names at start each watched team namespace whose workspace pods no NetworkPolicy isolates, and not one with config/namespaces/workspace-network", func(ctx SpecContext) {
		home, isolated, bare := NewNamespace(), NewNamespace(), NewNamespace()

		By("applying config/namespaces/workspace-network to one team namespace, as docs/deploy.md says (kubectl apply -k ... -n)")
		var n int
		for _, u := range kustomizeObjects("config/namespaces/workspace-network") {
			Expect(u.GetKind()).To(Equal("NetworkPolicy"))
			Expect(u.GetNamespace()).To(BeEmpty(), "the base leaves the namespace to kubectl apply -n")
			u.SetNamespace(isolated)
			Expect(K8s.Create(ctx, u)).To(Succeed(), "NetworkPolicy %s", u.GetName())
			n++
		}
		Expect(n).To(Equal(2))
		// The other team namespace holds a policy, but one for other pods: its workspaces stay open.
		Expect(K8s.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: bare, Name: "database"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "postgres"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}})).To(Succeed())

		p := StartNogoo9("--namespace="+home, "--namespaces="+home+","+isolated+","+bare)
		var named []string
		for _, l := range strings.Split(p.logOfLastStart(), "\n") {
			if strings.Contains(l, "no NetworkPolicy isolating its workspace pods") {
				named = append(named, l)
			}
		}
		Expect(named).To(HaveLen(1), "one error, for the namespace without the policies alone (nogoo9's own ships them with the install)")
		Expect(named[0]).To(And(ContainSubstring(bare), ContainSubstring("config/namespaces/workspace-network"), ContainSubstring("Ingress"), ContainSubstring("Egress")))
		Expect(named[0]).NotTo(ContainSubstring(isolated))
	})

	It("spawns in a team namespace through REST and MCP only for a caller its RoleBinding allows", func(ctx SpecContext) {
		home, team := NewNamespace(), NewNamespace()
		port := pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(home, "ide", "1.0", "example.com/ide:1.0", port))).To(Succeed())
		alice, bob := pxUserToken(ctx, home, "alice"), pxUserToken(ctx, home, "bob")
		aliceSub := "system:serviceaccount:" + home + ":alice"
		allowSpawn(ctx, team, aliceSub)
		p := StartNogoo9("--namespace="+home, "--namespaces="+home+","+team)

		By("alice, bound in the team namespace, spawns there through REST: the path says the namespace")
		code, raw := pxAPI(p, alice, http.MethodPost, "/api/v1/namespaces/"+team+"/workspaces", map[string]any{"template": "ide", "id": "box"})
		Expect(code).To(Equal(http.StatusCreated), "%s", raw)
		var w struct{ Namespace, WorkspacePath string }
		Expect(json.Unmarshal(raw, &w)).To(Succeed())
		Expect(w.Namespace).To(Equal(team))
		Expect(w.WorkspacePath).To(Equal("/ws/" + team + "/box/"))

		By("alice spawns there through MCP with the namespace argument")
		session := mcpClient(p, alice)
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "spawn_workspace", Arguments: map[string]any{"template": "ide", "id": "agent", "namespace": team}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeFalse(), "%v", res.Content)

		By("bob, not bound, is refused with the namespace and what to ask for, and nothing is created")
		code, raw = pxAPI(p, bob, http.MethodPost, "/api/v1/namespaces/"+team+"/workspaces", map[string]any{"template": "ide", "id": "intruder"})
		Expect(code).To(Equal(http.StatusForbidden), "%s", raw)
		Expect(string(raw)).To(And(ContainSubstring("may not create workspaces in namespace "+team), ContainSubstring("RoleBinding")))
		var list corev1.PodList
		Expect(K8s.List(ctx, &list, client.InNamespace(team), client.MatchingLabels{workspace.LabelWorkspaceID: "intruder"})).To(Succeed())
		Expect(list.Items).To(BeEmpty())
		code, raw = pxAPI(p, bob, http.MethodPost, "/api/v1/namespaces/not-watched-"+team+"/workspaces", map[string]any{"template": "ide", "id": "x"})
		Expect(code).To(Equal(http.StatusNotFound), "%s", raw)
		Expect(string(raw)).To(ContainSubstring("is not watched by nogoo9"))

		By("alice's list across namespaces holds both workspaces in the team namespace, by namespace then id")
		code, raw = pxAPI(p, alice, http.MethodPost, "/api/v1/workspaces", map[string]any{"template": "ide", "id": "home-box"})
		Expect(code).To(Equal(http.StatusCreated), "%s", raw)
		Eventually(func(g Gomega) {
			code, raw := pxAPI(p, alice, http.MethodGet, "/api/v1/workspaces?allNamespaces=true", nil)
			g.Expect(code).To(Equal(http.StatusOK), "%s", raw)
			var l struct {
				Workspaces []struct{ Namespace, ID string }
			}
			g.Expect(json.Unmarshal(raw, &l)).To(Succeed())
			var got []string
			for _, w := range l.Workspaces {
				got = append(got, w.Namespace+"/"+w.ID)
			}
			want := []string{team + "/agent", team + "/box"}
			if home < team {
				want = append([]string{home + "/home-box"}, want...)
			} else {
				want = append(want, home+"/home-box")
			}
			g.Expect(got).To(Equal(want))
		}).Should(Succeed(), "the list across namespaces shows alice's three workspaces")
	})

	It("spawns from a team namespace's own template, stamps it, and upgrades with it", func(ctx SpecContext) {
		home, team := NewNamespace(), NewNamespace()
		port := pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(home, "ide", "1.0", "example.com/ide:1.0", port))).To(Succeed())
		Expect(K8s.Create(ctx, pxTemplate(team, "ide", "7.0", "example.com/team-ide:7.0", port))).To(Succeed())
		alice := pxUserToken(ctx, home, "alice")
		aliceSub := "system:serviceaccount:" + home + ":alice"
		allowSpawn(ctx, team, aliceSub)
		p := StartNogoo9("--namespace="+home, "--namespaces="+home+","+team)

		By("the template list of the team namespace offers the team's ide, saying where it lives")
		type tmplInfo struct{ Name, Namespace, Version string }
		Eventually(func(g Gomega) {
			code, raw := pxAPI(p, alice, http.MethodGet, "/api/v1/namespaces/"+team+"/templates", nil)
			g.Expect(code).To(Equal(http.StatusOK), "%s", raw)
			var l struct{ Templates []tmplInfo }
			g.Expect(json.Unmarshal(raw, &l)).To(Succeed())
			g.Expect(l.Templates).To(Equal([]tmplInfo{{Name: "ide", Namespace: team, Version: "7.0"}}))
		}).Should(Succeed())

		By("alice spawns ide in the team namespace through REST: the team's image, stamped")
		code, raw := pxAPI(p, alice, http.MethodPost, "/api/v1/namespaces/"+team+"/workspaces", map[string]any{"template": "ide", "id": "box"})
		Expect(code).To(Equal(http.StatusCreated), "%s", raw)
		var w workspace.Info
		Expect(json.Unmarshal(raw, &w)).To(Succeed())
		Expect(w.TemplateVersion).To(Equal("7.0"))
		Expect(w.TemplateNamespace).To(Equal(team))
		pod := WaitPodReady(team, w.ActivePod)
		Expect(pod.Spec.Containers[0].Image).To(Equal("example.com/team-ide:7.0"))
		Expect(pod.Annotations).To(HaveKeyWithValue(workspace.AnnTemplateNamespace, team))

		By("the team raises its template: the workspace is outdated against the team's version, and upgrades to it")
		Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "ide"}}, client.RawPatch(types.MergePatchType,
			mustJSON(map[string]any{"metadata": map[string]any{"annotations": map[string]string{workspace.AnnTemplateVersion: "8.0"}},
				"data": map[string]string{workspace.DataSpec: pxTemplateSpec("example.com/team-ide:8.0", port)}})))).To(Succeed())
		Eventually(func(g Gomega) {
			code, raw := pxAPI(p, alice, http.MethodGet, "/api/v1/namespaces/"+team+"/workspaces/box", nil)
			g.Expect(code).To(Equal(http.StatusOK), "%s", raw)
			var got workspace.Info
			g.Expect(json.Unmarshal(raw, &got)).To(Succeed())
			g.Expect(got.IsOutdated).To(BeTrue())
			g.Expect(got.LatestTemplateVersion).To(Equal("8.0"))
		}).Should(Succeed())
		code, raw = pxAPI(p, alice, http.MethodPost, "/api/v1/namespaces/"+team+"/workspaces/box/upgrade", nil)
		Expect(code).To(BeNumerically("<", 300), "%s", raw)
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(team), client.MatchingLabels{workspace.LabelWorkspaceID: "box"})).To(Succeed())
			var live []corev1.Pod
			for _, pod := range list.Items {
				if pod.DeletionTimestamp == nil {
					live = append(live, pod)
				}
			}
			g.Expect(live).To(HaveLen(1))
			g.Expect(live[0].Spec.Containers[0].Image).To(Equal("example.com/team-ide:8.0"))
			g.Expect(live[0].Annotations).To(HaveKeyWithValue(workspace.AnnTemplateNamespace, team))
		}).Should(Succeed(), "the workspace runs the team's version 8.0 alone")
	})
})

func mustJSON(v any) []byte {
	GinkgoHelper()
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// allowSpawn lets user create workspaces in namespace, as a platform team grants it
// (docs/deploy.md, "Who may spawn where"): a Role with create on workspaces.nogoo9.io and a
// RoleBinding to the user.
func allowSpawn(ctx context.Context, namespace, user string) {
	GinkgoHelper()
	Expect(K8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "nogoo9-spawn"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"nogoo9.io"}, Resources: []string{"workspaces"}, Verbs: []string{"create"}}}})).To(Succeed())
	Expect(K8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "nogoo9-spawn"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "nogoo9-spawn"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
}
