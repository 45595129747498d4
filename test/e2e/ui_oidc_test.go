package e2e

import (
	"fmt"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/hack/oidcprovider"
)

// Single sign-on in a real browser: the real binary with --auth=oidc against a real OpenID
// Provider (zitadel/oidc's op package, hack/oidcprovider) running in the test, with one user in
// the admin group and one not.
var _ = Describe("Web UI single sign-on in a real browser", Ordered, Label("ui"), func() {
	var ada, bob *uiTab

	BeforeAll(func(_ SpecContext) {
		ns := NewNamespace()
		ports, err := localcluster.FreePorts(1)
		Expect(err).NotTo(HaveOccurred())
		apiAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		apiURL := "http://" + apiAddr
		provider, err := oidcprovider.Start(oidcprovider.Config{
			ClientID: "nogoo9", RedirectURIs: []string{apiURL + "/login/callback"},
			Users: []oidcprovider.User{
				{ID: "ada-" + ns, Username: "ada", Password: "ada-password", Groups: []string{"staff", "nogoo9-admins"}},
				{ID: "bob-" + ns, Username: "bob", Password: "bob-password", Groups: []string{"staff"}},
			},
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(provider.Close)
		StartNogoo9("--namespace="+ns, "--api-bind-address="+apiAddr, "--auth=oidc",
			"--oidc-issuer-url="+provider.Issuer, "--oidc-client-id=nogoo9",
			"--oidc-admin-claim=groups", "--oidc-admin-value=nogoo9-admins",
			"--ui-oidc-redirect-url="+apiURL+"/login/callback", "--ui-oidc-scopes=profile,groups",
			"--ui-dev-login=false", "--ui-insecure-cookie")
		browser := newUIBrowser()
		ada, bob = newUITab(browser, apiURL), newUITab(browser, apiURL)
	}, NodeTimeout(3*time.Minute))

	ssoLogin := func(t *uiTab, user, password string) {
		GinkgoHelper()
		t.open("/")
		t.waitJS(`location.pathname === "/login" && document.getElementById("oidc-login") !== null`)
		Expect(t.eval(`String(document.getElementById("token"))`)).To(Equal("null"), "--ui-dev-login=false hides the development login")
		t.do(chromedp.Click(chromedp.ID("oidc-login")))
		t.waitJS(`document.getElementById("op-username") !== null`)
		t.do(
			chromedp.SendKeys(chromedp.ID("op-username"), user),
			chromedp.SendKeys(chromedp.ID("op-password"), password),
			chromedp.Click(chromedp.ID("op-submit")),
		)
		t.waitJS(`location.pathname === "/" && document.querySelector("h1") !== null && document.querySelector("h1").textContent === "My workspaces"`)
	}

	It("logs in a member of the admin group as an admin", func() {
		ssoLogin(ada, "ada", "ada-password")
		Expect(ada.text(".who")).To(ContainSubstring("admin"))
		Expect(ada.eval(`String(document.querySelector('a[href="/?all=1"]') !== null)`)).To(Equal("true"))
		Expect(ada.eval(`document.cookie`)).To(BeEmpty())
	})

	It("logs in anyone else as a user", func() {
		ssoLogin(bob, "bob", "bob-password")
		Expect(bob.text(".who")).NotTo(ContainSubstring("admin"))
		Expect(bob.eval(`String(document.querySelector('a[href="/?all=1"]'))`)).To(Equal("null"))
	})
})
