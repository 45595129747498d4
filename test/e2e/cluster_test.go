package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
)

func simplePod(ns, name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
	}
}

var _ = Describe("The local cluster", func() {
	var ns string
	BeforeEach(func() { ns = NewNamespace() })

	It("runs a pod to Running and Ready on a kwok node with a loopback pod IP", func(ctx SpecContext) {
		Expect(K8s.Create(ctx, simplePod(ns, "hello", "busybox:1.36"))).To(Succeed())
		pod := WaitPodReady(ns, "hello")
		Expect(pod.Spec.NodeName).To(BeElementOf(Cluster.NodeNames))
		Expect(pod.Status.PodIP).To(HavePrefix("127.1."))
		Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
		Expect(pod.Status.ContainerStatuses[0].State.Running).NotTo(BeNil())

		By("deleting it: kwok finishes the deletion like a kubelet")
		Expect(K8s.Delete(ctx, pod)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(K8s.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
		}).Should(BeTrue())
	})

	It("keeps a pod whose image cannot be pulled un-ready in ErrImagePull", func(ctx SpecContext) {
		Expect(K8s.Create(ctx, simplePod(ns, "broken", FailingImage("nope")))).To(Succeed())
		pod := &corev1.Pod{}
		Eventually(func(g Gomega) {
			g.Expect(K8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, pod)).To(Succeed())
			g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
			g.Expect(pod.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil())
		}).Should(Succeed())
		waiting := pod.Status.ContainerStatuses[0].State.Waiting
		Expect(waiting.Reason).To(Equal("ErrImagePull"))
		Expect(waiting.Message).To(ContainSubstring("failed to pull image"))
		Expect(pod.Status.Phase).To(Equal(corev1.PodPending))
		Consistently(func() corev1.ConditionStatus {
			p := &corev1.Pod{}
			_ = K8s.Get(ctx, client.ObjectKeyFromObject(pod), p)
			return podCondition(p, corev1.PodReady)
		}).Should(Equal(corev1.ConditionFalse))
	})

	It("makes the API server an OIDC issuer whose discovery is public", func(ctx SpecContext) {
		ca, err := os.ReadFile(Cluster.CAFile)
		Expect(err).NotTo(HaveOccurred())
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
		anon := &http.Client{Timeout: pxAPIClient.Timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := anon.Get(Cluster.IssuerURL + "/.well-known/openid-configuration")
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		var doc struct {
			Issuer string `json:"issuer"`
		}
		Expect(json.NewDecoder(resp.Body).Decode(&doc)).To(Succeed())
		Expect(doc.Issuer).To(Equal(Cluster.IssuerURL))

		token, err := Cluster.ServiceAccountToken(ctx, ns, "alice", "nogoo9", 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Split(token, ".")).To(HaveLen(3), "a JWT")
	})

	It("enforces ReadWriteOncePod: a second pod waits until the first is gone", func(ctx SpecContext) {
		class := ns + "-rwop"
		_, err := Cluster.CreateVolumes(ctx, localcluster.VolumeOptions{
			StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			_ = K8s.DeleteAllOf(ctx, &corev1.PersistentVolume{}, client.MatchingLabels{"nogoo9-local/storage-class": class})
		})
		claim := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "home"},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		Expect(K8s.Create(ctx, claim)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(K8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			g.Expect(claim.Status.Phase).To(Equal(corev1.ClaimBound))
		}).Should(Succeed(), "the claim binds to the pre-created volume")

		withClaim := func(name string) *corev1.Pod {
			p := simplePod(ns, name, "busybox:1.36")
			p.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home"},
			}}}
			return p
		}
		first := withClaim("first")
		Expect(K8s.Create(ctx, first)).To(Succeed())
		WaitPodReady(ns, "first")

		second := withClaim("second")
		Expect(K8s.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(K8s.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
			g.Expect(second.Spec.NodeName).To(BeEmpty())
			var sched *corev1.PodCondition
			for i := range second.Status.Conditions {
				if second.Status.Conditions[i].Type == corev1.PodScheduled {
					sched = &second.Status.Conditions[i]
				}
			}
			g.Expect(sched).NotTo(BeNil())
			g.Expect(sched.Status).To(Equal(corev1.ConditionFalse))
			g.Expect(sched.Reason).To(Equal(corev1.PodReasonUnschedulable))
		}).Should(Succeed(), "the second pod is Pending/Unschedulable while the first holds the claim")

		Expect(K8s.Delete(ctx, first)).To(Succeed())
		WaitPodReady(ns, "second")
	})
})

var _ = Describe("The nogoo9 binary", func() {
	It("starts against the local cluster and answers /readyz, also after a crash and a restart", func(ctx SpecContext) {
		ns := NewNamespace()
		p := StartNogoo9("--namespace=" + ns)
		Expect(p.Namespace).To(Equal(ns))
		get := func(url string) int {
			resp, err := pxAPIClient.Get(url)
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		Expect(get("http://" + p.ProbeAddr + "/readyz")).To(Equal(http.StatusOK))
		Expect(get("http://" + p.ProbeAddr + "/healthz")).To(Equal(http.StatusOK))

		By("killing it: the probe stops answering")
		p.Kill()
		Expect(p.Exited()).To(BeTrue())
		Expect(get("http://" + p.ProbeAddr + "/readyz")).To(Equal(0))

		By("starting it again on the same ports")
		p.Restart()
		Expect(get("http://" + p.ProbeAddr + "/readyz")).To(Equal(http.StatusOK))
	})
})

var _ = Describe("e2e helpers", func() {
	DescribeTable("lastFlag finds the effective value of a flag",
		func(args []string, want string) { Expect(lastFlag(args, "namespace")).To(Equal(want)) },
		Entry("absent", []string{"--leader-elect=false"}, ""),
		Entry("with =", []string{"--namespace=a"}, "a"),
		Entry("as two arguments", []string{"--namespace", "b"}, "b"),
		Entry("single dash", []string{"-namespace=c"}, "c"),
		Entry("the last one wins", []string{"--namespace=default", "--namespace", "d"}, "d"),
		Entry("a longer flag with the same prefix is not it", []string{"--namespace=a", "--namespaces=z"}, "a"),
	)
})
