package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// teamSpec is a template spec that fits the default template policy, running image.
func teamSpec(image string) string {
	return `{"automountServiceAccountToken":false,
  "securityContext":{"runAsNonRoot":true,"runAsUser":1000,"seccompProfile":{"type":"RuntimeDefault"}},
  "containers":[{"name":"ide","image":"` + image + `","ports":[{"containerPort":8080}],
    "securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}`
}

func templateConfigMap(ns, name, version, image string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{workspace.LabelPodTemplate: "true"},
			Annotations: map[string]string{workspace.AnnTemplateVersion: version}},
		Data: map[string]string{workspace.DataSpec: teamSpec(image)},
	}
}

// teamEnv runs what main.go runs for two namespaces (nogoo9's and a watched team namespace):
// the cache, the template registry, the spawner, the workspace reconciler and the history recorder.
type teamEnv struct {
	t          *testing.T
	g          *gomega.WithT
	c          client.Client
	home, team string
	reg        *templates.Registry
	spawn      *spawner.Spawner
}

func startTeamEnv(t *testing.T, cfg *rest.Config, c client.Client, home, team string, nsTemplates bool) *teamEnv {
	t.Helper()
	e := &teamEnv{t: t, g: gomega.NewWithT(t), c: c, home: home, team: team}
	mgr := newTestManager(t, cfg, func(o *ctrl.Options) { o.Cache = podcache.OptionsFor([]string{home, team}) })
	policy := templates.DefaultPolicy()
	var err error
	e.reg, err = templates.Setup(mgr, templates.Options{Namespace: home, NamespaceTemplates: nsTemplates, Policy: &policy})
	e.g.Expect(err).NotTo(gomega.HaveOccurred())
	history := &templates.History{Reader: mgr.GetAPIReader(), Namespace: home, Policy: policy}
	e.spawn = spawner.New(mgr.GetClient(), mgr.GetAPIReader(), e.reg, spawner.Options{Namespace: home, Namespaces: []string{home, team}})
	managerSeq.Lock()
	managerSeq.n++
	name := fmt.Sprintf("%s-%d", UpgradeControllerName, managerSeq.n)
	managerSeq.Unlock()
	e.g.Expect(SetupWorkspaceReconciler(mgr, e.reg, UpgradeOptions{Name: name, History: history})).To(gomega.Succeed())
	e.g.Expect(SetupHistoryRecorder(mgr, e.reg, home, 0)).To(gomega.Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	runManager(t, ctx, mgr)
	syncCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	e.g.Expect(e.reg.WaitForSync(syncCtx)).To(gomega.BeTrue())
	return e
}

// spawnIn spawns owner's workspace id of template python in ns through the spawner and plays the
// kubelet: the pod becomes Ready.
func (e *teamEnv) spawnIn(ns, owner, id string) *corev1.Pod {
	e.t.Helper()
	res, err := e.spawn.Spawn(context.Background(), spawner.Request{Template: "python", Owner: owner, ID: id, Namespace: ns, Caller: spawner.Caller{Subject: owner}})
	e.g.Expect(err).NotTo(gomega.HaveOccurred())
	e.ready(ns, res.Pod.Name)
	return res.Pod
}

func (e *teamEnv) ready(ns, name string) {
	e.t.Helper()
	e.g.Eventually(func() error {
		var p corev1.Pod
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.244.0.9"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Ready: true, Image: "x",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		return e.c.Status().Update(context.Background(), &p)
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

// live is the one live pod of workspace id in ns (it waits until there is exactly one).
func (e *teamEnv) live(g gomega.Gomega, ns, id string) *corev1.Pod {
	var list corev1.PodList
	g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(gomega.Succeed())
	var out []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	g.Expect(out).To(gomega.HaveLen(1), "live pods of %s/%s", ns, id)
	return out[0]
}

// requestUpgrade writes the intent (as the front end or kubectl annotate does), to version when
// not empty, and plays the kubelet for the pod that replaces the current one, until the
// workspace runs a single pod of image. It returns that pod.
func (e *teamEnv) upgradeTo(ns, id, version, image string) *corev1.Pod {
	e.t.Helper()
	var cur *corev1.Pod
	e.g.Eventually(func(g gomega.Gomega) { cur = e.live(g, ns, id) }).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	ann := map[string]any{workspace.AnnUpgradeRequested: "true"}
	if version != "" {
		ann[workspace.AnnTargetVersion] = version
	}
	patch, _ := jsonMerge(ann)
	e.g.Expect(e.c.Patch(context.Background(), cur, client.RawPatch(types.MergePatchType, patch))).To(gomega.Succeed())
	var up *corev1.Pod
	e.g.Eventually(func(g gomega.Gomega) {
		var list corev1.PodList
		g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(gomega.Succeed())
		for i := range list.Items {
			p := &list.Items[i]
			if p.Name != cur.Name && p.DeletionTimestamp == nil && !workspace.IsReady(p) {
				e.ready(ns, p.Name)
			}
		}
		up = e.live(g, ns, id)
		g.Expect(up.Name).NotTo(gomega.Equal(cur.Name))
		g.Expect(up.Spec.Containers[0].Image).To(gomega.Equal(image))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	return up
}

func jsonMerge(ann map[string]any) ([]byte, error) {
	var parts []string
	for k, v := range ann {
		parts = append(parts, fmt.Sprintf("%q:%q", k, v))
	}
	return []byte(`{"metadata":{"annotations":{` + strings.Join(parts, ",") + `}}}`), nil
}

// historyVersions are the versions kept (history ConfigMaps) of template name in ns.
func (e *teamEnv) historyVersions(g gomega.Gomega, ns, name string) []string {
	var list corev1.ConfigMapList
	g.Expect(e.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelTemplateHistory: name})).To(gomega.Succeed())
	var out []string
	for _, cm := range list.Items {
		out = append(out, cm.Annotations[workspace.AnnTemplateVersion])
	}
	return out
}

// TestTeamTemplates tells the story of docs/templates.md, "Where a template is looked up": a
// template "python" in nogoo9's namespace and another "python" in a watched team namespace.
func TestTeamTemplates(t *testing.T) {
	cfg, c := startAPIServer(t)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	const home, team = "nogoo9-system", "team-a"
	for _, ns := range []string{home, team} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	}
	g.Expect(c.Create(ctx, templateConfigMap(home, "python", "1", "python:home-1"))).To(gomega.Succeed())

	// A workspace spawned in the team namespace before the team had a template of its own: no
	// stamp, nogoo9's template (what every existing workspace looks like).
	homeTmpl, err := templates.FromConfigMap(templateConfigMap(home, "python", "1", "python:home-1"), "configmap:"+home+"/python")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	old, _, err := spawner.BuildPod(homeTmpl, spawner.Identity{Owner: "carol", ID: "legacy", Namespace: team}, workspace.PodName("carol", "legacy"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	old.Namespace = team
	g.Expect(c.Create(ctx, old)).To(gomega.Succeed())
	g.Expect(old.Annotations).NotTo(gomega.HaveKey(workspace.AnnTemplateNamespace))

	// Then the team writes its own "python".
	g.Expect(c.Create(ctx, templateConfigMap(team, "python", "1", "python:team-1"))).To(gomega.Succeed())
	e := startTeamEnv(t, cfg, c, home, team, true)
	e.ready(team, old.Name)
	g.Eventually(func() bool { _, ok := e.reg.Get(team + "/python"); return ok }).WithTimeout(30 * time.Second).Should(gomega.BeTrue())

	t.Run("a spawn in the team namespace gets the team's template and is stamped with it", func(t *testing.T) {
		g := gomega.NewWithT(t)
		p := e.spawnIn(team, "alice", "mine")
		g.Expect(p.Spec.Containers[0].Image).To(gomega.Equal("python:team-1"))
		g.Expect(p.Annotations).To(gomega.HaveKeyWithValue(workspace.AnnTemplateNamespace, team))
		g.Expect(workspace.TemplateKey(p)).To(gomega.Equal(team + "/python"))
	})
	t.Run("a spawn in nogoo9's namespace gets nogoo9's template, unstamped", func(t *testing.T) {
		g := gomega.NewWithT(t)
		p := e.spawnIn(home, "bob", "mine") // the same id as alice's: ids are unique per namespace only
		g.Expect(p.Spec.Containers[0].Image).To(gomega.Equal("python:home-1"))
		g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnTemplateNamespace))
	})
	t.Run("a spawn in nogoo9's namespace cannot name the team's template by its key", func(t *testing.T) {
		g := gomega.NewWithT(t)
		_, err := e.spawn.Spawn(context.Background(), spawner.Request{Template: team + "/python", Owner: "mallory", ID: "stolen", Namespace: home, Caller: spawner.Caller{Subject: "mallory"}})
		g.Expect(spawner.CodeOf(err)).To(gomega.Equal(spawner.Invalid), "spawn of %s/python in %s: %v", team, home, err)
		g.Expect(err).To(gomega.MatchError(gomega.ContainSubstring(`template name "team-a/python" is not valid`)))
		var list corev1.PodList
		g.Expect(c.List(ctx, &list, client.MatchingLabels{workspace.LabelWorkspaceID: "stolen"})).To(gomega.Succeed())
		g.Expect(list.Items).To(gomega.BeEmpty())
	})
	t.Run("the template list for the team namespace shows the team's python, not nogoo9's", func(t *testing.T) {
		g := gomega.NewWithT(t)
		var where []string
		for _, i := range e.reg.ListFor(team) {
			where = append(where, i.Namespace+"/"+i.Name)
		}
		g.Expect(where).To(gomega.Equal([]string{team + "/python"}))
	})
	t.Run("the versions of each python are kept beside it", func(t *testing.T) {
		g := gomega.NewWithT(t)
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(e.historyVersions(g, home, "python")).To(gomega.ConsistOf("1"))
			g.Expect(e.historyVersions(g, team, "python")).To(gomega.ConsistOf("1"))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("raising the team's version makes only team-stamped workspaces outdated, and upgrades them to the team's spec", func(t *testing.T) {
		g := gomega.NewWithT(t)
		var cm corev1.ConfigMap
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: team, Name: "python"}, &cm)).To(gomega.Succeed())
		cm.Annotations[workspace.AnnTemplateVersion] = "2"
		cm.Data[workspace.DataSpec] = teamSpec("python:team-2")
		g.Expect(c.Update(ctx, &cm)).To(gomega.Succeed())
		g.Eventually(func() string { tm, _ := e.reg.Get(team + "/python"); return tm.Version }).WithTimeout(30 * time.Second).Should(gomega.Equal("2"))

		var pods []*corev1.Pod
		for _, ns := range []string{home, team} {
			var list corev1.PodList
			g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
			for i := range list.Items {
				pods = append(pods, &list.Items[i])
			}
		}
		g.Expect(OutdatedCounts(pods, e.reg)).To(gomega.Equal(map[outdatedKey]int{
			{template: team + "/python", outdated: true}: 1, // alice's, in the team namespace
			{template: "python", outdated: false}:        2, // bob's in nogoo9's namespace, carol's unstamped one
		}))

		up := e.upgradeTo(team, "mine", "", "python:team-2")
		g.Expect(up.Annotations).To(gomega.HaveKeyWithValue(workspace.AnnTemplateNamespace, team))
		g.Expect(workspace.TemplateVersion(up)).To(gomega.Equal("2"))
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(e.historyVersions(g, team, "python")).To(gomega.ConsistOf("1", "2"))
			g.Expect(e.historyVersions(g, home, "python")).To(gomega.ConsistOf("1"))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("an unstamped workspace in the team namespace keeps following nogoo9's template", func(t *testing.T) {
		g := gomega.NewWithT(t)
		// Asked to upgrade, it finds nothing to do: nogoo9's python is still at version 1.
		cur := workspace.PodName("carol", "legacy")
		var p corev1.Pod
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: team, Name: cur}, &p)).To(gomega.Succeed())
		g.Expect(c.Patch(ctx, &p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"nogoo9/upgrade-requested":"true"}}}`)))).To(gomega.Succeed())
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(c.Get(ctx, types.NamespacedName{Namespace: team, Name: cur}, &p)).To(gomega.Succeed())
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeRequested))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		g.Expect(e.live(g, team, "legacy").Spec.Containers[0].Image).To(gomega.Equal("python:home-1"))

		// nogoo9's next version is the one it upgrades to.
		var cm corev1.ConfigMap
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: home, Name: "python"}, &cm)).To(gomega.Succeed())
		cm.Annotations[workspace.AnnTemplateVersion] = "5"
		cm.Data[workspace.DataSpec] = teamSpec("python:home-5")
		g.Expect(c.Update(ctx, &cm)).To(gomega.Succeed())
		g.Eventually(func() string { tm, _ := e.reg.Get("python"); return tm.Version }).WithTimeout(30 * time.Second).Should(gomega.Equal("5"))
		up := e.upgradeTo(team, "legacy", "", "python:home-5")
		g.Expect(up.Annotations).NotTo(gomega.HaveKey(workspace.AnnTemplateNamespace))
	})

	t.Run("a rollback of a team workspace restores the team's kept version", func(t *testing.T) {
		g := gomega.NewWithT(t)
		up := e.upgradeTo(team, "mine", "1", "python:team-1")
		g.Expect(workspace.TemplateVersion(up)).To(gomega.Equal("1"))
		g.Expect(up.Annotations).To(gomega.HaveKeyWithValue(workspace.AnnTemplateNamespace, team))
	})
}

// With --namespace-templates=false nogoo9 reads templates from its own namespace only: a spawn in
// a team namespace gets nogoo9's template although the team has one of that name.
func TestTeamTemplatesOff(t *testing.T) {
	cfg, c := startAPIServer(t)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	const home, team = "nogoo9-system", "team-a"
	for _, ns := range []string{home, team} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	}
	g.Expect(c.Create(ctx, templateConfigMap(home, "python", "1", "python:home-1"))).To(gomega.Succeed())
	g.Expect(c.Create(ctx, templateConfigMap(team, "python", "1", "python:team-1"))).To(gomega.Succeed())
	e := startTeamEnv(t, cfg, c, home, team, false)
	p := e.spawnIn(team, "alice", "mine")
	g.Expect(p.Spec.Containers[0].Image).To(gomega.Equal("python:home-1"))
	g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnTemplateNamespace))
	_, found := e.reg.Get(team + "/python")
	g.Expect(found).To(gomega.BeFalse(), "the team's template is not read")
	for _, i := range e.reg.ListFor(team) {
		g.Expect(i.Namespace).To(gomega.Equal(home), "template %s is offered from %s", i.Name, i.Namespace)
	}
	// Nor is its history written there: once nogoo9's python is kept, the team's is not.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(e.historyVersions(g, home, "python")).To(gomega.ConsistOf("1"))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	g.Expect(e.historyVersions(g, team, "python")).To(gomega.BeEmpty())
}
