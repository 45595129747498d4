package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// patchPod is `kubectl annotate/label pod <name> ...` with a merge patch of labels and annotations
// (nil value: remove).
func (e *upgradeEnv) patchMeta(name string, labels, annotations map[string]*string) {
	e.t.Helper()
	meta := map[string]any{}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	body := fmt.Sprintf(`{"metadata":%s}`, mustJSON(meta))
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}}
	e.g.Expect(e.c.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(body)))).To(gomega.Succeed())
}

func str(s string) *string { return &s }

// resignRollbackSpec replaces pod name's nogoo9/rollback-spec with rewrite(the spec's pod JSON)
// and signs the upgrade record again with keys, as nogoo9 would have signed that value.
func (e *upgradeEnv) resignRollbackSpec(keys *upgrade.Keyring, name string, rewrite func(js string) string) {
	e.t.Helper()
	full := e.get(name)
	js, err := upgrade.DecodeRollbackSpec(full.Annotations[workspace.AnnRollbackSpec])
	e.g.Expect(err).NotTo(gomega.HaveOccurred())
	spec := rewrite(string(js))
	full.Annotations[workspace.AnnRollbackSpec] = spec
	e.patchMeta(name, nil, map[string]*string{workspace.AnnRollbackSpec: &spec,
		workspace.AnnUpgradeHMAC: str(keys.Sign(e.ns, name, full.Annotations, spec))})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// allPods lists every pod of the namespace that is not being deleted, by name.
func (e *upgradeEnv) allPods(g gomega.Gomega) map[string]*corev1.Pod {
	var list corev1.PodList
	g.Expect(e.c.List(context.Background(), &list, client.InNamespace(e.ns))).To(gomega.Succeed())
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out
}

// TestForgedAnnotationsOnAPIServer: a kubectl user who may patch pods writes nogoo9's upgrade
// bookkeeping by hand. Whatever they write, nogoo9 creates no pod it did not design and deletes no
// pod on its strength; it says so with a Warning Event. (No admission policy runs here: the
// controller holds on its own.)
func TestForgedAnnotationsOnAPIServer(t *testing.T) {
	cfg, c := startAPIServer(t)
	run := fmt.Sprintf("%d", time.Now().UnixNano()%100000)
	nsSeq := 0
	newEnv := func(t *testing.T, tmpl *templates.Template, opts UpgradeOptions) *upgradeEnv {
		nsSeq++
		ns := fmt.Sprintf("forge-%s-%d", run, nsSeq)
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		reg := &fakeTemplates{}
		reg.set(tmpl)
		return &upgradeEnv{t: t, g: gomega.NewWithT(t), cfg: cfg, c: c, ns: ns, reg: reg,
			clock: &testClock{now: time.Now()}, opts: opts}
	}
	// untouched: for a few seconds, exactly the pods in want exist (same UIDs) and nothing else.
	untouched := func(e *upgradeEnv, want ...*corev1.Pod) {
		e.t.Helper()
		e.g.Consistently(func(g gomega.Gomega) {
			pods := e.allPods(g)
			g.Expect(pods).To(gomega.HaveLen(len(want)))
			for _, w := range want {
				g.Expect(pods).To(gomega.HaveKey(w.Name))
				g.Expect(pods[w.Name].UID).To(gomega.Equal(w.UID))
			}
		}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
	}
	warned := func(e *upgradeEnv, pod string) {
		e.t.Helper()
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(e.events(g, pod)).To(gomega.ContainElement(upgrade.ReasonUntrustedAnnotations))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	}

	for _, strategy := range []string{"SideBySide", "Recreate", "Rollback"} {
		t.Run("another user's Ready pod annotated as the "+strategy+" upgrade of the real pod deletes nothing", func(t *testing.T) {
			e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
			e.start()
			real := e.spawn("jane", "demo")
			mine := e.spawn("mallory", "mine")
			e.patchMeta(mine.Name, map[string]*string{
				workspace.LabelWorkspaceID: str("demo"), workspace.LabelUserSub: str(real.Labels[workspace.LabelUserSub]),
			}, map[string]*string{
				workspace.AnnOwner: str("jane"), workspace.AnnUpgradeFrom: str(real.Name), workspace.AnnUpgradeFromUID: str(string(real.UID)),
				workspace.AnnUpgradeFromVersion: str("v1"), workspace.AnnUpgradeStrategy: str(strategy),
				workspace.AnnUpgradeStartedAt: str(time.Now().UTC().Format(time.RFC3339)),
			})
			warned(e, mine.Name)
			untouched(e, real, mine)
		})
	}

	t.Run("another user's Ready pod relabelled into the workspace as a newer duplicate deletes nothing", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		real := e.spawn("jane", "demo")
		mine := e.spawn("mallory", "mine")
		e.patchMeta(mine.Name, map[string]*string{
			workspace.LabelWorkspaceID: str("demo"), workspace.LabelUserSub: str(real.Labels[workspace.LabelUserSub]),
		}, map[string]*string{workspace.AnnOwner: str("jane")})
		warned(e, mine.Name)
		untouched(e, real, mine)
	})

	t.Run("a side-by-side upgrade in flight re-annotated as Recreate keeps the old pod until the new one is Ready", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		old := e.spawn("jane", "sbs")
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		up := e.upgradedPod("sbs", old.Name)
		e.annotate(up.Name, workspace.AnnUpgradeStrategy, str("Recreate"))
		warned(e, up.Name)
		untouched(e, old, up)
	})

	t.Run("a rollback spec replaced by hand is never created: the failed pod stays with the error", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", corev1.ReadWriteOnce), UpgradeOptions{Timeout: 10 * time.Minute})
		e.start()
		old := e.spawn("jane", "ml")
		up := e.recreateOntoBroken(old)
		// The forger's pod: the workspace's identity, nogoo9's own service account, another image.
		forged := fmt.Sprintf(`{"metadata":{"labels":{%q:"workspace",%q:"ml"}},"spec":{"serviceAccountName":"nogoo9","containers":[{"name":"x","image":"evil:1"}]}}`,
			workspace.LabelType, workspace.LabelWorkspaceID)
		e.annotate(up.Name, workspace.AnnRollbackSpec, &forged)
		e.failPastDeadline(up.Name, "CrashLoopBackOff", "back-off 5m0s restarting failed container")
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.pods(g, "ml")[up.Name]
			g.Expect(p).NotTo(gomega.BeNil())
			g.Expect(p.Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring("cannot roll back"))
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnRollbackSpec))
			g.Expect(e.events(g, up.Name)).To(gomega.ContainElement(upgrade.ReasonUntrustedAnnotations))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		untouched(e, e.get(up.Name))
	})

	t.Run("a rollback pod the API server refuses for good ends the upgrade with the error instead of retrying", func(t *testing.T) {
		keys := upgrade.RandomKeyring()
		e := newEnv(t, ideTemplate("v1", "ide:1", corev1.ReadWriteOnce), UpgradeOptions{Timeout: 10 * time.Minute, Keys: keys})
		e.start()
		old := e.spawn("jane", "refused")
		up := e.recreateOntoBroken(old)
		// A spec nogoo9 itself signed that the API server refuses (an invalid container name, as
		// a field that stopped validating would be): the refusal is final.
		e.resignRollbackSpec(keys, up.Name, func(js string) string {
			spec, err := upgrade.EncodeRollbackSpec([]byte(strings.Replace(js, `"name":"ide"`, `"name":"Not_A_DNS_Label"`, 1)))
			e.g.Expect(err).NotTo(gomega.HaveOccurred())
			return spec
		})
		e.failPastDeadline(up.Name, "CrashLoopBackOff", "back-off")
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.pods(g, "refused")[up.Name]
			g.Expect(p).NotTo(gomega.BeNil())
			g.Expect(p.Annotations[workspace.AnnLastUpgradeError]).To(gomega.ContainSubstring("refused rollback pod"))
			g.Expect(p.Annotations).NotTo(gomega.HaveKey(workspace.AnnUpgradeStartedAt))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
		untouched(e, e.get(up.Name))
	})

	t.Run("a Recreate upgrade an older replica started, its rollback spec plain JSON, is still rolled back", func(t *testing.T) {
		keys := upgrade.RandomKeyring()
		e := newEnv(t, ideTemplate("v1", "ide:1", corev1.ReadWriteOnce), UpgradeOptions{Timeout: 10 * time.Minute, Keys: keys})
		e.start()
		old := e.spawn("jane", "older")
		up := e.recreateOntoBroken(old)
		// The record as a replica of an earlier release wrote it (the same keys, as across a
		// rolling update of nogoo9): the spec as plain JSON, signed.
		e.resignRollbackSpec(keys, up.Name, func(js string) string {
			e.g.Expect(js).To(gomega.HavePrefix("{"))
			return js
		})
		e.failPastDeadline(up.Name, "CrashLoopBackOff", "back-off")
		e.g.Eventually(func(g gomega.Gomega) { e.rolledBack(g, "older", up) }).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("a rollback planned from a stale cache after the owner deleted the workspace creates nothing", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		ctx := context.Background()
		keys := upgrade.RandomKeyring()
		// The failed Recreate pod, with a genuine record, being deleted by its owner (a finalizer
		// keeps it visible), while the controller's plan still shows it live.
		failed := e.spawn("jane", "gone")
		spec, err := upgrade.RollbackSpec(failed)
		e.g.Expect(err).NotTo(gomega.HaveOccurred())
		e.patchMeta(failed.Name, nil, map[string]*string{
			workspace.AnnUpgradeFrom: str("ws-prev"), workspace.AnnUpgradeFromUID: str("uid-prev"), workspace.AnnUpgradeFromVersion: str("v0"),
			workspace.AnnUpgradeStrategy: str("Recreate"), workspace.AnnRollbackSpec: &spec,
		})
		live := e.get(failed.Name)
		e.patchMeta(failed.Name, nil, map[string]*string{workspace.AnnUpgradeHMAC: str(keys.Sign(e.ns, live.Name, live.Annotations, spec))})
		stale := e.get(failed.Name)
		fin := `{"metadata":{"finalizers":["test.nogoo9/hold"]}}`
		e.g.Expect(e.c.Patch(ctx, stale.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(fin)))).To(gomega.Succeed())
		t.Cleanup(func() {
			_ = e.c.Patch(ctx, stale.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		e.g.Expect(e.c.Delete(ctx, stale.DeepCopy())).To(gomega.Succeed())

		r := &WorkspaceReconciler{Client: c, Reader: c, APIReader: c, Recorder: record.NewFakeRecorder(10),
			Opts: UpgradeOptions{Keys: keys}}
		r.Opts.defaults()
		r.gate = newGate(0, 0, c, nil)
		a := upgrade.Action{Kind: upgrade.CreateRollbackPod, Pod: stale, Name: workspace.RollbackPodName(stale),
			Annotations: map[string]string{workspace.AnnUpgradeStrategy: string(upgrade.Rollback), workspace.AnnUpgradeFrom: stale.Name,
				workspace.AnnUpgradeFromUID: string(stale.UID), workspace.AnnLastUpgradeError: "Upgrade failed"}}
		e.g.Expect(r.createRollbackPod(ctx, types.NamespacedName{Namespace: e.ns, Name: "gone"}, a, time.Now())).To(gomega.Succeed())
		e.g.Eventually(func(g gomega.Gomega) {
			g.Expect(e.allPods(g)).To(gomega.BeEmpty())
		}).WithTimeout(10 * time.Second).Should(gomega.Succeed())
		var rb corev1.Pod
		err = c.Get(ctx, types.NamespacedName{Namespace: e.ns, Name: a.Name}, &rb)
		e.g.Expect(err).To(gomega.HaveOccurred(), "no rollback pod may exist for a deleted workspace")
	})

	t.Run("maintenance survives a side-by-side upgrade, including one set on the old pod while the upgrade runs", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		old := e.spawn("jane", "mnt")
		e.annotate(old.Name, workspace.AnnMaintenance, str("disk migration"))
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		up := e.upgradedPod("mnt", old.Name)
		e.g.Expect(up.Annotations[workspace.AnnMaintenance]).To(gomega.Equal("disk migration"))
		// The operator changes the reason on the old pod only, mid-upgrade.
		e.annotate(old.Name, workspace.AnnMaintenance, str("disk migration until 14:00 UTC"))
		e.setReady(up.Name)
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "mnt")
			g.Expect(pods).To(gomega.HaveLen(1))
			g.Expect(pods).To(gomega.HaveKey(up.Name))
			g.Expect(pods[up.Name].Annotations[workspace.AnnMaintenance]).To(gomega.Equal("disk migration until 14:00 UTC"))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("maintenance survives a recreate upgrade and its rollback", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", corev1.ReadWriteOnce), UpgradeOptions{Timeout: 10 * time.Minute})
		e.start()
		old := e.spawn("jane", "rwo")
		e.annotate(old.Name, workspace.AnnMaintenance, str("disk migration"))
		up := e.recreateOntoBroken(old)
		e.g.Expect(up.Annotations[workspace.AnnMaintenance]).To(gomega.Equal("disk migration"))
		e.failPastDeadline(up.Name, "CrashLoopBackOff", "back-off")
		e.g.Eventually(func(g gomega.Gomega) {
			pods := e.pods(g, "rwo")
			g.Expect(pods).To(gomega.HaveLen(1))
			for _, p := range pods {
				g.Expect(p.Annotations[workspace.AnnUpgradeStrategy]).To(gomega.Equal(string(upgrade.Rollback)))
				g.Expect(p.Annotations[workspace.AnnMaintenance]).To(gomega.Equal("disk migration"))
			}
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})

	t.Run("an intent written with kubectl gets the upgrade pod name recorded by the controller", func(t *testing.T) {
		e := newEnv(t, ideTemplate("v1", "ide:1", ""), UpgradeOptions{})
		e.start()
		old := e.spawn("jane", "named")
		e.reg.set(ideTemplate("v2", "ide:2", ""))
		e.annotate(old.Name, workspace.AnnUpgradeRequested, str("true"))
		up := e.upgradedPod("named", old.Name)
		e.g.Expect(up.Name).To(gomega.Equal(workspace.NextPodName(old, "v2")))
		e.g.Expect(strings.HasPrefix(up.Name, old.Name)).To(gomega.BeTrue())
		e.g.Eventually(func(g gomega.Gomega) {
			p := e.pods(g, "named")[old.Name]
			g.Expect(p).NotTo(gomega.BeNil())
			g.Expect(p.Annotations[workspace.AnnUpgradePod]).To(gomega.Equal(up.Name))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	})
}
