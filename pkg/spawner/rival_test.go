package spawner

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// secondPod is a second pod with jane's workspace id w that appears while a spawn of it is under
// way, after the spawn's pod was created: the workspace's own replacement (the owner stopped it:
// a stopped copy of the same owner, another name, mounting the same claims), or another owner's
// pod that raced for the id. Only the second is a rival to yield to.
type secondPod struct {
	name       string
	build      func(t *testing.T, pod *corev1.Pod) *corev1.Pod
	wantYields bool
}

// secondPods are the cases of a second pod, for the spawn's check after its create and for
// settling alike.
func secondPods() []secondPod {
	return []secondPod{
		{
			name: "the workspace's own stopped copy, same owner and id, another name, is kept with the claims it mounts",
			build: func(t *testing.T, pod *corev1.Pod) *corev1.Pod {
				stopped := pod.DeepCopy()
				stopped.ResourceVersion, stopped.UID = "", ""
				stopped.Name = workspace.UpgradePodName("jane", "w", "stop@"+string(pod.UID))
				stopped.Annotations[workspace.AnnStopRequested] = "true"
				stopped.Annotations[workspace.AnnStoppedFromUID] = string(pod.UID)
				stopped.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: workspace.GateStopped}}
				return stopped
			},
		},
		{
			name: "another owner's pod with the id wins: the spawn's pod and the claims it created go",
			build: func(t *testing.T, _ *corev1.Pod) *corev1.Pod {
				tmpl, _ := testTemplates(t).Get("plain")
				joes, _, err := BuildPod(tmpl, Identity{Owner: "joe", ID: "w", Namespace: fakeNS}, workspace.PodName("joe", "w"))
				if err != nil {
					t.Fatal(err)
				}
				joes.Namespace = fakeNS
				return joes
			},
			wantYields: true,
		},
	}
}

// TestASpawnYieldsOnlyToAnotherOwnersPod: the check after a spawn's create meets a second pod
// with its id (secondPods), made right after the spawn's pod. Only another owner's pod is a rival:
// the spawn yields, and its pod and the claims it created go. The workspace's own replacement
// mounts those claims (their names derive from owner and id), so the spawn keeps them and
// succeeds. Before, the spawn yielded to any other pod with the id and its undo deleted the claims
// the replacement mounts, as settling once did.
func TestASpawnYieldsOnlyToAnotherOwnersPod(t *testing.T) {
	for _, tc := range secondPods() {
		t.Run(tc.name, func(t *testing.T) {
			ctx, base := fakeSetup(t)
			g := NewWithT(t)
			var second *corev1.Pod
			c := interceptor.NewClient(base, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if err := cl.Create(ctx, obj, opts...); err != nil {
						return err
					}
					if p, ok := obj.(*corev1.Pod); ok && p.Name == workspace.PodName("jane", "w") {
						second = tc.build(t, p)
						return cl.Create(ctx, second)
					}
					return nil
				},
			})
			s := New(c, base, testTemplates(t), Options{Namespace: fakeNS})
			res, err := s.Spawn(ctx, Request{Template: "persistent", ID: "w", Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: "jane"}})
			g.Expect(second).NotTo(BeNil(), "the spawn created its pod")
			g.Expect(base.Get(ctx, client.ObjectKeyFromObject(second), &corev1.Pod{})).To(Succeed(), "the second pod is never the spawn's to delete")

			pod := client.ObjectKey{Namespace: fakeNS, Name: workspace.PodName("jane", "w")}
			var claims corev1.PersistentVolumeClaimList
			g.Expect(base.List(ctx, &claims, client.InNamespace(fakeNS))).To(Succeed())
			if tc.wantYields {
				g.Expect(CodeOf(err)).To(Equal(Conflict), "err = %v", err)
				g.Expect(apierrors.IsNotFound(base.Get(ctx, pod, &corev1.Pod{}))).To(BeTrue(), "the spawn's pod yields")
				g.Expect(claims.Items).To(BeEmpty(), "the claims the spawn created go with its pod")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.PVCs).To(HaveLen(2))
			g.Expect(base.Get(ctx, pod, &corev1.Pod{})).To(Succeed(), "the pod the replacement replaces is the controller's to delete")
			g.Expect(claims.Items).To(HaveLen(2), "the replacement mounts the spawn's claims")
			for _, cl := range claims.Items {
				g.Expect(cl.DeletionTimestamp).To(BeNil(), "claim %s", cl.Name)
			}
		})
	}
}
