package e2e

import (
	"fmt"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The web UI over two namespaces in a real browser: nogoo9 watches its own namespace and a team
// namespace where alice may spawn (a RoleBinding allows create on workspaces.nogoo9.io there).
// Alice spawns in the team namespace from the form, finds the workspace at
// /namespaces/<team>/workspaces/<id>, stops and starts it there; the admin's namespace filter
// (in the URL) shows it under the team namespace, live, and not under nogoo9's own.
var _ = Describe("Web UI across two namespaces in a real browser", Ordered, Label("ui", "namespaces"), func() {
	var (
		home, team, adminNS string
		proc                *Nogoo9Process
		alice, admin        *uiTab
		aliceTok, adminTok  string
	)
	const id = "team-box"

	BeforeAll(func(ctx SpecContext) {
		home, team, adminNS = NewNamespace(), NewNamespace(), NewNamespace()
		Expect(K8s.Create(ctx, templateConfigMap(home, "python", "1.0"))).To(Succeed())
		token := func(namespace, name string) string {
			t, err := Cluster.ServiceAccountToken(ctx, namespace, name, Cluster.IssuerURL, 0)
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		aliceTok, adminTok = token(home, "alice"), token(adminNS, "admin")
		aliceSub := "system:serviceaccount:" + home + ":alice"
		allowSpawn(ctx, team, aliceSub)
		proc = StartNogoo9("--namespace="+home, "--namespaces="+home+","+team,
			"--admin-group=system:serviceaccounts:"+adminNS, "--ui-insecure-cookie")
		browser := newUIBrowser()
		alice, admin = newUITab(browser, proc.APIURL), newUITab(browser, proc.APIURL)
	}, NodeTimeout(3*time.Minute))

	It("spawns in the team namespace from the form, acts on it at its namespaced page, and the admin's filter shows it there only", func() {
		key := team + "_" + id // the row's key: "<ns>_<id>" outside nogoo9's own namespace
		page := "/namespaces/" + team + "/workspaces/" + id

		By("alice chooses the team namespace on the new-workspace form")
		alice.login(aliceTok)
		alice.open("/workspaces/new")
		alice.do(
			chromedp.Click(chromedp.ID("tpl-python")),
			chromedp.SendKeys(chromedp.ID("id"), id),
			chromedp.SetValue(chromedp.ID("namespace"), team),
			chromedp.Click(chromedp.ID("create")),
		)
		alice.waitJS(uiRowPhase(key) + ` === "Ready"`)
		Expect(alice.text("#ws-" + key)).To(ContainSubstring("namespace " + team))

		By("its row links to /namespaces/<team>/workspaces/<id>, where its page is")
		Expect(alice.eval(fmt.Sprintf(`document.querySelector("#ws-%s td a").getAttribute("href")`, key))).To(Equal(page))
		alice.do(chromedp.Click(chromedp.CSS(fmt.Sprintf("#ws-%s td a", key))))
		alice.waitJS(fmt.Sprintf(`location.pathname === %q && document.getElementById("summary") !== null`, page))
		Expect(alice.text("#summary")).To(And(ContainSubstring(team), ContainSubstring("Ready")))

		By("the admin filters the list by namespace with the form: the choice lands in the URL")
		admin.login(adminTok)
		admin.open("/?all=1")
		admin.waitJS(fmt.Sprintf(`document.getElementById("ws-%s") !== null`, key))
		admin.do(
			chromedp.SetValue(chromedp.ID("namespace-filter"), team),
			chromedp.Click(chromedp.ID("filter")),
		)
		admin.waitJS(fmt.Sprintf(`new URLSearchParams(location.search).get("namespace") === %q && document.getElementById("ws-%s") !== null`, team, key))
		Expect(admin.eval(`new URLSearchParams(location.search).get("all")`)).To(Equal("1"))
		Expect(admin.text("h1")).To(ContainSubstring("in namespace " + team))

		By("alice stops and starts it on its page; the admin's filtered list follows live")
		admin.eval(`window.__noReload = "yes"; ""`)
		alice.clickLive("ws-" + key + "__stop")
		alice.waitJS(`document.getElementById("summary").textContent.includes("Stopped")`)
		admin.waitJS(uiRowPhase(key) + ` === "Stopped"`)
		alice.clickLive("ws-" + key + "__start")
		alice.waitJS(`document.getElementById("summary").textContent.includes("Ready")`)
		admin.waitJS(uiRowPhase(key) + ` === "Ready"`)
		Expect(admin.eval(`window.__noReload`)).To(Equal("yes"), "the filtered list changed without a reload")

		By("under nogoo9's own namespace the admin does not see it (a bookmarkable URL)")
		admin.open("/?all=1&namespace=" + home)
		admin.waitJS(`document.getElementById("rows") !== null`)
		Expect(admin.eval(fmt.Sprintf(`String(document.getElementById("ws-%s"))`, key))).To(Equal("null"))
		Expect(admin.eval(`document.getElementById("namespace-filter").value`)).To(Equal(home))

		By("a namespace nogoo9 does not watch is a clear message, not an error page")
		admin.open("/?all=1&namespace=not-watched")
		admin.waitJS(`document.getElementById("namespace-error") !== null`)
		Expect(admin.text("#namespace-error")).To(And(ContainSubstring("The namespace asked for is not watched by nogoo9"), Not(ContainSubstring("not-watched"))),
			"the page names what to do, never words from its link")

		By("alice deletes it from its page")
		alice.open(page + "/delete")
		alice.do(chromedp.Click(chromedp.ID("confirm-delete")))
		alice.waitJS(`location.pathname === "/" && document.getElementById("rows") !== null`)
		alice.waitJS(fmt.Sprintf(`document.getElementById("ws-%s") === null`, key))
	})
})
