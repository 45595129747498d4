package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The install namespace and ServiceAccount of config/default.
const (
	installNS = "nogoo9-system"
	installSA = "nogoo9-manager"
)

// kubectl runs kubectl against the suite's cluster with kubeconfig and returns its combined output.
func kubectl(kubeconfig string, args ...string) (string, error) {
	var out bytes.Buffer
	err := runKubectl(kubeconfig, &out, &out, args...)
	return out.String(), err
}

// kubectlRequestTimeout bounds each of kubectl's requests (--request-timeout), kubectlRunTimeout
// a whole run (an apply -k makes many): a call that hangs fails its spec instead of the suite.
const (
	kubectlRequestTimeout = 30 * time.Second
	kubectlRunTimeout     = 2 * time.Minute
)

// runKubectl runs kubectl with kubeconfig and args, its stdout and stderr written to stdout and
// stderr; the error names the bound when the run took too long.
func runKubectl(kubeconfig string, stdout, stderr io.Writer, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig, "--request-timeout=" + kubectlRequestTimeout.String()}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("kubectl %s: not done within %s: %w", strings.Join(args, " "), kubectlRunTimeout, err)
	}
	return err
}

// canI runs kubectl auth can-i with kubeconfig and args and returns its answer, "yes" or "no"; it
// fails the spec when kubectl gives neither (an error talking to the API server is no "no").
// can-i exits 0 with "yes", 1 with "no" (and, when the authorizer gives one, " - " and a reason).
func canI(kubeconfig string, args ...string) string {
	GinkgoHelper()
	var stdout, stderr bytes.Buffer
	err := runKubectl(kubeconfig, &stdout, &stderr, append([]string{"auth", "can-i"}, args...)...)
	answer, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), "\n")
	answer, _, _ = strings.Cut(answer, " - ")
	exit := 0
	if err != nil {
		var ee *exec.ExitError
		Expect(errors.As(err, &ee)).To(BeTrue(), "kubectl auth can-i %v: %v\nstdout: %s\nstderr: %s", args, err, &stdout, &stderr)
		exit = ee.ExitCode()
	}
	switch {
	case answer == "yes" && exit == 0, answer == "no" && exit == 1:
		return answer
	}
	Fail(fmt.Sprintf("kubectl auth can-i %v: answered %q with exit code %d, want yes (0) or no (1)\nstdout: %s\nstderr: %s", args, answer, exit, &stdout, &stderr))
	return ""
}

