package spawner

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// With --namespaces, an owner's workspaces in every watched namespace count toward the quota; a
// workspace of the same id in two namespaces counts twice. Without it (Namespaces empty) only the
// spawner's namespace counts, as before.
func TestQuotaCountsAcrossWatchedNamespaces(t *testing.T) {
	ctx, c, home := setup(t)
	_, _, team := setup(t)
	g := NewWithT(t)
	owner := fmt.Sprintf("jane-%s", home)
	// A live workspace of the owner in the team namespace, id "a" like the one spawned below.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: workspace.PodName(owner, "a"),
			Labels:      map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "a", workspace.LabelUserSub: workspace.UserLabel(owner)},
			Annotations: map[string]string{workspace.AnnOwner: owner}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "node:22"}}},
	}
	g.Expect(c.Create(ctx, pod)).To(Succeed())
	caller := Caller{Subject: owner}

	single := New(c, c, testTemplates(t), Options{Namespace: home, MaxPerUser: 1})
	_, err := single.Spawn(ctx, Request{Template: "plain", ID: "a", Caller: caller})
	g.Expect(err).NotTo(HaveOccurred(), "without --namespaces the team namespace does not count")

	multi := New(c, c, testTemplates(t), Options{Namespace: home, Namespaces: []string{home, team}, MaxPerUser: 2})
	_, err = multi.Spawn(ctx, Request{Template: "plain", ID: "b", Caller: caller})
	g.Expect(errors.Is(err, ErrQuotaExceeded)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(And(ContainSubstring("limit is 2"), ContainSubstring("a, "+team+"/a")))
}

// A spawn names its namespace: the pod (and its URL) are there, ids are unique per namespace (the
// same id spawns in two namespaces), the quota counts the owner's workspaces in every watched
// namespace whichever one a spawn targets, and a namespace nogoo9 does not watch is refused with
// its name and nothing is created.
func TestSpawnInAnotherWatchedNamespace(t *testing.T) {
	ctx, c, home := setup(t)
	_, _, team := setup(t)
	_, _, other := setup(t)
	g := NewWithT(t)
	owner := fmt.Sprintf("ann-%s", home)
	caller := Caller{Subject: owner}
	s := New(c, c, testTemplates(t), Options{Namespace: home, Namespaces: []string{home, team}, MaxPerUser: 2})

	res, err := s.Spawn(ctx, Request{Template: "plain", ID: "a", Namespace: team, Caller: caller})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Pod.Namespace).To(Equal(team))
	var got corev1.Pod
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: team, Name: res.Pod.Name}, &got)).To(Succeed())
	g.Expect(got.Annotations[workspace.AnnWorkspacePath]).To(Equal("/ws/" + team + "/a/"))

	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "a", Caller: caller})
	g.Expect(err).NotTo(HaveOccurred(), "the same id in nogoo9's namespace is another workspace")

	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "b", Namespace: team, Caller: caller})
	g.Expect(errors.Is(err, ErrQuotaExceeded)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("a, " + team + "/a"))

	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "c", Namespace: other, Caller: caller})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(ContainSubstring(`namespace "`+other+`" is not watched`), ContainSubstring("--namespaces")))
	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace(other))).To(Succeed())
	g.Expect(pods.Items).To(BeEmpty(), "nothing is created in an unwatched namespace")
}
