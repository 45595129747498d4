package spawner

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAClaimTheAPIServerForbidsIsRefusedWithItsReason: a namespace ResourceQuota refuses a
// workspace's claim with 403 "exceeded quota". That is a refusal the person can act on, like the
// same 403 on the pod: the spawn answers Forbidden with the API server's reason (the front end
// answers 403), not an internal failure to retry (500), and leaves nothing behind.
func TestAClaimTheAPIServerForbidsIsRefusedWithItsReason(t *testing.T) {
	ctx, base := fakeSetup(t)
	g := NewWithT(t)
	c := interceptor.NewClient(base, interceptor.Funcs{Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			return apierrors.NewForbidden(corev1.Resource("persistentvolumeclaims"), obj.GetName(),
				errors.New("exceeded quota: storage, requested: requests.storage=1Gi, used: requests.storage=10Gi, limited: requests.storage=10Gi"))
		}
		return cl.Create(ctx, obj, opts...)
	}})
	s := New(c, base, testTemplates(t), Options{Namespace: fakeNS})

	_, err := s.Spawn(ctx, Request{Template: "persistent", ID: "big", Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: "jane"}})
	g.Expect(CodeOf(err)).To(Equal(Forbidden), "%v", err)
	g.Expect(errors.Is(err, ErrForbidden)).To(BeTrue())
	g.Expect(err.Error()).To(And(ContainSubstring("exceeded quota: storage"), ContainSubstring("ask the platform team")))
	g.Expect(mayHaveHappened(err)).To(BeFalse(), "a refusal starts no settling")

	var pods corev1.PodList
	g.Expect(base.List(ctx, &pods)).To(Succeed())
	g.Expect(pods.Items).To(BeEmpty(), "the refused spawn's pod is deleted again")
}
