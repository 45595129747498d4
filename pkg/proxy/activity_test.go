package proxy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/proxy"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A second proxy on the same manager records activity (every second) and links its stopped page
// to a UI; the first one, which the other tests use, records nothing.
var activityProxyURL, activityProxyHost string

const (
	activityUI        = "https://ui.example.test"
	shortWSTemplate   = "short-ws"
	activityInterval  = time.Second
	activityMaxWSAge  = time.Millisecond
	activityWaitLimit = 30 * time.Second
)

func setupActivityProxy(mgr ctrl.Manager) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	activityProxyHost = ln.Addr().String()
	activityProxyURL = "http://" + activityProxyHost
	return proxy.Setup(mgr, stubAuth{}, proxy.Options{
		Listener: ln, InsecureCookie: true, UIURL: activityUI,
		Activity: proxy.ActivityOptions{
			Writer: mgr.GetClient(), Interval: activityInterval,
			TemplateAnnotations: func(name string) map[string]string {
				if name == shortWSTemplate {
					return map[string]string{workspace.AnnWebSocketMaxAge: activityMaxWSAge.String()}
				}
				return nil
			},
		},
	})
}

func activityGet(path string, header map[string]string) (int, string, http.Header) {
	req, _ := http.NewRequest(http.MethodGet, activityProxyURL+path, nil)
	req.Header.Set("Authorization", "Bearer jane-token")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := plain.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	n, _ := res.Body.Read(buf)
	b.Write(buf[:n])
	return res.StatusCode, b.String(), res.Header
}

func lastActivity(g Gomega, pod *corev1.Pod) string {
	var p corev1.Pod
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &p)).To(Succeed())
	return p.Annotations[workspace.AnnLastActivity]
}

// servingPod creates a Ready workspace pod of jane with a backend on a fresh loopback IP and
// waits until the activity proxy forwards to it.
func servingPod(t *testing.T, g *WithT, base string, labels map[string]string) (*corev1.Pod, string) {
	t.Helper()
	id := uniq(base)
	ip := fmt.Sprintf("127.1.%d.%d", 150+seq.Add(1)%50, 1+seq.Add(1)%250)
	startBackend(t, ip, id, 8080)
	pod := createPod(t, g, id, id, "jane", ip, nil)
	if len(labels) > 0 {
		for k, v := range labels {
			pod.Labels[k] = v
		}
		g.Expect(k8s.Update(context.Background(), pod)).To(Succeed())
	}
	path := "/ws/jane/" + id + "/"
	g.Eventually(func() int {
		code, _, _ := activityGet(path, map[string]string{proxy.HealthCheckHeader: "1"})
		return code
	}, activityWaitLimit, 20*time.Millisecond).Should(Equal(http.StatusOK), "the proxy serves %s", path)
	return pod, path
}

func TestProxyRecordsActivityButNotHealthChecks(t *testing.T) {
	g := integration(t)
	checked, checkedPath := servingPod(t, g, "health-only", nil)
	used, usedPath := servingPod(t, g, "used", nil)

	for range 5 {
		code, _, _ := activityGet(checkedPath, map[string]string{proxy.HealthCheckHeader: "1"})
		g.Expect(code).To(Equal(http.StatusOK))
		code, _, _ = activityGet(checkedPath, map[string]string{"User-Agent": "kube-probe/1.33"})
		g.Expect(code).To(Equal(http.StatusOK))
	}
	before := time.Now().UTC().Truncate(time.Second)
	code, _, _ := activityGet(usedPath, nil)
	g.Expect(code).To(Equal(http.StatusOK))

	// The flush that writes the used pod's activity ran after every health check above: had
	// they counted, it would have written the checked pod's too.
	g.Eventually(func(g Gomega) {
		v := lastActivity(g, used)
		g.Expect(v).NotTo(BeEmpty())
		at, err := time.Parse(time.RFC3339, v)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(at).To(BeTemporally(">=", before))
	}, activityWaitLimit, 50*time.Millisecond).Should(Succeed(), "a person's request is recorded on the pod")
	g.Expect(lastActivity(g, checked)).To(BeEmpty(), "health checks never count as activity")
}

