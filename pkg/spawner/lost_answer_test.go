package spawner

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// lostAnswers returns a client whose creates of the given kind take effect (when apply) but
// answer context.DeadlineExceeded, as when the caller's deadline passes while the API server
// holds a write for a slow etcd.
func lostAnswers(t *testing.T, kind string, apply bool) client.Client {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(wc, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			_, isPod := obj.(*corev1.Pod)
			_, isPVC := obj.(*corev1.PersistentVolumeClaim)
			if (kind == "pod" && isPod) || (kind == "pvc" && isPVC) {
				if apply {
					if err := c.Create(ctx, obj, opts...); err != nil {
						return err
					}
				}
				return context.DeadlineExceeded
			}
			return c.Create(ctx, obj, opts...)
		},
	})
}

// reservations reads owner's quota ledger.
func reservations(ctx context.Context, g Gomega, c client.Client, ns, owner string) map[string]time.Time {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: LedgerName(owner)}, &cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	g.Expect(err).NotTo(HaveOccurred())
	return readReservations(&cm)
}

// TestASpawnWhoseAnswerWasLostIsFinished: the pod's create took effect but its answer was lost
// (the caller's deadline). The caller gets an error that is no refusal (the front end answers 503),
// and in the background the workspace is made whole: its claims exist, one pod, and the quota
// reservation is released. Before settling existed, the pod stayed without its claims.
func TestASpawnWhoseAnswerWasLostIsFinished(t *testing.T) {
	for _, kind := range []string{"pod", "pvc"} {
		t.Run(kind, func(t *testing.T) {
			ctx, c, ns := setup(t)
			g := NewWithT(t)
			s := New(lostAnswers(t, kind, true), c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 3, LostWriteWindow: time.Second})
			_, err := s.Spawn(ctx, Request{Template: "persistent", ID: "lost", Context: map[string]string{"repo": "r.git"}, Caller: Caller{Subject: "jane"}})
			g.Expect(err).To(HaveOccurred())
			g.Expect(CodeOf(err)).To(BeEmpty(), "a lost answer is no refusal: %v", err)
			g.Expect(mayHaveHappened(err)).To(BeTrue())

			g.Eventually(func(g Gomega) {
				pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "lost"})
				g.Expect(pods).To(HaveLen(1))
				g.Expect(pods[0].DeletionTimestamp).To(BeNil())
				for _, v := range pods[0].Spec.Volumes {
					if v.PersistentVolumeClaim == nil {
						continue
					}
					var pvc corev1.PersistentVolumeClaim
					g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: v.PersistentVolumeClaim.ClaimName}, &pvc)).To(Succeed())
				}
				g.Expect(reservations(ctx, g, c, ns, "jane")).NotTo(HaveKey("lost"))
			}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

			// A retry says the workspace exists.
			_, err = New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 3}).Spawn(ctx, Request{Template: "persistent", ID: "lost",
				Context: map[string]string{"repo": "r.git"}, Caller: Caller{Subject: "jane"}})
			g.Expect(CodeOf(err)).To(Equal(Conflict))
		})
	}
}

// TestASpawnWhoseCreateNeverHappenedLeavesNothing: the create did not take effect and its answer
// was lost: after the lost-write window nothing exists and the reservation is released, so the
// owner's quota is whole again.
func TestASpawnWhoseCreateNeverHappenedLeavesNothing(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(lostAnswers(t, "pod", false), c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1, LostWriteWindow: time.Second})
	_, err := s.Spawn(ctx, Request{Template: "persistent", ID: "never", Context: map[string]string{"repo": "r.git"}, Caller: Caller{Subject: "jane"}})
	g.Expect(err).To(HaveOccurred())
	g.Expect(CodeOf(err)).To(BeEmpty())
	g.Eventually(func(g Gomega) {
		g.Expect(reservations(ctx, g, c, ns, "jane")).NotTo(HaveKey("never"))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: "never"})).To(BeEmpty())
	var pvcs corev1.PersistentVolumeClaimList
	g.Expect(c.List(ctx, &pvcs, client.InNamespace(ns))).To(Succeed())
	g.Expect(pvcs.Items).To(BeEmpty())
	// The quota of 1 is free again.
	_, err = New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 1}).Spawn(ctx, Request{Template: "persistent", ID: "next",
		Context: map[string]string{"repo": "r.git"}, Caller: Caller{Subject: "jane"}})
	g.Expect(err).NotTo(HaveOccurred())
}

// TestMayHaveHappened: only an answer that may hide a write counts; a refused connection never
// reached the API server (a spawn during an API-server outage starts no background settling).
func TestMayHaveHappened(t *testing.T) {
	g := NewWithT(t)
	refused := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	reset := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}
	g.Expect(mayHaveHappened(refused)).To(BeFalse())
	g.Expect(mayHaveHappened(fmt.Errorf("create pod x: %w", refused))).To(BeFalse())
	g.Expect(mayHaveHappened(reset)).To(BeTrue())
	g.Expect(mayHaveHappened(context.DeadlineExceeded)).To(BeTrue())
	g.Expect(mayHaveHappened(apierrors.NewTimeoutError("etcd", 1))).To(BeTrue())
	g.Expect(mayHaveHappened(apierrors.NewAlreadyExists(corev1.Resource("pods"), "x"))).To(BeFalse())
	g.Expect(mayHaveHappened(errorf(Conflict, nil, "taken"))).To(BeFalse())
}
