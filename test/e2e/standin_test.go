package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/hack/standin"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The demo stand-in (hack/standin) end to end: `make demo` runs it so that a workspace on kwok can
// be opened, and specs that need live workspace backends use it too (StartStandin), so the demo's
// helper is exercised by every e2e run and cannot rot.
var _ = Describe("Demo stand-in: a workspace you can open on kwok", Label("standin"), func() {
	It("serves a spawned workspace's page and terminal through the proxy, and follows it through an upgrade to the new pod", func(ctx SpecContext) {
		ns := NewNamespace()
		ports, err := localcluster.FreePorts(2)
		Expect(err).NotTo(HaveOccurred())
		wsPort, previewPort := ports[0], ports[1]
		tmpl := pxTemplate(ns, "demo", "1.0", "example.com/ide:1.0", wsPort)
		tmpl.Annotations[workspace.AnnPreviewPort] = strconv.Itoa(previewPort)
		Expect(K8s.Create(ctx, tmpl)).To(Succeed())
		s := StartStandin(ns)
		p := StartNogoo9("--namespace=" + ns)
		alice := pxUserToken(ctx, ns, "alice")
		owner := "system:serviceaccount:" + ns + ":alice"

		By("spawning a workspace through the REST API")
		var w workspace.Info
		Eventually(func(g Gomega) {
			code, body := pxAPI(p, alice, http.MethodPost, "/api/v1/workspaces", map[string]any{"template": "demo", "id": "box", "name": "Alice demo"})
			g.Expect(code).To(Equal(http.StatusCreated), "spawn: %s", body)
			g.Expect(json.Unmarshal(body, &w)).To(Succeed())
		}).Should(Succeed(), "nogoo9 has the template in its cache and spawns")
		oldPod := WaitPodReady(ns, w.ActivePod)
		Expect(oldPod.Status.PodIP).To(HavePrefix("127.1."))

		By("the stand-in serves the pod's IP on its workspace and preview ports")
		Eventually(s.Serving).Should(ConsistOf(
			standinServing(oldPod, wsPort, standin.RoleWorkspace),
			standinServing(oldPod, previewPort, standin.RolePreview),
		))

		By("the page through the proxy names the workspace, its owner, its pod and its template version")
		// The pod is Ready in the API server; the proxy's cache sees it a moment later (503
		// "starting" until then).
		var page stResponse
		Eventually(func(g Gomega) {
			var err error
			page, err = stDo(p.ProxyURL+w.WorkspacePath, alice, "text/html")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(page.code).To(Equal(http.StatusOK), "%s", page.body)
		}).Should(Succeed())
		Expect(page.contentType).To(HavePrefix("text/html"))
		for _, want := range []string{"Alice demo", ">box<", owner, oldPod.Name, ">1.0<"} {
			Expect(page.body).To(ContainSubstring(want))
		}
		info := stInfo(p.ProxyURL+w.WorkspacePath+"src/app.js", alice)
		Expect(info.Workload).To(Equal(standin.Workload{
			Namespace: ns, Pod: oldPod.Name, UID: oldPod.UID, Workspace: "box", Name: "Alice demo",
			Owner: owner, Template: "demo", TemplateVersion: "1.0",
		}))
		Expect(info.Role).To(Equal(standin.RoleWorkspace))
		Expect(info.Path).To(Equal("/src/app.js"), "the proxy strips the workspace prefix")
		Expect(info.Authorization).To(BeFalse(), "the proxy never forwards the caller's Authorization header")
		Expect(w.PreviewPath).NotTo(BeEmpty())
		preview := stInfo(p.ProxyURL+w.PreviewPath, alice)
		Expect(preview.Role).To(Equal(standin.RolePreview))
		Expect(preview.Pod).To(Equal(oldPod.Name))

		By("the terminal through the proxy: a banner naming the pod and version, then an echo")
		termURL := p.ProxyURL + w.WorkspacePath + "term"
		term := stDial(ctx, termURL, alice)
		Expect(term.Banner).To(ContainSubstring(oldPod.Name))
		Expect(term.Banner).To(ContainSubstring("template version 1.0"))
		Expect(term.Send("hello")).To(Equal("[" + oldPod.Name + ", version 1.0] hello"))
		_, err = standin.DialTerminal(ctx, termURL, "")
		Expect(err).To(HaveOccurred(), "the terminal needs a token, as the rest of the workspace")

		By("bumping the template to 2.0 and upgrading through the REST API")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"2.0"}}}`, workspace.AnnTemplateVersion)
		Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}},
			client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
		var up struct {
			PodName string `json:"podName"`
		}
		Eventually(func(g Gomega) {
			code, body := pxAPI(p, alice, http.MethodPost, "/api/v1/workspaces/box/upgrade", nil)
			g.Expect(code).To(Equal(http.StatusAccepted), "upgrade: %s", body)
			g.Expect(json.Unmarshal(body, &up)).To(Succeed())
		}).Should(Succeed(), "the API sees template 2.0 and accepts the upgrade")
		Expect(up.PodName).NotTo(BeEmpty())

		By("the old pod goes: the proxy closes its terminal and the stand-in stops serving it")
		Eventually(term.Closed()).Should(BeClosed(), "the proxy closes the WebSocket of the replaced pod")
		newPod := WaitPodReady(ns, up.PodName)
		Eventually(s.Serving).Should(ConsistOf(
			standinServing(newPod, wsPort, standin.RoleWorkspace),
			standinServing(newPod, previewPort, standin.RolePreview),
		), "the stand-in follows the pods: only the new one is served")
		oldAddr := net.JoinHostPort(oldPod.Status.PodIP, strconv.Itoa(wsPort))
		Eventually(func() error {
			c, err := net.DialTimeout("tcp", oldAddr, 2*time.Second)
			if err != nil {
				return nil
			}
			_ = c.Close()
			return errors.New("something still listens on the old pod's address " + oldAddr)
		}).Should(Succeed(), "the old pod's listener is closed")

		By("the page names the new version and pod")
		Eventually(func(g Gomega) {
			i := stInfoG(g, p.ProxyURL+w.WorkspacePath, alice)
			g.Expect(i.Pod).To(Equal(newPod.Name))
			g.Expect(i.TemplateVersion).To(Equal("2.0"))
		}).Should(Succeed())
		page = stGet(p.ProxyURL+w.WorkspacePath, alice, "text/html")
		Expect(page.body).To(ContainSubstring(newPod.Name))
		Expect(page.body).To(ContainSubstring(">2.0<"))

		By("a reconnected terminal lands on the new pod, and its banner names the new version")
		term2 := stDial(ctx, termURL, alice)
		Expect(term2.Banner).To(ContainSubstring(newPod.Name))
		Expect(term2.Banner).To(ContainSubstring("template version 2.0"))
		Expect(term2.Send("back")).To(Equal("[" + newPod.Name + ", version 2.0] back"))
	})
})

// StartStandin runs the demo stand-in (hack/standin) in this process for namespace ns: every
// Running workspace pod there with a loopback IP gets a server on its IP and its workspace and
// preview ports (a page, JSON with Accept: application/json, a WebSocket terminal at any path).
// It waits until the stand-in has synced and stops it (closing every listener) after the spec.
// Only ns is followed, so it never binds the pod IPs of other specs' pods.
func StartStandin(ns string) *standin.StandIn {
	GinkgoHelper()
	s, err := standin.New(Cluster.Config, standin.Options{Namespace: ns, Log: GinkgoLogr, Retry: 500 * time.Millisecond})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- s.Run(ctx, func() { close(ready) }) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done, 30*time.Second).Should(Receive(BeNil()), "the stand-in stops")
	})
	select {
	case <-ready:
	case err := <-done:
		Fail(fmt.Sprintf("the stand-in ended before it was ready: %v", err))
	case <-time.After(70 * time.Second):
		Fail("the stand-in did not sync within 70 s")
	}
	return s
}

// standinServing matches the stand-in's backend for pod on port.
func standinServing(pod *corev1.Pod, port int, role standin.Role) any {
	return And(
		HaveField("Addr", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))),
		HaveField("Role", role),
		HaveField("Pod", pod.Name),
		HaveField("UID", pod.UID),
	)
}

type stResponse struct {
	code        int
	contentType string
	body        string
}

// stGet sends GET url with a bearer token and Accept header through pxClient.
func stGet(url, token, accept string) stResponse {
	GinkgoHelper()
	r, err := stDo(url, token, accept)
	Expect(err).NotTo(HaveOccurred(), "GET %s", url)
	return r
}

func stDo(url, token, accept string) (stResponse, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return stResponse{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", accept)
	resp, err := pxClient.Do(req)
	if err != nil {
		return stResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return stResponse{code: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: string(b)}, err
}

// stInfo is the stand-in's JSON answer at url through the proxy.
func stInfo(url, token string) standin.Info {
	GinkgoHelper()
	return stInfoG(Default, url, token)
}

func stInfoG(g Gomega, url, token string) standin.Info {
	r, err := stDo(url, token, "application/json")
	g.Expect(err).NotTo(HaveOccurred(), "GET %s", url)
	g.Expect(r.code).To(Equal(http.StatusOK), "GET %s: %s", url, r.body)
	g.Expect(r.contentType).To(Equal("application/json"), "GET %s: %s", url, r.body)
	var i standin.Info
	g.Expect(json.NewDecoder(strings.NewReader(r.body)).Decode(&i)).To(Succeed())
	return i
}

// stDial opens the stand-in's terminal through the proxy and closes it after the spec.
func stDial(ctx context.Context, url, token string) *standin.Terminal {
	GinkgoHelper()
	t, err := standin.DialTerminal(ctx, url, token)
	Expect(err).NotTo(HaveOccurred(), "open the terminal %s", url)
	DeferCleanup(func() { _ = t.Close() })
	return t
}
