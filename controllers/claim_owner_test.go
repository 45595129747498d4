package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A claim's name is "<PodName(owner, id)>-<claim>", and PodName cuts the owner and id and keeps
// 30 bits of hash: a tenant can find an id whose claim names are another owner's. A workspace
// spawned claimless under such an id meets the other owner's claim only when its template gains
// the claim, at an upgrade or a start on the latest version. These tests put alice's claim under
// the name bob's workspace "demo" would give its home claim (finding a real collision takes a
// billion hashes), and check that no pod of bob's mounts it, while bob's own claim, left by an
// earlier version, is still mounted.

// bobsHome is the name bob's workspace demo gives its template claim "home".
var bobsHome = workspace.ClaimName("bob", "demo", "home")

// claimUnderBobsName is a PVC named bobsHome that belongs to owner's workspace id.
func claimUnderBobsName(owner, id string) *corev1.PersistentVolumeClaim {
	tmpl := ideTemplate("v1", "ide:1", corev1.ReadWriteOnce)
	_, claims, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: owner, ID: id, Namespace: "ns"}, workspace.PodName(owner, id))
	if err != nil {
		panic(err)
	}
	c := claims[0]
	c.Name, c.Namespace, c.UID = bobsHome, "ns", types.UID("uid-claim-"+owner)
	return c
}

// bobsPod is bob's running pod of workspace demo on tmpl, with ann added.
func bobsPod(t *testing.T, tmpl *templates.Template, ann map[string]string) *corev1.Pod {
	t.Helper()
	p, _, err := spawner.BuildPod(tmpl, spawner.Identity{Owner: "bob", ID: "demo", Namespace: "ns"}, workspace.PodName("bob", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	p.Namespace, p.UID = "ns", types.UID("uid-"+p.Name)
	for k, v := range ann {
		p.Annotations[k] = v
	}
	return p
}

// mounting names the pods of c that mount the claim named claim.
func mounting(t *testing.T, c client.Reader, claim string) []string {
	t.Helper()
	var out []string
	for _, p := range racePods(t, c) {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

func TestStartOnLatestMountsOnlyTheWorkspacesOwnClaim(t *testing.T) {
	for _, tc := range []struct {
		name      string
		claim     *corev1.PersistentVolumeClaim
		wantMount bool
		// stoppedMounts: the stopped pod mounts the claim already (its version has it).
		stoppedMounts bool
	}{
		{name: "another owner's claim under the colliding name is not mounted; the workspace starts on its own version with a Warning",
			claim: claimUnderBobsName("alice", "alices-id-that-hashes-like-bobs")},
		{name: "another workspace of the same owner under the name is not mounted either",
			claim: claimUnderBobsName("bob", "other")},
		{name: "the workspace's own claim, left by an earlier version, is mounted",
			claim: claimUnderBobsName("bob", "demo"), wantMount: true},
		{name: "a claim the stopped pod mounts is the workspace's, even one made before nogoo9 labelled claims",
			claim: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: bobsHome, Namespace: "ns"}}, wantMount: true, stoppedMounts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v1 := ideTemplate("v1", "ide:1", "")
			if tc.stoppedMounts {
				v1 = ideTemplate("v1", "ide:1", corev1.ReadWriteOnce)
			}
			stopped := raceStopped(t, bobsPod(t, v1, nil), nil)
			api := raceAPI([]client.Object{stopped, tc.claim}, nil)
			rec := record.NewFakeRecorder(100)
			r := snapshotReconciler("claim-owner-test", api, snapshotCache{}, api, &fakeTemplates{}, rec, nil)
			v2 := ideTemplate("v2", "ide:2", corev1.ReadWriteOnce)
			v2.Annotations = map[string]string{workspace.AnnUpdatePolicy: "on-start"}

			racePass(t, r, []*corev1.Pod{stopped}, v2)

			got := mounting(t, api, bobsHome)
			if !tc.wantMount {
				if len(got) != 0 {
					t.Fatalf("pods %v of bob mount claim %s of %s's workspace %s", got, bobsHome, tc.claim.Annotations[workspace.AnnOwner], workspace.IDOf(tc.claim))
				}
				var running []string
				for _, p := range raceLive(racePods(t, api)) {
					if !workspace.IsStoppedPod(p) {
						running = append(running, p.Name+"@"+workspace.TemplateVersion(p))
					}
				}
				if len(running) != 1 || running[0] != stopped.Name+"@v1" {
					t.Errorf("running pods = %v, want %s@v1 (started on its own version)", running, stopped.Name)
				}
				events := strings.Join(drain(rec), "\n")
				if !strings.Contains(events, "Warning") || !strings.Contains(events, bobsHome) ||
					!strings.Contains(events, "spawn this workspace under another id") || strings.Contains(events, "fix the template") {
					t.Errorf("events = %q, want a Warning naming claim %s and what to do about a claim of another workspace", events, bobsHome)
				}
				return
			}
			if want := lifecycle.StartedPodName(stopped); !slices.Contains(got, want) {
				t.Errorf("pods mounting bob's own claim = %v, want the started pod %s among them", got, want)
			}
		})
	}
}

func TestUpgradeMountsOnlyTheWorkspacesOwnClaim(t *testing.T) {
	for _, tc := range []struct {
		name      string
		claim     *corev1.PersistentVolumeClaim
		wantMount bool
	}{
		{name: "another owner's claim under the colliding name is not mounted; the upgrade fails naming it",
			claim: claimUnderBobsName("alice", "alices-id-that-hashes-like-bobs")},
		{name: "the workspace's own claim, left by an earlier version, is mounted",
			claim: claimUnderBobsName("bob", "demo"), wantMount: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := bobsPod(t, ideTemplate("v1", "ide:1", ""), map[string]string{workspace.AnnUpgradeRequested: "true"})
			api := raceAPI([]client.Object{old, tc.claim}, nil)
			reg := &fakeTemplates{}
			reg.set(ideTemplate("v2", "ide:2", corev1.ReadWriteOnce))
			r := snapshotReconciler("claim-owner-test", api, snapshotCache{pods: []*corev1.Pod{old}}, api, reg, record.NewFakeRecorder(100), nil)

			// Three passes, each from a cache that shows the API server's pods (the first records
			// the upgrade's pod name on the old pod, which the failure's patch must have seen).
			for range 3 {
				if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: raceKey}); err != nil {
					t.Fatalf("upgrade pass: %v", err)
				}
				r.Reader = snapshotCache{pods: racePods(t, api), claims: []*corev1.PersistentVolumeClaim{tc.claim}}
			}

			got := mounting(t, api, bobsHome)
			if tc.wantMount {
				if want := workspace.NextPodName(old, "v2"); len(got) != 1 || got[0] != want {
					t.Errorf("pods mounting bob's own claim = %v, want the upgraded pod %s", got, want)
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("pods %v of bob mount claim %s of alice's workspace", got, bobsHome)
			}
			var now corev1.Pod
			if err := api.Get(context.Background(), client.ObjectKeyFromObject(old), &now); err != nil {
				t.Fatal(err)
			}
			if msg := now.Annotations[workspace.AnnLastUpgradeError]; !strings.Contains(msg, bobsHome) {
				t.Errorf("last upgrade error = %q, want it to name claim %s", msg, bobsHome)
			}
			if _, ok := now.Annotations[workspace.AnnUpgradeRequested]; ok {
				t.Errorf("the upgrade request stays after the failure: %v", now.Annotations)
			}
		})
	}
}
