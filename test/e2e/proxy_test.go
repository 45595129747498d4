package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The workspace proxy end to end: the real nogoo9 binary, real workspace pods on kwok, and small Go
// servers standing in for the workspaces, listening on the pod IPs kwok assigns (127.1.x.y, which
// are loopback addresses here) and on the template's workspace port. Every server answers with
// the name of the pod it plays, so each response says which pod the proxy picked.
var _ = Describe("Proxy: routing, cutover, authorization and phases", Label("proxy"), func() {

	// kwok writes a pod's IP and Ready=True in one status write, so a test server can never be
	// listening on a kwok pod's IP before the proxy may route to it (the proxy would answer 502 for
	// a moment, and "no failed request during the switch" could not be asserted). Readiness gates
	// do not help: kwok's pod-ready stage sets every gate True and Ready True at once (see
	// docs/development.md). So the 2.0 template's image is under nonexistent.invalid/, which kwok
	// leaves in ErrImagePull with no IP, and for that one pod the test plays the kubelet as a real
	// one behaves: the pull finishes and the container starts (Running, pod IP, not Ready), the
	// server listens, the readiness probe passes (Ready). Everything else (scheduling, the old
	// pod, deletion) is kwok's and the real controller's.
	//
	// To see the open WebSocket stay on the old pod while HTTP already goes to the new one, the
	// controller runs as a second nogoo9 process (--components=controller) that is stopped while
	// the new pod turns Ready and started again afterwards: otherwise it deletes the old pod within
	// milliseconds of the new one being Ready and the window cannot be observed reliably. On its
	// restart the controller recovers the upgrade from the pods' annotations and deletes the old
	// pod, as after any crash.
	It("moves HTTP to the new pod as soon as it is Ready with no failed request, and keeps an open WebSocket on the old pod until that pod is deleted", func(ctx SpecContext) {
		ns := NewNamespace()
		port := pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(ns, "cut", "1.0", "example.com/ide:1.0", port))).To(Succeed())
		alice := pxUserToken(ctx, ns, "alice")
		front := StartNogoo9("--namespace="+ns, "--components=api,proxy")
		ctl := StartNogoo9("--namespace="+ns, "--components=controller")

		By("spawning a workspace through the REST API and starting its server on the pod's IP")
		w := pxSpawn(front, alice, "cut", "cutover")
		oldPod := WaitPodReady(ns, w.ActivePod)
		Expect(oldPod.Status.PodIP).To(HavePrefix("127.1."))
		oldServer := pxStartBackend(oldPod.Status.PodIP, port, oldPod.Name)
		url := front.ProxyURL + w.WorkspacePath
		Eventually(func(g Gomega) {
			code, rep, body := pxGet(url, alice)
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
			g.Expect(rep.Pod).To(Equal(oldPod.Name))
		}).Should(Succeed(), "the proxy serves %s from pod %s", url, oldPod.Name)

		By("opening a WebSocket through the proxy: it lands on the old pod")
		ws1 := pxDialWS(front, w.WorkspacePath+"echo", alice, "")
		Expect(ws1.Echo("hello")).To(Equal(oldPod.Name + ":hello"))

		By("running a request loop through the proxy for the whole upgrade")
		load := pxStartLoad(ctx, url, alice)

		By("bumping the template to 2.0 and requesting the upgrade through the REST API")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"2.0"}},"data":{"spec":%q}}`,
			workspace.AnnTemplateVersion, pxTemplateSpec(FailingImage("ide-v2"), port))
		Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cut"}},
			client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
		var up struct {
			Status  string `json:"status"`
			PodName string `json:"podName"`
		}
		Eventually(func(g Gomega) {
			code, body := pxAPI(front, alice, http.MethodPost, "/api/v1/workspaces/cutover/upgrade", nil)
			g.Expect(code).To(Equal(http.StatusAccepted), "upgrade: %s", body)
			g.Expect(json.Unmarshal(body, &up)).To(Succeed())
		}).Should(Succeed(), "the API sees template 2.0 and accepts the upgrade")
		Expect(up.PodName).NotTo(BeEmpty())

		By("the new pod comes up next to the old one and waits for its image")
		newKey := client.ObjectKey{Namespace: ns, Name: up.PodName}
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(K8s.Get(ctx, newKey, p)).To(Succeed())
			g.Expect(p.Spec.NodeName).NotTo(BeEmpty())
			g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty())
			g.Expect(p.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil())
			g.Expect(p.Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("ErrImagePull"))
		}).Should(Succeed(), "pod %s scheduled and in ErrImagePull (kwok)", up.PodName)
		pxExpectPhase(front, alice, "cutover", workspace.PhaseUpgrading, "", "ErrImagePull")

		By("stopping the controller, so that the old pod stays until it is started again")
		ctl.Stop()

		By("the container starts with an IP, not Ready yet, and its server listens: traffic stays on the old pod")
		ip := pxSpareIP(port)
		pxSetPodRunning(ctx, newKey, ip, false)
		pxStartBackend(ip, port, up.PodName)
		// The API reads the same informer as the proxy: once it shows the new pod's status, so
		// has the proxy's route table been given it.
		pxExpectPhase(front, alice, "cutover", workspace.PhaseUpgrading, "", "ContainersNotReady")
		start := load.Count()
		Eventually(load.Count).Should(BeNumerically(">=", start+20), "the request loop keeps going")
		Expect(load.LastPod()).To(Equal(oldPod.Name), "a pod that is not Ready must not get traffic")

		By("marking the new pod Ready: the next requests go to it")
		readyAt := time.Now()
		pxSetPodRunning(ctx, newKey, ip, true)
		// No bound on how fast (a loaded machine is slow); switchLag below reports it.
		Eventually(load.LastPod).WithPolling(10*time.Millisecond).Should(Equal(up.PodName),
			"HTTP switches to the new pod once it is Ready")
		switchLag := load.FirstFrom(up.PodName).Sub(readyAt)

		By("the open WebSocket stays on the old pod; a new one lands on the new pod")
		Consistently(func() (string, error) { return ws1.Echo("still") }, time.Second, 100*time.Millisecond).
			Should(Equal(oldPod.Name+":still"), "the WebSocket opened before the upgrade stays pinned to its pod")
		ws2 := pxDialWS(front, w.WorkspacePath+"echo", alice, "")
		Expect(ws2.Echo("hi")).To(Equal(up.PodName + ":hi"))
		ws2.Close()
		Expect(load.LastPod()).To(Equal(up.PodName))

		By("starting the controller again: it deletes the old pod, and the proxy closes the WebSocket")
		deletedAt := pxWatchDeletion(ns, oldPod.Name)
		ctl.Restart()
		Eventually(ws1.Closed, 30*time.Second).Should(BeClosed(), "the proxy closes the WebSocket of the deleted pod")
		Eventually(deletedAt).ShouldNot(BeZero(), "the controller deletes the old pod")
		// How soon is reported, not asserted: on a loaded machine any bound is a coin toss.
		closeLag := ws1.ClosedAt().Sub(deletedAt())
		Expect(ws1.ClosedAt()).To(BeTemporally(">", readyAt), "the WebSocket was not cut by the switch itself")

		By("a reconnect lands on the new pod")
		ws3 := pxDialWS(front, w.WorkspacePath+"echo", alice, "")
		Expect(ws3.Echo("back")).To(Equal(up.PodName + ":back"))

		By("the old pod is gone: its server stops, as its container would; requests keep succeeding")
		Eventually(func() bool {
			return apierrors.IsNotFound(K8s.Get(ctx, client.ObjectKeyFromObject(oldPod), &corev1.Pod{}))
		}).Should(BeTrue())
		oldServer.Close()
		start = load.Count()
		Eventually(load.Count).Should(BeNumerically(">=", start+20))
		// The loop was still running just above, so its samples cover the whole cutover.
		samples := load.Stop()

		var failures []string
		seenNew := false
		for i, s := range samples {
			if s.err != "" || s.status != http.StatusOK {
				failures = append(failures, fmt.Sprintf("#%d at %s: status %d %s", i, s.at.Format("15:04:05.000"), s.status, s.err))
				continue
			}
			switch s.pod {
			case up.PodName:
				Expect(s.at).To(BeTemporally(">", readyAt), "request #%d reached the new pod before it was Ready", i)
				seenNew = true
			case oldPod.Name:
				Expect(seenNew).To(BeFalse(), "request #%d went back to the old pod after the switch", i)
			default:
				Fail(fmt.Sprintf("request #%d answered by unknown pod %q", i, s.pod))
			}
		}
		Expect(failures).To(BeEmpty(), "no request may fail during the cutover (%d requests)", len(samples))

		By("the workspace is Ready on 2.0 with the new pod")
		Eventually(func(g Gomega) {
			info := pxWorkspace(g, front, alice, "cutover")
			g.Expect(info.Phase).To(Equal(workspace.PhaseReady))
			g.Expect(info.ActivePod).To(Equal(up.PodName))
			g.Expect(info.TemplateVersion).To(Equal("2.0"))
		}).Should(Succeed())

		GinkgoWriter.Printf("cutover: %d requests, 0 failed; HTTP reached the new pod %s after its Ready status was written; "+
			"the WebSocket closed %s after our watch saw the old pod's deletion\n",
			len(samples), switchLag.Round(time.Millisecond), closeLag.Round(time.Millisecond))
		AddReportEntry("cutover timings", fmt.Sprintf("requests=%d failed=0 httpSwitchAfterReady=%s wsCloseAfterDeletion=%s",
			len(samples), switchLag.Round(time.Millisecond), closeLag.Round(time.Millisecond)), ReportEntryVisibilityNever)
	})

	It("lets only the owner and admins reach a workspace, whatever the path or WebSocket origin says", func(ctx SpecContext) {
		ns := NewNamespace()
		port := pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(ns, "auth", "1.0", "example.com/ide:1.0", port))).To(Succeed())
		alice, bob := pxUserToken(ctx, ns, "alice"), pxUserToken(ctx, ns, "bob")
		admin := Cluster.AdminToken // user nogoo9-admin, group system:masters
		p := StartNogoo9("--namespace="+ns, "--admin-group=system:masters")

		wa, wb := pxSpawn(p, alice, "auth", "alice-box"), pxSpawn(p, bob, "auth", "bob-box")
		podA, podB := WaitPodReady(ns, wa.ActivePod), WaitPodReady(ns, wb.ActivePod)
		pxStartBackend(podA.Status.PodIP, port, podA.Name)
		pxStartBackend(podB.Status.PodIP, port, podB.Name)
		aliceURL := p.ProxyURL + wa.WorkspacePath
		// Both workspaces must be routable before anything is asserted: the proxy learns each pod
		// on its own, so alice's being served says nothing about bob's.
		Eventually(func(g Gomega) {
			code, rep, body := pxGet(aliceURL, alice)
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
			g.Expect(rep.Pod).To(Equal(podA.Name))
			code, rep, body = pxGet(p.ProxyURL+wb.WorkspacePath, bob)
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
			g.Expect(rep.Pod).To(Equal(podB.Name))
		}).Should(Succeed())

		By("the owner and an admin get through; the workspace never sees their credentials")
		for who, tok := range map[string]string{"owner": alice, "admin": admin} {
			code, rep, body := pxGet(aliceURL+"some/file.js", tok)
			Expect(code).To(Equal(http.StatusOK), "%s: %s", who, body)
			Expect(rep.Pod).To(Equal(podA.Name), who)
			Expect(rep.Path).To(Equal("/some/file.js"), "%s: the prefix is stripped", who)
			Expect(rep.Authorization).To(BeFalse(), "%s: the proxy must not forward the Authorization header", who)
		}
		code, rep, body := pxGet(p.ProxyURL+wb.WorkspacePath, bob)
		Expect(code).To(Equal(http.StatusOK), "bob reaches his own workspace: %s", body)
		Expect(rep.Pod).To(Equal(podB.Name))

		By("the prefix without its trailing slash redirects to it")
		resp, err := pxClient.Get(strings.TrimSuffix(aliceURL, "/") + "?tab=2")
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), "even a redirect needs a login")
		req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(aliceURL, "/")+"?tab=2", nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err = pxClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusPermanentRedirect))
		Expect(resp.Header.Get("Location")).To(Equal(wa.WorkspacePath + "?tab=2"))

		By("no token or a bad one: 401; another user: 403")
		code, _, body = pxGet(aliceURL, "")
		Expect(code).To(Equal(http.StatusUnauthorized), "%s", body)
		code, _, body = pxGet(aliceURL, "not-a-token")
		Expect(code).To(Equal(http.StatusUnauthorized), "%s", body)
		code, _, body = pxGet(aliceURL, bob)
		Expect(code).To(Equal(http.StatusForbidden), "%s", body)
		Expect(body).NotTo(ContainSubstring(podA.Name))

		By("path tricks from bob's prefix resolve to alice's workspace and are refused (alice's own use of them shows where they lead)")
		rel := strings.TrimPrefix(wa.WorkspacePath, "/ws/")                             // "<namespace>/alice-box/"
		bobLabel := strings.Split(strings.TrimPrefix(wb.WorkspacePath, "/ws/"), "/")[0] // bob's first segment
		for _, trick := range []string{
			wb.WorkspacePath + "../../" + rel,
			wb.WorkspacePath + "..%2F..%2F" + strings.ReplaceAll(rel, "/", "%2F"),
			wb.WorkspacePath + "%2E%2E/%2E%2E/" + rel,
			wb.WorkspacePath + "%2E%2E%2F%2E%2E%2F" + rel,
			"/ws/" + bobLabel + "//../" + rel,
			"//ws//" + strings.ReplaceAll(rel, "/", "//"),
			"/ws/" + strings.ReplaceAll(rel, "/", "%2F"),
			wb.WorkspacePath + "x/../../../" + rel + "./",
		} {
			code, _, body := pxGet(p.ProxyURL+trick, bob)
			Expect(code).To(Equal(http.StatusForbidden), "bob GET %s: %s", trick, body)
			Expect(body).NotTo(ContainSubstring(podA.Name), "bob GET %s", trick)
			code, rep, body = pxGet(p.ProxyURL+trick, alice)
			Expect(code).To(Equal(http.StatusOK), "alice GET %s: %s", trick, body)
			Expect(rep.Pod).To(Equal(podA.Name), "alice GET %s", trick)
			Expect(rep.Path).To(Equal("/"), "alice GET %s: the workspace gets the cleaned path", trick)
		}

		By("WebSockets: another user is refused, a foreign origin is refused, the owner's own origin is allowed")
		_, err = pxTryDialWS(p, wa.WorkspacePath+"echo", bob, "")
		Expect(err).To(HaveOccurred(), "bob opens a WebSocket to alice's workspace")
		_, err = pxTryDialWS(p, wa.WorkspacePath+"echo", alice, "http://evil.example")
		Expect(err).To(HaveOccurred(), "a WebSocket from a foreign origin (cross-site WebSocket hijacking)")
		ws := pxDialWS(p, wa.WorkspacePath+"echo", alice, "")
		Expect(ws.Echo("mine")).To(Equal(podA.Name + ":mine"))
	})

	It("stops serving a workspace in maintenance or with a False Workspace* condition within a second, and serves the same pod again afterwards", func(ctx SpecContext) {
		// "Within a second" is what the printed lags show on an idle machine; the waits below use
		// the suite's timeout, so a loaded machine makes the spec slow, not red.
		ns := NewNamespace()
		port := pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(ns, "phases", "1.0", "example.com/ide:1.0", port))).To(Succeed())
		alice := pxUserToken(ctx, ns, "alice")
		p := StartNogoo9("--namespace="+ns, "--admin-group=system:masters")
		w := pxSpawn(p, alice, "phases", "maint")
		pod := WaitPodReady(ns, w.ActivePod)
		StartStandin(ns) // the demo's stand-in plays the workspace (standin_test.go)
		url := p.ProxyURL + w.WorkspacePath
		// served waits until the proxy serves the workspace from the same pod and the API shows it
		// Ready; it returns how long that took from start.
		served := func(start time.Time) time.Duration {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				code, rep, body := pxGet(url, alice)
				g.Expect(code).To(Equal(http.StatusOK), "%s", body)
				g.Expect(rep.Pod).To(Equal(pod.Name))
			}).WithPolling(20*time.Millisecond).Should(Succeed(), "served again by the same pod")
			Eventually(func(g Gomega) {
				info := pxWorkspace(g, p, alice, "maint")
				g.Expect(info.Phase).To(Equal(workspace.PhaseReady), "%+v", info.Status)
				g.Expect(info.ActivePod).To(Equal(pod.Name))
			}).WithPolling(20*time.Millisecond).Should(Succeed(), "the API shows the workspace Ready again")
			return time.Since(start)
		}
		Eventually(func(g Gomega) {
			code, _, body := pxGet(url, alice)
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
		}).Should(Succeed(), "the proxy serves the new workspace")
		served(time.Now())

		// refused applies change and waits until the proxy answers 503 with "reason: message" and the
		// API shows phase Unavailable with reason and message; it returns how long each took.
		refused := func(change func(), reason, message string) (proxyLag, apiLag time.Duration) {
			GinkgoHelper()
			start := time.Now()
			change()
			Eventually(func(g Gomega) {
				code, _, body := pxGet(url, alice)
				g.Expect(code).To(Equal(http.StatusServiceUnavailable), "%s", body)
				g.Expect(body).To(ContainSubstring(reason + ": " + message))
			}).WithPolling(20*time.Millisecond).Should(Succeed(), "the proxy refuses the workspace with the reason")
			proxyLag = time.Since(start)
			Eventually(func(g Gomega) {
				info := pxWorkspace(g, p, alice, "maint")
				g.Expect(info.Status).To(Equal(workspace.Status{Phase: workspace.PhaseUnavailable, Reason: reason, Message: message}))
			}).WithPolling(20*time.Millisecond).Should(Succeed(), "the API shows the workspace Unavailable")
			return proxyLag, time.Since(start)
		}
		annotate := func(value any) func() {
			return func() {
				b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{workspace.AnnMaintenance: value}}})
				Expect(err).NotTo(HaveOccurred())
				Expect(K8s.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, b))).To(Succeed())
			}
		}
		condition := func(status corev1.ConditionStatus, reason, message string) func() {
			return func() {
				b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
					Type: "WorkspaceStorage", Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.Now(),
				}}}})
				Expect(err).NotTo(HaveOccurred())
				Expect(K8s.Status().Patch(ctx, pod.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, b))).To(Succeed())
			}
		}

		By("annotating the pod nogoo9/maintenance=\"disk repair\"")
		pl, al := refused(annotate("disk repair"), workspace.ReasonMaintenance, "disk repair")
		GinkgoWriter.Printf("maintenance on: proxy refused after %s, API showed it after %s\n", pl.Round(time.Millisecond), al.Round(time.Millisecond))
		By("removing the annotation")
		start := time.Now()
		annotate(nil)()
		GinkgoWriter.Printf("maintenance off: served again after %s\n", served(start).Round(time.Millisecond))

		By("setting condition WorkspaceStorage=False through the status subresource")
		pl, al = refused(condition(corev1.ConditionFalse, "NFSServerUnreachable", "nfs.example:/home is not responding"),
			"NFSServerUnreachable", "nfs.example:/home is not responding")
		GinkgoWriter.Printf("WorkspaceStorage=False: proxy refused after %s, API showed it after %s\n", pl.Round(time.Millisecond), al.Round(time.Millisecond))
		By("setting it back to True")
		start = time.Now()
		condition(corev1.ConditionTrue, "Mounted", "")()
		GinkgoWriter.Printf("WorkspaceStorage=True: served again after %s\n", served(start).Round(time.Millisecond))

		By("through the REST API: the owner may not set maintenance, an admin may, and clears it again")
		const apiPath = "/api/v1/workspaces/maint/maintenance"
		code, body := pxAPI(p, alice, http.MethodPut, apiPath, map[string]string{"reason": "my own pause"})
		Expect(code).To(Equal(http.StatusForbidden), "owner PUT maintenance: %s", body)
		pl, al = refused(func() {
			code, body := pxAPI(p, Cluster.AdminToken, http.MethodPut, apiPath, map[string]string{"reason": "kernel update until 14:00"})
			Expect(code).To(Equal(http.StatusOK), "admin PUT maintenance: %s", body)
		}, workspace.ReasonMaintenance, "kernel update until 14:00")
		GinkgoWriter.Printf("maintenance through the API: proxy refused after %s, API showed it after %s\n", pl.Round(time.Millisecond), al.Round(time.Millisecond))
		start = time.Now()
		code, body = pxAPI(p, Cluster.AdminToken, http.MethodDelete, apiPath, nil)
		Expect(code).To(Equal(http.StatusOK), "admin DELETE maintenance: %s", body)
		GinkgoWriter.Printf("maintenance cleared through the API: served again after %s\n", served(start).Round(time.Millisecond))

		By("nothing was restarted: the workspace still has exactly the same pod")
		var list corev1.PodList
		Expect(K8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: "maint"})).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		Expect(list.Items[0].UID).To(Equal(pod.UID))
		Expect(list.Items[0].Status.ContainerStatuses).To(HaveEach(HaveField("RestartCount", BeZero())))
	})
})

// pxTemplateSpec is a template's pod spec: one container serving the workspace on port.
func pxTemplateSpec(image string, port int) string {
	return fmt.Sprintf(`{"containers": [{"name": "ide", "image": %q, "ports": [{"name": "ide", "containerPort": %d}]}]}`, image, port)
}

// pxTemplate is a template ConfigMap without volumes whose workspace port is port.
func pxTemplate(namespace, name, version, image string, port int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{workspace.LabelPodTemplate: "true"},
			Annotations: map[string]string{
				workspace.AnnTemplateVersion: version,
				workspace.AnnWorkspacePort:   strconv.Itoa(port),
			},
		},
		Data: map[string]string{workspace.DataSpec: pxTemplateSpec(image, port)},
	}
}

// pxFreePort is a port nothing listens on at 127.0.0.1, so no wildcard listener holds it and a
// test server can bind it on any pod IP.
func pxFreePort() int {
	GinkgoHelper()
	ports, err := localcluster.FreePorts(1)
	Expect(err).NotTo(HaveOccurred())
	return ports[0]
}

// pxSpareIP is a loopback address for a pod whose status the test writes: in kwok's 127.1.0.0/16,
// high enough (127.1.200.0 and up) not to meet the addresses kwok hands out in a test run.
func pxSpareIP(port int) string {
	GinkgoHelper()
	for range 20 {
		ip := fmt.Sprintf("127.1.%d.%d", 200+rand.IntN(50), 1+rand.IntN(250))
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err == nil {
			Expect(ln.Close()).To(Succeed())
			return ip
		}
	}
	Fail("no free loopback address in 127.1.200.0-127.1.249.255 for port " + strconv.Itoa(port))
	return ""
}

// pxUserToken is a service-account token that the API server accepts (TokenReview), for
// nogoo9's --auth=kubernetes; its subject is system:serviceaccount:<ns>:<name>.
func pxUserToken(ctx context.Context, ns, name string) string {
	GinkgoHelper()
	t, err := Cluster.ServiceAccountToken(ctx, ns, name, Cluster.IssuerURL, 0)
	Expect(err).NotTo(HaveOccurred())
	return t
}

// pxAPIClient bounds each of pxAPI's calls, and the specs' other plain requests to nogoo9, as
// ctxTimeout bounds other steps.
var pxAPIClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}

// pxAPI calls nogoo9's REST API with a bearer token and returns the status and body; a transport
// error fails the spec.
func pxAPI(p *Nogoo9Process, token, method, path string, body any) (int, []byte) {
	GinkgoHelper()
	code, data, err := restCall(pxAPIClient, p, token, method, path, body)
	Expect(err).NotTo(HaveOccurred(), "%s %s", method, path)
	return code, data
}

// pxSpawnReachable spawns n workspaces of template, with ids prefix-0 .. prefix-(n-1), waits until
// each is Ready and answers 200 through the proxy (bounded), and returns them by id.
func pxSpawnReachable(p *Nogoo9Process, token, template, prefix string, n int) map[string]workspace.Info {
	GinkgoHelper()
	out := map[string]workspace.Info{}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		out[id] = pxSpawn(p, token, template, id)
	}
	for id, w := range out {
		pxExpectPhase(p, token, id, workspace.PhaseReady, "", "")
		Eventually(func(g Gomega) {
			code, _, body, err := pxDo(p.ProxyURL+w.WorkspacePath, token)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
		}).Should(Succeed())
	}
	return out
}

// pxSpawn spawns workspace id from template as the token's user and returns the API's view of it.
func pxSpawn(p *Nogoo9Process, token, template, id string) workspace.Info {
	GinkgoHelper()
	var w workspace.Info
	// Retried until nogoo9's cache has the template (a fresh process may not have it yet).
	Eventually(func(g Gomega) {
		code, body := pxAPI(p, token, http.MethodPost, "/api/v1/workspaces", map[string]any{"template": template, "id": id})
		g.Expect(code).To(Equal(http.StatusCreated), "spawn %s: %s", id, body)
		g.Expect(json.Unmarshal(body, &w)).To(Succeed())
	}).Should(Succeed())
	Expect(w.ActivePod).NotTo(BeEmpty())
	Expect(w.WorkspacePath).To(HavePrefix("/ws/"))
	return w
}

// pxWorkspace is GET /api/v1/workspaces/{id}.
func pxWorkspace(g Gomega, p *Nogoo9Process, token, id string) workspace.Info {
	code, body := pxAPI(p, token, http.MethodGet, "/api/v1/workspaces/"+id, nil)
	g.Expect(code).To(Equal(http.StatusOK), "get %s: %s", id, body)
	var w workspace.Info
	g.Expect(json.Unmarshal(body, &w)).To(Succeed())
	return w
}

// pxExpectPhase waits until the API shows workspace id in phase (reason and message fragment
// when not empty).
func pxExpectPhase(p *Nogoo9Process, token, id string, phase workspace.PhaseName, reason, inMessage string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		w := pxWorkspace(g, p, token, id)
		g.Expect(w.Phase).To(Equal(phase), "%+v", w.Status)
		if reason != "" {
			g.Expect(w.Reason).To(Equal(reason), "%+v", w.Status)
		}
		g.Expect(w.Message).To(ContainSubstring(inMessage), "%+v", w.Status)
	}).Should(Succeed(), "workspace %s in phase %s", id, phase)
}

// pxReply is what a test workspace server answers to any HTTP request.
type pxReply struct {
	Pod           string `json:"pod"`
	Path          string `json:"path"`
	Authorization bool   `json:"authorization"`
}

// pxClient talks to the proxy; its own pool, so no test shares connections with another. It
// does not follow redirects: specs see the proxy's own answers.
var pxClient = &http.Client{
	Timeout:       10 * time.Second,
	Transport:     &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// pxGet sends GET rawURL (kept as written: "..", "//" and %2F reach the proxy unchanged) with a
// bearer token ("" for none) and returns the status, the decoded reply of a test server when the
// answer is one, and the body.
func pxGet(rawURL, token string) (int, pxReply, string) {
	GinkgoHelper()
	code, rep, body, err := pxDo(rawURL, token)
	Expect(err).NotTo(HaveOccurred(), "GET %s", rawURL)
	return code, rep, body
}

func pxDo(rawURL, token string) (int, pxReply, string, error) {
	var rep pxReply
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, rep, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json") // the stand-in's JSON answer has pxReply's fields
	resp, err := pxClient.Do(req)
	if err != nil {
		return 0, rep, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, rep, "", err
	}
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(b, &rep)
	}
	return resp.StatusCode, rep, string(b), nil
}

// pxBackend stands in for a workspace's server on a pod's IP and port: any path answers a pxReply
// naming the pod; /echo is a WebSocket that answers each message with "<pod>:<message>".
type pxBackend struct {
	srv  *http.Server
	done chan struct{}
	mu   sync.Mutex
	ws   map[*websocket.Conn]struct{}
	once sync.Once
}

func pxStartBackend(ip string, port int, pod string) *pxBackend {
	GinkgoHelper()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	Expect(err).NotTo(HaveOccurred(), "listen on pod %s's address %s", pod, addr)
	b := &pxBackend{done: make(chan struct{}), ws: map[*websocket.Conn]struct{}{}}
	mux := http.NewServeMux()
	mux.Handle("/echo", websocket.Server{Handler: func(c *websocket.Conn) {
		b.mu.Lock()
		b.ws[c] = struct{}{}
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			delete(b.ws, c)
			b.mu.Unlock()
		}()
		for {
			var msg string
			if websocket.Message.Receive(c, &msg) != nil {
				return
			}
			if websocket.Message.Send(c, pod+":"+msg) != nil {
				return
			}
		}
	}})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pxReply{Pod: pod, Path: r.URL.Path, Authorization: r.Header.Get("Authorization") != ""})
	})
	b.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(GinkgoWriter, "backend "+pod+": ", 0)}
	go func() {
		_ = b.srv.Serve(ln)
		close(b.done)
	}()
	DeferCleanup(b.Close)
	return b
}

// Close stops the server and ends its WebSockets (hijacked connections outlive http.Server.Close).
func (b *pxBackend) Close() {
	b.once.Do(func() {
		_ = b.srv.Close()
		<-b.done
		b.mu.Lock()
		for c := range b.ws {
			_ = c.Close()
		}
		b.mu.Unlock()
	})
}

// pxWS is a WebSocket client through the proxy; a reader goroutine notes when the connection ends.
type pxWS struct {
	conn     *websocket.Conn
	replies  chan string
	closed   chan struct{}
	closedAt time.Time // written before closed is closed
}

// pxDialWS opens a WebSocket to path through p's proxy with a bearer token. origin "" sends the
// proxy's own origin, as a browser on the proxy's page would. It is closed after the spec.
func pxDialWS(p *Nogoo9Process, path, token, origin string) *pxWS {
	GinkgoHelper()
	c, err := pxTryDialWS(p, path, token, origin)
	Expect(err).NotTo(HaveOccurred(), "open a WebSocket to %s through the proxy", path)
	return c
}

func pxTryDialWS(p *Nogoo9Process, path, token, origin string) (*pxWS, error) {
	if origin == "" {
		origin = p.ProxyURL
	}
	cfg, err := websocket.NewConfig("ws://"+p.ProxyAddr+path, origin)
	if err != nil {
		return nil, err
	}
	cfg.Header = http.Header{"Authorization": {"Bearer " + token}}
	// Dial and handshake bounded in time: a proxy that never answers fails the test, not hangs it.
	nc, err := net.DialTimeout("tcp", p.ProxyAddr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := websocket.NewClient(cfg, nc)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	w := &pxWS{conn: conn, replies: make(chan string, 1024), closed: make(chan struct{})}
	go func() {
		for {
			var s string
			if err := websocket.Message.Receive(conn, &s); err != nil {
				w.closedAt = time.Now()
				close(w.closed)
				return
			}
			w.replies <- s
		}
	}()
	DeferCleanup(w.Close)
	return w, nil
}

// Echo sends msg and returns the reply, failing after 10 s or when the connection ends.
func (w *pxWS) Echo(msg string) (string, error) {
	if err := websocket.Message.Send(w.conn, msg); err != nil {
		return "", fmt.Errorf("send on the WebSocket: %w", err)
	}
	select {
	case s := <-w.replies:
		return s, nil
	case <-w.closed:
		return "", errors.New("the WebSocket was closed")
	case <-time.After(10 * time.Second):
		return "", errors.New("no WebSocket reply within 10s")
	}
}

// Closed is closed when the connection has ended.
func (w *pxWS) Closed() <-chan struct{} { return w.closed }

// ClosedAt is when the reader saw the connection end (zero while open).
func (w *pxWS) ClosedAt() time.Time {
	select {
	case <-w.closed:
		return w.closedAt
	default:
		return time.Time{}
	}
}

func (w *pxWS) Close() { _ = w.conn.Close() }

// pxSample is one request of a pxLoad.
type pxSample struct {
	at     time.Time // when the answer arrived
	status int
	pod    string
	err    string
}

// pxLoad is a request loop through the proxy: one GET every 10 ms until Stop, the end of the
// spec's context, or pxLoadFor (a backstop far beyond any spec, not a deadline the spec must beat).
type pxLoad struct {
	mu      sync.Mutex
	samples []pxSample
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

const (
	pxLoadFor   = 15 * time.Minute
	pxLoadEvery = 10 * time.Millisecond
)

func pxStartLoad(ctx context.Context, url, token string) *pxLoad {
	l := &pxLoad{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(pxLoadEvery)
		defer tick.Stop()
		deadline := time.NewTimer(pxLoadFor)
		defer deadline.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			case <-deadline.C:
				return
			case <-tick.C:
			}
			code, rep, _, err := pxDo(url, token)
			s := pxSample{at: time.Now(), status: code, pod: rep.Pod}
			if err != nil {
				s.err = err.Error()
			}
			l.mu.Lock()
			l.samples = append(l.samples, s)
			l.mu.Unlock()
		}
	}()
	DeferCleanup(func() { l.Stop() })
	return l
}

// Count is the number of requests answered so far.
func (l *pxLoad) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// LastPod is the pod that answered the latest request ("" if it failed).
func (l *pxLoad) LastPod() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return ""
	}
	return l.samples[len(l.samples)-1].pod
}

// FirstFrom is when pod first answered (zero if never).
func (l *pxLoad) FirstFrom(pod string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.samples {
		if s.pod == pod {
			return s.at
		}
	}
	return time.Time{}
}

// Stop ends the loop and returns its samples.
func (l *pxLoad) Stop() []pxSample {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// pxSetPodRunning writes, as a kubelet would, the status of a started pod: Running with pod IP ip,
// its containers running, and Ready or not.
func pxSetPodRunning(ctx context.Context, key client.ObjectKey, ip string, ready bool) {
	GinkgoHelper()
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	Eventually(func() error { // retried on conflicts with kwok's or nogoo9's writes
		pod := &corev1.Pod{}
		if err := K8s.Get(ctx, key, pod); err != nil {
			return err
		}
		now := metav1.Now()
		st := &pod.Status
		st.Phase = corev1.PodRunning
		st.PodIP, st.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if st.StartTime == nil {
			st.StartTime = &now
		}
		for _, c := range []struct {
			t corev1.PodConditionType
			s corev1.ConditionStatus
		}{
			{corev1.PodScheduled, corev1.ConditionTrue},
			{corev1.PodReadyToStartContainers, corev1.ConditionTrue},
			{corev1.PodInitialized, corev1.ConditionTrue},
			{corev1.ContainersReady, readyStatus},
			{corev1.PodReady, readyStatus},
		} {
			pxSetCondition(st, c.t, c.s, now)
		}
		st.ContainerStatuses = nil
		started := true
		for _, c := range pod.Spec.Containers {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: "kwok://" + c.Image, Ready: ready, Started: &started,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		return K8s.Status().Update(ctx, pod)
	}).Should(Succeed(), "write the status of pod %s (Running, IP %s, ready=%t)", key, ip, ready)
}

func pxSetCondition(st *corev1.PodStatus, t corev1.PodConditionType, s corev1.ConditionStatus, now metav1.Time) {
	c := corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	if s == corev1.ConditionFalse && (t == corev1.PodReady || t == corev1.ContainersReady) {
		c.Reason, c.Message = "ContainersNotReady", "containers with unready status: [ide]"
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status == s {
				return
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

// pxWatchDeletion watches pod ns/name and returns a function giving the time the watch first saw
// it being deleted (deletion timestamp set, or gone); zero until then.
func pxWatchDeletion(ns, name string) func() time.Time {
	GinkgoHelper()
	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	w, err := Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	var at time.Time
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			pod, _ := ev.Object.(*corev1.Pod)
			if ev.Type == watch.Deleted || (pod != nil && pod.DeletionTimestamp != nil) {
				mu.Lock()
				if at.IsZero() {
					at = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}
