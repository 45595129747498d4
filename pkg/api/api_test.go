package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// bearer adds a token to every request of an http.Client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects the go-sdk MCP client to the front end with token.
func mcpSession(t *testing.T, token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "nogoo9-test", Version: "1"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: env.server.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}}
	s, err := c.Connect(boundedCtx(t), tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

func mustSession(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	s, err := mcpSession(t, token, nil)
	if err != nil {
		t.Fatalf("connect MCP client: %v", err)
	}
	return s
}

// call calls a tool and decodes its structured output into out (when not nil). It returns the
// tool error text ("" when the call succeeded).
func call(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any, out any) string {
	t.Helper()
	res, err := s.CallTool(boundedCtx(t), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "protocol error: " + err.Error()
	}
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
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: decode structured output %s: %v", tool, raw, err)
		}
	}
	return ""
}

// rest sends a REST request and returns status and body.
func rest(t *testing.T, token, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, env.server.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// seed creates a workspace pod directly (owner, id, template version) and waits for the cache.
func seed(t *testing.T, owner, id, version string) *corev1.Pod {
	t.Helper()
	return seedIn(t, ns, owner, id, version)
}

// seedIn is seed in namespace namespace (ns or teamNS).
func seedIn(t *testing.T, namespace, owner, id, version string) *corev1.Pod {
	t.Helper()
	return seedWith(t, namespace, owner, id, version, nil)
}

// seedWith is seedIn with annotations ann added to the pod.
func seedWith(t *testing.T, namespace, owner, id, version string, ann map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: workspace.PodName(owner, id), Namespace: namespace,
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelUserSub: workspace.UserLabel(owner), workspace.LabelTemplate: "python",
				workspace.LabelTemplateVersion: workspace.VersionLabel(version),
			},
			Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: version},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:" + version}}},
	}
	for k, v := range ann {
		pod.Annotations[k] = v
	}
	if err := env.k8s.Create(context.Background(), pod); err != nil {
		t.Fatalf("seed %s: %v", id, err)
	}
	t.Cleanup(func() { _ = env.k8s.Delete(context.Background(), pod) })
	waitCachedIn(t, namespace, pod.Name)
	return pod
}

// waitCached waits until pod name is in the manager's cache and in the front end's list (its
// views follow the cache's events).
func waitCached(t *testing.T, name string) {
	t.Helper()
	waitCachedIn(t, ns, name)
}

// waitCachedIn is waitCached for a pod in namespace namespace.
func waitCachedIn(t *testing.T, namespace, name string) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() error {
		return env.mgrCache.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &corev1.Pod{})
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Eventually(func() string {
		_, body := rest(t, adminToken("root"), "GET", "/api/v1/namespaces/"+namespace+"/workspaces?all=true", nil)
		return string(body)
	}, 30*time.Second, 50*time.Millisecond).Should(ContainSubstring(`"` + name + `"`))
}

func getPod(t *testing.T, name string) (*corev1.Pod, error) {
	t.Helper()
	p := &corev1.Pod{}
	err := env.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
	return p, err
}

