package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// uiBrowserWait bounds each wait for a DOM state in the browser specs.
const uiBrowserWait = 90 * time.Second

// uiChromiumPath finds Debian's chromium (hack/install-chromium.sh installs it; make test-e2e runs
// that script). A missing browser fails the spec with what to do: it never skips.
func uiChromiumPath() string {
	GinkgoHelper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Fail("chromium not found: run hack/install-chromium.sh (make test-e2e runs it), or set CHROMIUM to a Chromium binary")
	return ""
}

// newUIBrowser starts headless Chromium with a fresh profile and returns the browser's context;
// extra options (command-line flags) are added to the common ones. The browser stops after the
// current node (BeforeAll: the container).
func newUIBrowser(extra ...chromedp.ExecAllocatorOption) context.Context {
	GinkgoHelper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(uiChromiumPath()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(GinkgoT().TempDir()),
		chromedp.WindowSize(1100, 760),
	)
	opts = append(opts, extra...)
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	DeferCleanup(cancel)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	DeferCleanup(cancelBrowser)
	// The first Run starts the browser; it must not carry a timeout.
	Expect(chromedp.Do(browser)).To(Succeed(), "start chromium")
	return browser
}

// uiTab is one browser profile (its own cookies) on one tab.
type uiTab struct {
	ctx  context.Context
	base string
}

func newUITab(alloc context.Context, base string) *uiTab {
	GinkgoHelper()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithNewBrowserContext())
	DeferCleanup(cancel)
	Expect(chromedp.Do(ctx)).To(Succeed(), "open a tab in a fresh browser context")
	return &uiTab{ctx: ctx, base: base}
}

func (t *uiTab) do(steps ...chromedp.Action[chromedp.Void]) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(t.ctx, uiBrowserWait)
	defer cancel()
	Expect(chromedp.Do(ctx, steps...)).To(Succeed())
}

func (t *uiTab) open(path string) {
	GinkgoHelper()
	t.do(chromedp.Navigate(t.base + path))
}

// waitJS waits, in the page, until the JavaScript expression is truthy: re-evaluated on every DOM
// mutation, and again after a navigation replaced the page, bounded by uiBrowserWait.
func (t *uiTab) waitJS(expr string) {
	GinkgoHelper()
	deadline := time.Now().Add(uiBrowserWait)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(5*time.Second)))
		cancel()
		if err == nil {
			return
		}
	}
	html, _ := chromedp.Run(t.short(), chromedp.Evaluate[string](`document.body.outerHTML`))
	Fail(fmt.Sprintf("waiting for %s in the browser: %v\npage:\n%s", expr, err, html))
}

func (t *uiTab) short() context.Context {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	DeferCleanup(cancel)
	return ctx
}

func (t *uiTab) eval(expr string) string {
	GinkgoHelper()
	v, err := chromedp.Run(t.short(), chromedp.Evaluate[string](expr))
	Expect(err).NotTo(HaveOccurred(), "evaluate %s", expr)
	return v
}