// The proof that config/rbac is enough: the install is applied as an operator would apply it, and
// the real nogoo9 binary runs out of cluster with a token of the install's ServiceAccount, so any
// missing rule makes a call fail (and the log says "forbidden"). config/config_test.go checks the
// other direction: nothing beyond what is used is granted.
var _ = Describe("RBAC of config/default", Ordered, func() {
	var saKubeconfig string
	var proc *Nogoo9Process

	BeforeAll(func(ctx SpecContext) {
		root, err := filepath.Abs("../..")
		Expect(err).NotTo(HaveOccurred())
		By("applying config/default with server-side apply")
		out, err := kubectl(Cluster.Kubeconfig, "apply", "--server-side", "--field-manager=nogoo9-e2e", "-k", filepath.Join(root, "config/default"))
		Expect(err).NotTo(HaveOccurred(), "kubectl apply -k config/default:\n%s", out)
		DeferCleanup(func() {
			out, err := kubectl(Cluster.Kubeconfig, "delete", "--ignore-not-found", "--wait=false", "-k", filepath.Join(root, "config/default"))
			Expect(err).NotTo(HaveOccurred(), "kubectl delete -k config/default:\n%s", out)
		})

		By("minting a token for the ServiceAccount and writing a kubeconfig with it")
		token, err := Cluster.ServiceAccountToken(ctx, installNS, installSA, Cluster.IssuerURL, 0)
		Expect(err).NotTo(HaveOccurred())
		saKubeconfig = filepath.Join(GinkgoT().TempDir(), "nogoo9-sa.kubeconfig")
		Expect(Cluster.WriteKubeconfig(saKubeconfig, token)).To(Succeed())

		By("installing the sample template the workspaces are spawned from")
		out, err = kubectl(Cluster.Kubeconfig, "apply", "--server-side", "-n", installNS, "-f", filepath.Join(root, "config/samples/template-node.yaml"))
		Expect(err).NotTo(HaveOccurred(), "apply sample template:\n%s", out)

		// The install's own flags for auth; leader election on (Leases); a quota, so that the
		// spawner's ledger ConfigMaps are written too.
		// The binary's default template policy, as installed: the sample template must pass it,
		// and the pods it renders must pass the namespace's Pod Security admission and the
		// bookkeeping ValidatingAdmissionPolicy (any refusal would put "forbidden" in the log).
		proc = StartNogoo9("--kubeconfig="+saKubeconfig, "--namespace="+installNS, "--leader-elect=true",
			"--auth=kubernetes", "--token-audiences=nogoo9", "--max-workspaces-per-user=3",
			"--template-policy=restricted", "--template-allow-automount-token=false")
	})

	AfterAll(func() {
		if proc == nil {
			return
		}
		proc.Stop()
		log, err := os.ReadFile(proc.LogPath)
		Expect(err).NotTo(HaveOccurred())
		for _, line := range strings.Split(string(log), "\n") {
			Expect(strings.ToLower(line)).NotTo(ContainSubstring("forbidden"),
				"nogoo9, running as %s/%s, was refused something: a rule is missing in config/rbac (log %s)", installNS, installSA, proc.LogPath)
		}
	})

	It("gives the ServiceAccount what the Role lists and no secrets", func() {
		for _, tc := range []struct {
			verb, resource string
			allowed        bool
		}{
			{"create", "pods", true}, {"patch", "pods", true}, {"delete", "pods", true},
			{"update", "configmaps", true}, {"create", "persistentvolumeclaims", true},
			{"create", "events", true}, {"update", "leases.coordination.k8s.io", true},
			{"get", "secrets", false}, {"list", "secrets", false}, {"update", "pods", false},
			// delete configmaps: the template history keeps a bounded number of versions and
			// prunes the oldest (docs/templates.md#history); the Role had update already.
			{"create", "deployments.apps", false}, {"delete", "configmaps", true},
		} {
			want := "no"
			if tc.allowed {
				want = "yes"
			}
			Expect(canI(saKubeconfig, tc.verb, tc.resource, "-n", installNS)).To(Equal(want), "may the ServiceAccount %s %s", tc.verb, tc.resource)
		}
		Expect(canI(saKubeconfig, "create", "pods", "-n", "default")).To(Equal("no"), "the Role must not reach other namespaces")
	})

	It("runs the controller with leader election and records phase Events as the ServiceAccount", func(ctx SpecContext) {
		By("holding the leader-election Lease")
		Eventually(func(g Gomega) {
			var lease coordinationv1.Lease
			g.Expect(K8s.Get(ctx, client.ObjectKey{Namespace: installNS, Name: "nogoo9-controller"}, &lease)).To(Succeed())
			g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		}).Should(Succeed())

		By("recording an Event when a workspace pod becomes Ready")
		// Created as nogoo9's ServiceAccount: in the installed namespace only nogoo9 may write its
		// labels (config/admission), and every pod must fit Pod Security "restricted".
		pod, _ := renderSample("template-node.yaml", installNS, "rbac-phase")
		Expect(impersonating("system:serviceaccount:"+installNS+":"+installSA).Create(ctx, pod)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(K8s.Delete(ctx, pod))).To(Succeed()) })
		Eventually(func(g Gomega) {
			var list corev1.EventList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingFields{"involvedObject.name": pod.Name})).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				reasons = append(reasons, e.Reason)
			}
			g.Expect(reasons).To(ContainElement("PhaseReady"))
		}).Should(Succeed())
	})

	It("spawns, upgrades and deletes a workspace through the API as the ServiceAccount", func(ctx SpecContext) {
		userToken, err := Cluster.ServiceAccountToken(ctx, installNS, "e2e-jane", "nogoo9", 0)
		Expect(err).NotTo(HaveOccurred())
		call := func(method, path string, body any) (int, []byte) {
			GinkgoHelper()
			return pxAPI(proc, userToken, method, path, body)
		}

		By("spawning (pods and quota ledger ConfigMaps)")
		code, body := call("POST", "/api/v1/workspaces", map[string]any{"template": "node", "id": "rbac"})
		Expect(code).To(Equal(http.StatusCreated), "spawn: %s", body)
		var podName string
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingLabels{workspace.LabelWorkspaceID: "rbac"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			podName = list.Items[0].Name
		}).Should(Succeed())
		WaitPodReady(installNS, podName)

		By("refusing even the cluster admin a forged owner: config/default binds the admission policy to the install namespace")
		forge := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"mallory"}}}`, workspace.AnnOwner))
		Eventually(func() error {
			return K8s.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: installNS, Name: podName}},
				client.RawPatch(types.MergePatchType, forge), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("only nogoo9")))

		By("reading its Events through the API (events list)")
		code, body = call("GET", "/api/v1/workspaces/rbac/events", nil)
		Expect(code).To(Equal(http.StatusOK), "events: %s", body)

		By("bumping the template and upgrading (create, patch, delete of pods)")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1.0.1"}}}`, workspace.AnnTemplateVersion)
		Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: installNS, Name: "node"}},
			client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
		Eventually(func() int {
			code, _ := call("POST", "/api/v1/workspaces/rbac/upgrade", nil)
			return code
		}).Should(Equal(http.StatusAccepted))
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingLabels{workspace.LabelWorkspaceID: "rbac"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].Annotations).To(HaveKeyWithValue(workspace.AnnTemplateVersion, "1.0.1"))
			g.Expect(workspace.IsReady(&list.Items[0])).To(BeTrue())
		}).Should(Succeed())

		By("deleting it")
		code, body = call("DELETE", "/api/v1/workspaces/rbac", nil)
		Expect(code).To(Equal(http.StatusAccepted), "delete: %s", body)
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(K8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingLabels{workspace.LabelWorkspaceID: "rbac"})).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).Should(Succeed())
	})
})
