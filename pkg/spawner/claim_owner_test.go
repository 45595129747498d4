package spawner

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestClaimOf(t *testing.T) {
	claim := func(id, owner string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		if id != "" {
			c.Labels[workspace.LabelWorkspaceID] = id
		}
		if owner != "" {
			c.Annotations[workspace.AnnOwner] = owner
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		want  bool
	}{
		{"the claim of the same owner and id is the workspace's", claim("demo", "bob"), true},
		{"another owner's claim under the name is not", claim("demo", "alice"), false},
		{"the same owner's claim of another workspace is not", claim("other", "bob"), false},
		{"a claim without nogoo9's labels is nobody's workspace's", claim("", ""), false},
		{"a claim with the id but no owner is not", claim("demo", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClaimOf(tc.claim, "bob", "demo"); got != tc.want {
				t.Errorf("ClaimOf = %v, want %v", got, tc.want)
			}
		})
	}
}

// A spawn whose claim name is another owner's claim (names are cut and hashed, so an id can be
// found that collides) is refused with Conflict, leaves no pod and does not touch the claim.
func TestSpawnRefusesAnotherOwnersClaimUnderItsClaimName(t *testing.T) {
	ctx, c := fakeSetup(t)
	g := NewWithT(t)
	alices := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: workspace.ClaimName("bob", "keep", "home"), Namespace: fakeNS,
		Labels:      map[string]string{workspace.LabelWorkspaceID: "alices"},
		Annotations: map[string]string{workspace.AnnOwner: "alice"}}}
	g.Expect(c.Create(ctx, alices)).To(Succeed())
	s := New(c, c, testTemplates(t), Options{Namespace: fakeNS})

	_, err := s.Spawn(ctx, Request{Template: "persistent", ID: "keep", Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: "bob"}})
	g.Expect(CodeOf(err)).To(Equal(Conflict), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring(alices.Name))

	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods)).To(Succeed())
	g.Expect(pods.Items).To(BeEmpty(), "the refused spawn's pod is deleted again")
	var still corev1.PersistentVolumeClaim
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(alices), &still)).To(Succeed())
	g.Expect(still.UID).To(Equal(alices.UID), "alice's claim stays")
}