// text is the rendered text of the first element matching sel, read in the page (a node id
// from before a navigation would be stale).
func (t *uiTab) text(sel string) string {
	GinkgoHelper()
	v, err := chromedp.Run(t.short(), chromedp.Evaluate[string](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : "<no element>"; })()`, sel)))
	Expect(err).NotTo(HaveOccurred(), "text of %s", sel)
	return strings.TrimSpace(v)
}

// screenshot saves a PNG of the page as name in the spec's artifacts and, when
// NOGOO9_UI_SCREENSHOTS names a directory (docs/images), there too. It captures the viewport only, to keep the files small.
func (t *uiTab) screenshot(name string) {
	GinkgoHelper()
	png, err := chromedp.Run(t.short(), chromedp.CaptureScreenshot())
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(artifactsDir, name), png, 0o644)).To(Succeed())
	if dir := os.Getenv("NOGOO9_UI_SCREENSHOTS"); dir != "" {
		Expect(os.WriteFile(filepath.Join(dir, name), png, 0o644)).To(Succeed())
	}
}

// clickLive clicks the element with id once htmx has wired it: content that arrives over SSE is
// marked htmx-added until htmx has processed it (and a form htmx has processed carries its
// internal data), and a click before that would submit the form natively (a page load) instead
// of through htmx. The check and the click are one evaluation in the page, so a live update
// cannot swap in a new element, not yet wired, between them (a click on that one was a page load).
func (t *uiTab) clickLive(id string) {
	GinkgoHelper()
	t.waitJS(fmt.Sprintf(`(e => {
		if (e === null || e.closest(".htmx-added") !== null) return false;
		if (e.form && !(e.form["htmx-internal-data"] || {}).initHash) return false;
		e.click();
		return true;
	})(document.getElementById(%q))`, id))
}

// login uses the development login with token and waits for the workspace list.
func (t *uiTab) login(token string) {
	GinkgoHelper()
	t.open("/login")
	t.do(
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("dev-login")),
	)
	t.waitJS(`document.querySelector("h1") && document.querySelector("h1").textContent === "My workspaces"`)
}

// uiRowPhase is the expression of workspace id's row phase in the list ("" without the row).
func uiRowPhase(id string) string {
	return fmt.Sprintf(`(document.getElementById("ws-%s") || {dataset: {phase: ""}}).dataset.phase`, id)
}

// uiSpawnREST creates a workspace through the REST API with token.
func uiSpawnREST(p *Nogoo9Process, token, template, id string) {
	GinkgoHelper()
	code, body := pxAPI(p, token, http.MethodPost, "/api/v1/workspaces", map[string]string{"template": template, "id": id})
	Expect(code).To(Equal(http.StatusCreated), "spawn %s through REST: %s", id, body)
}

func uiBumpTemplate(ns, name, version string) {
	GinkgoHelper()
	ctx, cancel := ctxTimeout()
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, workspace.AnnTemplateVersion, version)
	Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

// The web UI in a real browser: headless Chromium driven over the DevTools protocol against the
// real nogoo9 binary on the local cluster, logging in with tokens the cluster's TokenReview accepts.
var _ = Describe("Web UI in a real browser", Ordered, Label("ui"), func() {
	var (
		ns, adminNS        string
		proc               *Nogoo9Process
		alice, admin       *uiTab
		bobTok, carolTok   string
		aliceTok, adminTok string
	)

	BeforeAll(func(ctx SpecContext) {
		ns = NewNamespace()
		adminNS = NewNamespace()
		Expect(K8s.Create(ctx, templateConfigMap(ns, "python", "1.0"))).To(Succeed())
		token := func(namespace, name string) string {
			t, err := Cluster.ServiceAccountToken(ctx, namespace, name, Cluster.IssuerURL, 0)
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		aliceTok, bobTok, carolTok = token(ns, "alice"), token(ns, "bob"), token(ns, "carol")
		adminTok = token(adminNS, "admin")
		proc = StartNogoo9("--namespace="+ns, "--admin-group=system:serviceaccounts:"+adminNS, "--ui-insecure-cookie")
		browser := newUIBrowser()
		alice, admin = newUITab(browser, proc.APIURL), newUITab(browser, proc.APIURL)
	}, NodeTimeout(3*time.Minute))

	It("logs a user in with the development login and spawns a workspace from the form", func() {
		alice.login(aliceTok)
		Expect(alice.eval(`document.cookie`)).To(BeEmpty(), "the session cookie is HttpOnly: no script can read it")
		alice.open("/workspaces/new")
		alice.do(
			chromedp.Click(chromedp.ID("tpl-python")),
			chromedp.SendKeys(chromedp.ID("id"), "alice-box"),
			chromedp.Click(chromedp.ID("create")),
		)
		alice.waitJS(uiRowPhase("alice-box") + ` === "Ready"`)
		Expect(alice.text("#ws-alice-box")).To(ContainSubstring("python 1.0"))

		By("the same id again: the error appears next to the id field")
		alice.open("/workspaces/new")
		alice.do(
			chromedp.Click(chromedp.ID("tpl-python")),
			chromedp.SendKeys(chromedp.ID("id"), "alice-box"),
			chromedp.Click(chromedp.ID("create")),
		)
		alice.waitJS(`document.getElementById("id-error") !== null`)
		Expect(alice.text("#id-error")).To(ContainSubstring(`workspace "alice-box" already exists`))
		Expect(alice.eval(`document.getElementById("id").getAttribute("aria-invalid")`)).To(Equal("true"))
	})

	It("shows Outdated after a template bump and upgrades the row live: Upgrading, then Ready", func() {
		alice.open("/")
		alice.waitJS(uiRowPhase("alice-box") + ` === "Ready"`)
		// A marker that a reload would wipe, and a record of every phase the row shows.
		alice.eval(`window.__noReload = "yes";
			window.__phases = [];
			new MutationObserver(() => {
				const r = document.getElementById("ws-alice-box");
				if (r && window.__phases[window.__phases.length-1] !== r.dataset.phase) window.__phases.push(r.dataset.phase);
			}).observe(document.getElementById("rows").parentNode, {subtree: true, childList: true, attributes: true});
			""`)
		uiBumpTemplate(ns, "python", "2.0")
		alice.waitJS(`document.querySelector("#ws-alice-box .badge.outdated") !== null`)
		Expect(alice.text("#ws-alice-box .badge.outdated")).To(ContainSubstring("Outdated: 2.0 available"))
		alice.screenshot("ui-list-outdated.png")

		alice.clickLive("ws-alice-box__upgrade")
		alice.waitJS(`window.__phases.includes("Upgrading")`)
		alice.waitJS(uiRowPhase("alice-box") + ` === "Ready" && document.querySelector("#ws-alice-box .badge.outdated") === null && document.getElementById("ws-alice-box").textContent.includes("python 2.0")`)
		Expect(alice.eval(`window.__noReload`)).To(Equal("yes"), "the page must not have reloaded")
		Expect(alice.eval(`window.__phases.join(",")`)).To(MatchRegexp(`Upgrading.*Ready`))
	})

	It("shows a workspace's events live, from UpgradeStarted to UpgradeSucceeded", func() {
		alice.open("/workspaces/alice-box")
		alice.waitJS(`document.querySelectorAll("#events li").length > 0`)
		// The upgrade to 3.0's own Events, told apart by their messages: the page lists the events
		// of the workspace's current pods, so the previous upgrade's (on a pod that may be going
		// just as the page opens) can appear in the first list and be gone from the live one.
		shown := `Array.from(document.querySelectorAll("#events li")).some(li => li.querySelector("strong").textContent === %q && li.querySelector(".emsg").textContent.includes(%q))`
		alice.eval(`window.__noReload = "yes"; ""`)
		uiBumpTemplate(ns, "python", "3.0")
		alice.clickLive("ws-alice-box__upgrade")
		alice.waitJS(fmt.Sprintf(shown, "UpgradeStarted", "to 3.0 of template"))
		alice.waitJS(fmt.Sprintf(shown, "UpgradeSucceeded", "(version 3.0)"))
		Expect(alice.eval(`window.__noReload`)).To(Equal("yes"), "the events arrived without a reload")
		alice.waitJS(`document.getElementById("summary").textContent.includes("python 3.0")`)
		alice.screenshot("ui-workspace-events.png")
	})

	It("shows Upgrade All Outdated only to an admin, who upgrades every outdated workspace", func() {
		By("two more users' workspaces at the current version, then a bump makes them outdated")
		uiSpawnREST(proc, bobTok, "python", "bob-box")
		uiSpawnREST(proc, carolTok, "python", "carol-box")
		for _, id := range []string{"bob-box", "carol-box"} {
			Eventually(func(g Gomega) {
				var pods corev1.PodList
				g.Expect(K8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id})).To(Succeed())
				g.Expect(pods.Items).To(HaveLen(1))
				g.Expect(podCondition(&pods.Items[0], corev1.PodReady)).To(Equal(corev1.ConditionTrue))
			}).Should(Succeed(), "workspace %s ready", id)
		}
		uiBumpTemplate(ns, "python", "4.0")

		By("a user sees her own outdated workspace but not the admin's button")
		alice.open("/")
		alice.waitJS(`document.querySelector("#ws-alice-box .badge.outdated") !== null`)
		Expect(alice.eval(`String(document.getElementById("upgrade-all"))`)).To(Equal("null"))
		Expect(alice.eval(`String(document.getElementById("ws-bob-box"))`)).To(Equal("null"), "a user sees only her own workspaces")

		By("the admin sees it, with every user's workspaces and their owners")
		admin.login(adminTok)
		admin.open("/?all=1")
		admin.waitJS(`document.getElementById("upgrade-all") !== null && document.getElementById("ws-carol-box") !== null`)
		Expect(admin.text("#upgrade-all")).To(Equal("Upgrade All Outdated (3)"))
		Expect(admin.text("#ws-bob-box .owner")).To(Equal("system:serviceaccount:" + ns + ":bob"))
		admin.screenshot("ui-admin-all.png")

		By("the confirmation says how many workspaces of how many users")
		admin.do(chromedp.Click(chromedp.ID("upgrade-all")))
		admin.waitJS(`document.getElementById("upgrade-all-summary") !== null`)
		Expect(admin.text("#upgrade-all-summary")).To(HavePrefix("This upgrades 3 workspaces of 3 users"))
		admin.screenshot("ui-upgrade-all-confirm.png")
		admin.do(chromedp.Click(chromedp.ID("confirm-upgrade-all")))
		admin.waitJS(`document.getElementById("upgrade-all-result") !== null`)
		for _, id := range []string{"alice-box", "bob-box", "carol-box"} {
			Expect(admin.text("#result-" + id)).To(ContainSubstring("upgrading"))
		}

		By("every row converges to 4.0 and Ready, and the button goes away, live")
		admin.open("/?all=1")
		admin.eval(`window.__noReload = "yes"; ""`)
		ready := []string{}
		for _, id := range []string{"alice-box", "bob-box", "carol-box"} {
			ready = append(ready, uiRowPhase(id)+` === "Ready" && document.getElementById("ws-`+id+`").textContent.includes("python 4.0")`)
		}
		admin.waitJS(strings.Join(ready, " && ") + ` && document.getElementById("upgrade-all") === null`)
		Expect(admin.eval(`window.__noReload`)).To(Equal("yes"))
	})

	It("tells a user who opens another user's workspace Access Denied", func() {
		alice.open("/workspaces/bob-box")
		alice.waitJS(`document.getElementById("error-message") !== null`)
		Expect(alice.text("#error-message")).To(HavePrefix("Access Denied"))
		alice.screenshot("ui-access-denied.png")
	})

	It("ends the session on logout", func() {
		alice.open("/")
		alice.do(chromedp.Click(chromedp.ID("logout")))
		alice.waitJS(`location.pathname === "/login"`)
		alice.open("/")
		alice.waitJS(`location.pathname === "/login" && document.getElementById("token") !== null`)
		alice.screenshot("ui-login.png")
	})
})

// Answers the UI refuses, in a real browser: htmx 2 swaps no 4xx or 5xx answer unless the page's
// htmx-config says so, and an EventSource reads no event from one, so before stop 51 a refused
// Upgrade showed nothing and a stream refused after a logout retried forever without a word.
var _ = Describe("Web UI refusals in a real browser", Ordered, Label("ui"), func() {
	var (
		ns       string
		proc     *Nogoo9Process
		alice    *uiTab
		aliceTok string
	)
	const id = "pin-box"

	BeforeAll(func(ctx SpecContext) {
		ns = NewNamespace()
		Expect(K8s.Create(ctx, templateConfigMap(ns, "python", "1.0"))).To(Succeed())
		var err error
		aliceTok, err = Cluster.ServiceAccountToken(ctx, ns, "alice", Cluster.IssuerURL, 0)
		Expect(err).NotTo(HaveOccurred())
		proc = StartNogoo9("--namespace="+ns, "--ui-insecure-cookie")
		alice = newUITab(newUIBrowser(), proc.APIURL)
	}, NodeTimeout(3*time.Minute))

	It("shows a refused Upgrade's message in the row: 409, the workspace was pinned after the page loaded", func() {
		uiSpawnREST(proc, aliceTok, "python", id)
		alice.login(aliceTok)
		alice.waitJS(uiRowPhase(id) + ` === "Ready"`)
		uiBumpTemplate(ns, "python", "2.0")
		alice.waitJS(`document.getElementById("ws-` + id + `__upgrade") !== null`)

		By("the page stops hearing of changes (a laptop waking up before its stream reconnects), and the workspace is pinned meanwhile")
		Expect(alice.eval(`(() => {
			document.querySelector("[sse-connect]")["htmx-internal-data"].sseEventSource.close();
			window.__noReload = "yes";
			return "closed";
		})()`)).To(Equal("closed"))
		code, body := pxAPI(proc, aliceTok, http.MethodPut, "/api/v1/workspaces/"+id+"/pin", nil)
		Expect(code).To(Equal(http.StatusOK), "pin %s: %s", id, body)

		By("Upgrade is refused (409), and the refusal shows in the row's message")
		alice.clickLive("ws-" + id + "__upgrade")
		alice.waitJS(`document.getElementById("ws-` + id + `__msg").textContent.includes("is pinned to version 1.0: unpin it first")`)
		Expect(alice.eval(`String(document.querySelector("#ws-` + id + `__msg [role=alert]").classList.contains("error"))`)).To(Equal("true"))
		Expect(alice.eval(`window.__noReload`)).To(Equal("yes"), "the refusal was swapped in, not a page load")
	})

	It("says in the page that the session ended, and stops the stream instead of retrying it", func() {
		alice.open("/")
		alice.waitJS(`(e => e !== null && (e["htmx-internal-data"] || {}).sseEventSource !== undefined && e["htmx-internal-data"].sseEventSource.readyState === EventSource.OPEN)(document.querySelector("[sse-connect]"))`)
		Expect(alice.eval(`document.getElementById("live-status").hidden ? "hidden" : "shown"`)).To(Equal("hidden"))

		By("the session ends elsewhere (another tab logs out)")
		status, err := chromedp.Run(alice.short(), chromedp.Evaluate[string](`(async () => {
			const csrf = document.querySelector("input[name=csrf]").value;
			const r = await fetch("/logout", {method: "POST", headers: {"X-CSRF-Token": csrf, "HX-Request": "true"}});
			return String(r.status);
		})()`, chromedp.EvalAwaitPromise))
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal("204"), "logout")

		By("a change of the workspace reaches the stream, which finds the session gone")
		code, body := pxAPI(proc, aliceTok, http.MethodDelete, "/api/v1/workspaces/"+id+"/pin", nil)
		Expect(code).To(Equal(http.StatusOK), "unpin %s: %s", id, body)
		alice.waitJS(`(e => e !== null && !e.hidden && e.textContent.includes("Your session has ended") && e.querySelector("a[href='/login']") !== null)(document.getElementById("live-status"))`)
		Expect(alice.eval(`String(document.querySelector("[sse-connect]")["htmx-internal-data"].sseEventSource.readyState === EventSource.CLOSED)`)).To(Equal("true"),
			"the close event closed the EventSource: htmx's SSE extension retries only a source that failed")
	})
})