func podCount(t *testing.T) int {
	t.Helper()
	var l corev1.PodList
	if err := env.k8s.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

func TestAuthenticationRefusesBadTokens(t *testing.T) {
	skipShort(t)
	is := env.issuer
	cases := []struct {
		name  string
		token string
	}{
		{"no token at all", ""},
		{"expired token", is.token(claims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix(), "iat": time.Now().Add(-2 * time.Hour).Unix()})},
		{"token for another audience", is.token(claims{"sub": "alice", "aud": "someone-else"})},
		{"token from another issuer", is.token(claims{"sub": "alice", "iss": "https://evil.example.com"})},
		{"unsigned token with alg none", is.unsigned(claims{"sub": "alice"})},
		{"token signed with a key the issuer does not publish", is.sign(is.other, "k2", claims{"sub": "alice"})},
		{"token signed with an unpublished key that claims the published key id", is.sign(is.other, "k1", claims{"sub": "alice"})},
		{"token without the subject claim", is.token(claims{})},
		{"not a JWT", "hello"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rest(t, tc.token, "GET", "/api/v1/workspaces", nil)
			if code != http.StatusUnauthorized {
				t.Errorf("REST: status %d, want 401; body %s", code, body)
			}
			if _, err := mcpSession(t, tc.token, nil); err == nil {
				t.Errorf("MCP: connect succeeded with a bad token")
			}
		})
	}
	t.Run("a good token is accepted on both", func(t *testing.T) {
		code, body := rest(t, userToken("alice"), "GET", "/api/v1/whoami", nil)
		if code != 200 || !strings.Contains(string(body), `"subject":"alice"`) || !strings.Contains(string(body), `"isAdmin":false`) {
			t.Errorf("whoami: %d %s", code, body)
		}
		code, body = rest(t, adminToken("root"), "GET", "/api/v1/whoami", nil)
		if code != 200 || !strings.Contains(string(body), `"isAdmin":true`) {
			t.Errorf("whoami admin: %d %s", code, body)
		}
		mustSession(t, userToken("alice"))
	})
	t.Run("MCP 401 names the protected resource metadata", func(t *testing.T) {
		resp, err := httpc.Post(env.server.URL+"/mcp", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
			t.Errorf("status %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		code, body := rest(t, "", "GET", "/.well-known/oauth-protected-resource", nil)
		if code != 200 || !strings.Contains(string(body), env.issuer.srv.URL) {
			t.Errorf("metadata: %d %s", code, body)
		}
	})
}

func TestMCPToolsAsOwnerAndAdmin(t *testing.T) {
	skipShort(t)
	parent := t
	alice := mustSession(t, userToken("alice@example.com"))
	bob := mustSession(t, userToken("bob"))
	admin := mustSession(t, adminToken("root"))

	t.Run("every tool is listed with an input schema and a description", func(t *testing.T) {
		g := NewWithT(t)
		res, err := alice.ListTools(boundedCtx(t), nil)
		g.Expect(err).NotTo(HaveOccurred())
		names := map[string]bool{}
		for _, tl := range res.Tools {
			names[tl.Name] = true
			g.Expect(tl.Description).NotTo(BeEmpty(), tl.Name)
			g.Expect(tl.InputSchema).NotTo(BeNil(), tl.Name)
			g.Expect(tl.OutputSchema).NotTo(BeNil(), tl.Name)
		}
		for _, n := range []string{"list_templates", "spawn_workspace", "list_workspaces", "get_workspace", "delete_workspace", "upgrade_workspace", "upgrade_all_workspaces", "get_workspace_events"} {
			g.Expect(names).To(HaveKey(n))
		}
	})

	t.Run("list_templates shows the registry", func(t *testing.T) {
		g := NewWithT(t)
		var out struct{ Templates []frontend.TemplateInfo }
		g.Expect(call(t, alice, "list_templates", nil, &out)).To(BeEmpty())
		g.Expect(out.Templates).To(ContainElement(HaveField("Name", "python")))
	})

	var spawned frontend.Workspace
	t.Run("spawn_workspace returns at once and the pod exists, Pending, owned by the caller", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(call(t, alice, "spawn_workspace", map[string]any{"template": "python", "name": "My Project", "context": map[string]string{"repo": "https://example.com/r.git"}}, &spawned)).To(BeEmpty())
		g.Expect(spawned.ID).To(Equal("my-project"))
		g.Expect(spawned.Owner).To(Equal("alice@example.com"))
		g.Expect(spawned.Phase).To(Equal(workspace.PhaseScheduling))
		p, err := getPod(t, spawned.ActivePod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Annotations[workspace.AnnOwner]).To(Equal("alice@example.com"))
		parent.Cleanup(func() { _ = env.k8s.Delete(context.Background(), p) })
		waitCached(t, p.Name)
	})
	bobPod := seed(t, "bob", "bobs-box", "1.0")

	t.Run("list_workspaces shows only the caller's own workspaces", func(t *testing.T) {
		g := NewWithT(t)
		var out struct{ Workspaces []frontend.Workspace }
		g.Expect(call(t, alice, "list_workspaces", nil, &out)).To(BeEmpty())
		g.Expect(out.Workspaces).To(HaveLen(1))
		g.Expect(out.Workspaces[0].ID).To(Equal("my-project"))
		g.Expect(out.Workspaces[0].LatestTemplateVersion).To(Equal("1.0"))
		g.Expect(out.Workspaces[0].IsOutdated).To(BeFalse())
		g.Expect(call(t, bob, "list_workspaces", nil, &out)).To(BeEmpty())
		g.Expect(out.Workspaces).To(ConsistOf(HaveField("ID", "bobs-box")))
	})
	t.Run("list_workspaces allUsers is for admins only", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(call(t, alice, "list_workspaces", map[string]any{"allUsers": true}, nil)).To(ContainSubstring("Forbidden"))
		var out struct{ Workspaces []frontend.Workspace }
		g.Expect(call(t, admin, "list_workspaces", map[string]any{"allUsers": true}, &out)).To(BeEmpty())
		g.Expect(out.Workspaces).To(ContainElements(HaveField("ID", "bobs-box"), HaveField("ID", "my-project")))

		var page struct {
			Workspaces []frontend.Workspace
			Continue   string
		}
		g.Expect(call(t, admin, "list_workspaces", map[string]any{"allUsers": true, "limit": 1}, &page)).To(BeEmpty())
		g.Expect(page.Workspaces).To(HaveLen(1))
		g.Expect(page.Continue).NotTo(BeEmpty())
		first, firstID := page.Continue, page.Workspaces[0].ID
		page.Continue = ""
		g.Expect(call(t, admin, "list_workspaces", map[string]any{"allUsers": true, "limit": 1, "continue": first}, &page)).To(BeEmpty())
		g.Expect(page.Workspaces).To(HaveLen(1))
		g.Expect(page.Workspaces[0].ID > firstID).To(BeTrue(), "the second page %q starts after %q", page.Workspaces[0].ID, firstID)
		g.Expect(call(t, alice, "list_workspaces", map[string]any{"colour": "red"}, nil)).To(ContainSubstring("colour"))
		g.Expect(call(t, alice, "list_workspaces", map[string]any{"limit": "ten"}, nil)).To(ContainSubstring("limit"))
		g.Expect(call(t, admin, "list_workspaces", map[string]any{"allUsers": true, "limit": 1001}, nil)).To(And(ContainSubstring("limit 1001"), ContainSubstring("1 to 1000")))
		g.Expect(call(t, admin, "list_workspaces", map[string]any{"allUsers": true, "continue": "bobs-box"}, nil)).To(And(ContainSubstring(`continue "bobs-box"`), ContainSubstring("unchanged")))
		g.Expect(call(t, admin, "list_workspaces", map[string]any{"continue": first}, nil)).To(ContainSubstring("allUsers=true"))
	})
	t.Run("get_workspace: own allowed, another user's refused, admin allowed", func(t *testing.T) {
		g := NewWithT(t)
		var w frontend.Workspace
		g.Expect(call(t, alice, "get_workspace", map[string]any{"id": "my-project"}, &w)).To(BeEmpty())
		g.Expect(w.WorkspacePath).To(Equal(spawned.WorkspacePath))
		g.Expect(call(t, alice, "get_workspace", map[string]any{"id": "bobs-box"}, nil)).To(HavePrefix(frontend.MsgAccessDenied))
		g.Expect(call(t, admin, "get_workspace", map[string]any{"id": "bobs-box"}, &w)).To(BeEmpty())
		g.Expect(w.Owner).To(Equal("bob"))
		g.Expect(call(t, alice, "get_workspace", map[string]any{"id": "nope"}, nil)).To(ContainSubstring("not found"))
	})

	env.templates.setVersion("python", "2.0")
	t.Cleanup(func() { env.templates.setVersion("python", "1.0") })

	t.Run("an outdated workspace says so", func(t *testing.T) {
		g := NewWithT(t)
		var w frontend.Workspace
		g.Expect(call(t, alice, "get_workspace", map[string]any{"id": "my-project"}, &w)).To(BeEmpty())
		g.Expect(w.IsOutdated).To(BeTrue())
		g.Expect(w.LatestTemplateVersion).To(Equal("2.0"))
	})
	t.Run("upgrade_workspace of another user's workspace by a non-admin is Access Denied and writes nothing", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(call(t, alice, "upgrade_workspace", map[string]any{"id": "bobs-box"}, nil)).To(HavePrefix("Access Denied"))
		p, err := getPod(t, bobPod.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
	})
	t.Run("upgrade_workspace with dryRun says an upgrade to a version that does not render would fail, and writes nothing", func(t *testing.T) {
		// The test's template has no spec: rendering it fails, as a broken version would. (The
		// e2e spec "Updates: pin, dry run, ..." previews a real version with its changes.)
		g := NewWithT(t)
		g.Expect(call(t, alice, "upgrade_workspace", map[string]any{"id": "my-project", "dryRun": true}, nil)).To(
			And(ContainSubstring("does not render"), ContainSubstring("so an upgrade would fail")))
		old, err := getPod(t, spawned.ActivePod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested), "a dry run writes nothing")
		g.Expect(call(t, alice, "upgrade_workspace", map[string]any{"id": "my-project", "version": "0.1"}, nil)).To(ContainSubstring("only admin users"))
	})
	t.Run("upgrade_workspace returns at once with the pod the controller will create, which does not exist yet", func(t *testing.T) {
		g := NewWithT(t)
		var r frontend.UpgradeResult
		g.Expect(call(t, alice, "upgrade_workspace", map[string]any{"id": "my-project"}, &r)).To(BeEmpty())
		old, err := getPod(t, spawned.ActivePod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Status).To(Equal("upgrading"))
		g.Expect(r.PodName).To(Equal(workspace.NextPodName(old, "2.0")))
		g.Expect(old.Annotations[workspace.AnnUpgradePod]).To(Equal(r.PodName))
		_, err = time.Parse(time.RFC3339, old.Annotations[workspace.AnnUpgradeRequested])
		g.Expect(err).NotTo(HaveOccurred())
		_, err = getPod(t, r.PodName)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the upgraded pod must not exist when the call returns")
	})
	t.Run("upgrade_all_workspaces by a non-admin is Forbidden", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(call(t, bob, "upgrade_all_workspaces", nil, nil)).To(Equal(frontend.MsgUpgradeAllForAdmin))
		p, _ := getPod(t, bobPod.Name)
		g.Expect(p.Annotations).NotTo(HaveKey(workspace.AnnUpgradeRequested))
	})
	t.Run("an admin's upgrade_all touches every user's outdated workspaces and keeps their owners", func(t *testing.T) {
		g := NewWithT(t)
		var out struct{ Upgrades []frontend.UpgradeResult }
		g.Expect(call(t, admin, "upgrade_all_workspaces", nil, &out)).To(BeEmpty())
		g.Expect(out.Upgrades).To(ContainElements(
			And(HaveField("ID", "bobs-box"), HaveField("Owner", "bob"), HaveField("Status", "upgrading")),
			And(HaveField("ID", "my-project"), HaveField("Owner", "alice@example.com"), HaveField("Status", "upgrading")),
		))
		p, _ := getPod(t, bobPod.Name)
		g.Expect(p.Annotations).To(HaveKey(workspace.AnnUpgradeRequested))
		g.Expect(p.Annotations[workspace.AnnOwner]).To(Equal("bob"))
		g.Expect(p.Annotations[workspace.AnnUpgradePod]).To(HavePrefix(workspace.PodName("bob", "bobs-box")))
	})
	t.Run("set_workspace_maintenance is for admins only", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(call(t, bob, "set_workspace_maintenance", map[string]any{"id": "bobs-box", "reason": "x"}, nil)).To(ContainSubstring("Forbidden"))
		g.Expect(call(t, admin, "set_workspace_maintenance", map[string]any{"id": "bobs-box", "reason": "disk repair"}, nil)).To(BeEmpty())
		p, _ := getPod(t, bobPod.Name)
		g.Expect(p.Annotations[workspace.AnnMaintenance]).To(Equal("disk repair"))
		g.Expect(call(t, admin, "set_workspace_maintenance", map[string]any{"id": "bobs-box"}, nil)).To(BeEmpty())
		p, _ = getPod(t, bobPod.Name)
		g.Expect(p.Annotations).NotTo(HaveKey(workspace.AnnMaintenance))
	})
	t.Run("get_workspace_events lists the workspace's events and follows new ones as notifications", func(t *testing.T) {
		g := NewWithT(t)
		addEvent(t, spawned.ActivePod, "UpgradeStarted", "upgrading to 2.0")
		addEvent(t, bobPod.Name, "Scheduled", "not alice's")
		var out struct{ Events []frontend.Event }
		g.Expect(call(t, alice, "get_workspace_events", map[string]any{"id": "my-project"}, &out)).To(BeEmpty())
		g.Expect(out.Events).To(ConsistOf(HaveField("Reason", "UpgradeStarted")))
		g.Expect(call(t, alice, "get_workspace_events", map[string]any{"id": "bobs-box"}, nil)).To(HavePrefix("Access Denied"))

		var mu sync.Mutex
		var progress []string
		follower, err := mcpSession(t, userToken("alice@example.com"), &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				defer mu.Unlock()
				progress = append(progress, r.Params.Message)
			},
		})
		g.Expect(err).NotTo(HaveOccurred())
		type result struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan result, 1)
		ctx := boundedCtx(t)
		go func() {
			res, err := follower.CallTool(ctx, &mcp.CallToolParams{
				Name: "get_workspace_events", Arguments: map[string]any{"id": "my-project", "follow": true, "timeoutSeconds": 120, "until": []string{"UpgradeSucceeded", "UpgradeFailed"}},
				Meta: mcp.Meta{"progressToken": "ev-1"},
			})
			done <- result{res, err}
		}()
		// The past event arrives first; then a new one is streamed while the call is open.
		g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(progress) }, 30*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 1))
		addEvent(t, spawned.ActivePod, "UpgradeSucceeded", "now on 2.0")
		g.Eventually(func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(progress, "\n") }, 30*time.Second, 50*time.Millisecond).Should(ContainSubstring("UpgradeSucceeded"))
		// UpgradeSucceeded is listed in until: the call ends with it, long before its timeout.
		var r result
		g.Eventually(done, 30*time.Second).Should(Receive(&r))
		g.Expect(r.err).NotTo(HaveOccurred())
		g.Expect(r.res.IsError).To(BeFalse())
		raw, _ := json.Marshal(r.res.StructuredContent)
		g.Expect(string(raw)).To(And(ContainSubstring("UpgradeStarted"), ContainSubstring("UpgradeSucceeded"), ContainSubstring(`"ended":"until"`)))

		// Without until, a follow ends at its timeout with what it saw.
		var out2 struct {
			Events []frontend.Event
			Ended  string
		}
		g.Expect(call(t, alice, "get_workspace_events", map[string]any{"id": "my-project", "follow": true, "timeoutSeconds": 1}, &out2)).To(BeEmpty())
		g.Expect(out2.Ended).To(Equal("timeout"))
		g.Expect(out2.Events).To(ContainElements(HaveField("Reason", "UpgradeStarted"), HaveField("Reason", "UpgradeSucceeded")))
		g.Expect(call(t, alice, "get_workspace_events", map[string]any{"id": "my-project", "follow": true, "until": []string{"not a reason"}}, nil)).To(ContainSubstring("until"))
	})
	t.Run("delete_workspace: another user's refused, own deleted", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(call(t, alice, "delete_workspace", map[string]any{"id": "bobs-box"}, nil)).To(HavePrefix("Access Denied"))
		_, err := getPod(t, bobPod.Name)
		g.Expect(err).NotTo(HaveOccurred())
		var r frontend.DeleteResult
		g.Expect(call(t, alice, "delete_workspace", map[string]any{"id": "my-project"}, &r)).To(BeEmpty())
		g.Expect(r.Pods).To(ConsistOf(spawned.ActivePod))
		g.Eventually(func() bool { _, err := getPod(t, spawned.ActivePod); return apierrors.IsNotFound(err) }, 30*time.Second, 50*time.Millisecond).Should(BeTrue())
	})
}