// Anonymous requests to a public preview do not count: anyone on the network (an uptime checker,
// or the workspace's own process calling its public URL) could otherwise keep a workspace from
// ever being idle, defeating the administrator's culling and the when-idle update policy.
func TestAnonymousRequestsToAPublicPreviewAreNotActivity(t *testing.T) {
	g := integration(t)
	id := uniq("public")
	ip := fmt.Sprintf("127.1.%d.%d", 150+seq.Add(1)%50, 1+seq.Add(1)%250)
	startBackend(t, ip, id, 8080)
	public := createPod(t, g, id, id, "jane", ip, map[string]string{workspace.AnnPublicPreview: "true"})
	preview := "/preview/jane/" + id + "/"
	anonymous := func() int {
		res, err := plain.Get(activityProxyURL + preview)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	g.Eventually(anonymous, activityWaitLimit, 20*time.Millisecond).Should(Equal(http.StatusOK), "the proxy serves %s without a token", preview)
	for range 5 {
		g.Expect(anonymous()).To(Equal(http.StatusOK))
	}
	used, usedPath := servingPod(t, g, "used-beside-public", nil)
	before := time.Now().UTC().Truncate(time.Second)
	code, _, _ := activityGet(usedPath, nil)
	g.Expect(code).To(Equal(http.StatusOK))

	// The flush that writes the used pod's activity ran after every anonymous request above.
	g.Eventually(func(g Gomega) {
		at, err := time.Parse(time.RFC3339, lastActivity(g, used))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(at).To(BeTemporally(">=", before))
	}, activityWaitLimit, 50*time.Millisecond).Should(Succeed(), "a person's request is recorded on the pod")
	g.Expect(lastActivity(g, public)).To(BeEmpty(), "anonymous requests to a public preview never count as activity")
}

func TestOpenWebSocketCountsUntilTheTemplatesMaximumAge(t *testing.T) {
	g := integration(t)
	long, longPath := servingPod(t, g, "ws-long", nil)
	short, shortPath := servingPod(t, g, "ws-short", map[string]string{workspace.LabelTemplate: shortWSTemplate})
	dial := func(path string) *websocket.Conn {
		cfg, err := websocket.NewConfig("ws://"+activityProxyHost+path+"ws", activityProxyURL)
		g.Expect(err).NotTo(HaveOccurred())
		cfg.Header = http.Header{"Authorization": {"Bearer jane-token"}}
		ctx, cancel := context.WithTimeout(context.Background(), plain.Timeout)
		defer cancel()
		c, err := cfg.DialContext(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	dial(longPath)
	dial(shortPath)

	// The handshakes are requests: each pod gets a first value. Then only the WebSocket without
	// a maximum age keeps its workspace active: its value moves on, the other's stays.
	var firstLong, firstShort string
	g.Eventually(func(g Gomega) {
		firstLong, firstShort = lastActivity(g, long), lastActivity(g, short)
		g.Expect(firstLong).NotTo(BeEmpty())
		g.Expect(firstShort).NotTo(BeEmpty())
	}, activityWaitLimit, 50*time.Millisecond).Should(Succeed())
	g.Eventually(func() string { return lastActivity(g, long) }, activityWaitLimit, 100*time.Millisecond).
		ShouldNot(Equal(firstLong), "an open WebSocket keeps recording activity")
	g.Expect(lastActivity(g, short)).To(Equal(firstShort), "a WebSocket older than the template's maximum age is not activity")
}

func TestStoppedWorkspaceGets503WithHowToStartIt(t *testing.T) {
	g := integration(t)
	id := uniq("stopped")
	createPod(t, g, id, id, "jane", "", map[string]string{workspace.AnnStopRequested: "stopped after 31m0s without activity (idle timeout 30m0s)"})
	path := "/ws/jane/" + id + "/"
	g.Eventually(func() int {
		code, _, _ := activityGet(path, map[string]string{"Accept": "text/html"})
		return code
	}, activityWaitLimit, 20*time.Millisecond).Should(Equal(http.StatusServiceUnavailable))
	code, body, hdr := activityGet(path, map[string]string{"Accept": "text/html,application/xhtml+xml"})
	g.Expect(code).To(Equal(http.StatusServiceUnavailable))
	g.Expect(hdr.Get("Content-Type")).To(HavePrefix("text/html"))
	for _, want := range []string{"Workspace " + id + " is stopped", "without activity (idle timeout 30m0s)", activityUI + "/namespaces/" + ns + "/workspaces/" + id, "/api/v1/namespaces/" + ns + "/workspaces/" + id + "/start", "kubectl annotate pod -n " + ns + " -l nogoo9/workspace-id=" + id + " nogoo9/stop-requested-"} {
		g.Expect(body).To(ContainSubstring(want))
	}
	code, body, hdr = activityGet(path, map[string]string{"Accept": "*/*"})
	g.Expect(code).To(Equal(http.StatusServiceUnavailable))
	g.Expect(hdr.Get("Content-Type")).To(HavePrefix("text/plain"))
	g.Expect(body).To(And(ContainSubstring("is stopped: "), ContainSubstring("stopped after 31m0s without activity (idle timeout 30m0s)"), HaveSuffix(". To start it: POST /api/v1/namespaces/"+ns+"/workspaces/"+id+"/start, then reload.\n")))
}