func addEvent(t *testing.T, pod, reason, msg string) {
	t.Helper()
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeNormal,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "nogoo9"},
	}
	if err := env.k8s.Create(context.Background(), ev); err != nil {
		t.Fatalf("create event: %v", err)
	}
	t.Cleanup(func() { _ = env.k8s.Delete(context.Background(), ev) })
}

func TestMCPBadInputCreatesNothing(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	s := mustSession(t, userToken("carol"))
	before := podCount(t)
	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"unknown template", map[string]any{"template": "cobol", "id": "x1", "context": map[string]string{"repo": "r"}}, `template "cobol" not found`},
		{"bad workspace id", map[string]any{"template": "python", "id": "Not_An_ID", "context": map[string]string{"repo": "r"}}, `workspace id "Not_An_ID" is not valid`},
		{"missing template field", map[string]any{"id": "x2"}, "template"},
		{"missing required context", map[string]any{"template": "python", "id": "x3"}, `context value "repo" is required`},
		{"neither id nor name", map[string]any{"template": "python", "context": map[string]string{"repo": "r"}}, "give an id"},
		{"wrong type", map[string]any{"template": 7}, "template"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := call(t, s, "spawn_workspace", tc.args, nil)
			g.Expect(got).To(ContainSubstring(tc.want))
		})
	}
	g.Expect(call(t, s, "get_workspace", map[string]any{}, nil)).To(ContainSubstring("id"))
	g.Expect(call(t, s, "get_workspace_events", map[string]any{"id": "x", "timeoutSeconds": 9999}, nil)).To(ContainSubstring("timeoutSeconds"))
	g.Expect(podCount(t)).To(Equal(before))

	t.Run("malformed JSON-RPC and oversized bodies get a 4xx, not a crash", func(t *testing.T) {
		g := NewWithT(t)
		for name, body := range map[string]string{
			"not JSON":          `{"jsonrpc":"2.0",`,
			"not a request":     `[1,2,3]`,
			"unknown version":   `{"jsonrpc":"1.0","id":1,"method":"tools/list"}`,
			"oversized request": `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`,
		} {
			req, _ := http.NewRequest("POST", env.server.URL+"/mcp", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+userToken("carol"))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := httpc.Do(req)
			g.Expect(err).NotTo(HaveOccurred(), name)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			g.Expect(resp.StatusCode).To(And(BeNumerically(">=", 400), BeNumerically("<", 500)), fmt.Sprintf("%s: %d %s", name, resp.StatusCode, raw))
		}
	})
	g.Expect(podCount(t)).To(Equal(before))
}
