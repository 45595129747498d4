package ui

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// routedPod is a ready workspace of alice's with the paths the spawner stamps on a new workspace:
// /ws/<ns>/<id>/ and /preview/<ns>/<id>/.
func routedPod(id string) *corev1.Pod {
	p := wsPod("alice", id, "1.0", true)
	p.Annotations[workspace.AnnWorkspacePath] = workspace.WorkspacePath(ns, id)
	p.Annotations[workspace.AnnPreviewPath] = workspace.PreviewPath(ns, id)
	return p
}

// openAndPreview returns the Open and Preview links the list page and the workspace's page of
// workspace a1 show to alice, for o.
func openAndPreview(t *testing.T, o Options) (list, page string) {
	t.Helper()
	f := newFixture(t, o, routedPod("a1"))
	b := f.browser(t)
	b.login("alice-token")
	_, list = b.do("GET", "/", nil)
	_, page = b.do("GET", "/workspaces/a1", nil)
	return list, page
}

func TestWithWorkspaceOriginsOpenAndPreviewLinkToTheWorkspacesOwnHosts(t *testing.T) {
	origins, err := workspace.ParseOrigins("https://ws.example.com")
	if err != nil {
		t.Fatal(err)
	}
	wsLabel, previewLabel := workspace.Label(ns, "a1", false), workspace.Label(ns, "a1", true)
	if !strings.HasPrefix(wsLabel, "a1-") || !strings.HasPrefix(previewLabel, "a1-p-") || wsLabel == previewLabel {
		t.Fatalf("labels %q and %q: want a1-<hash> and a1-p-<hash>", wsLabel, previewLabel)
	}
	open := `href="https://` + wsLabel + `.ws.example.com/ws/ns/a1/"`
	preview := `href="https://` + previewLabel + `.ws.example.com/preview/ns/a1/"`
	// Origins wins over --ui-proxy-url (and over the proxy's port on the UI's host).
	list, page := openAndPreview(t, Options{InsecureCookie: true, Origins: origins, ProxyURL: "https://proxy.example.com", ProxyPort: "8091"})
	for name, html := range map[string]string{"list": list, "workspace page": page} {
		for _, want := range []string{open, preview} {
			if !strings.Contains(html, want) {
				t.Errorf("the %s lacks %s:\n%s", name, want, html)
			}
		}
		if strings.Contains(html, "proxy.example.com") || strings.Contains(html, ":8091") {
			t.Errorf("the %s still links to the path-routed proxy:\n%s", name, html)
		}
	}
}

func TestWithoutWorkspaceOriginsLinksStayOnTheProxysBaseURL(t *testing.T) {
	list, page := openAndPreview(t, Options{InsecureCookie: true, ProxyURL: "https://proxy.example.com/"})
	for name, html := range map[string]string{"list": list, "workspace page": page} {
		for _, want := range []string{`href="https://proxy.example.com/ws/ns/a1/"`, `href="https://proxy.example.com/preview/ns/a1/"`} {
			if !strings.Contains(html, want) {
				t.Errorf("the %s lacks %s:\n%s", name, want, html)
			}
		}
		if strings.Contains(html, "ws.example.com") {
			t.Errorf("the %s links to a workspace host without Origins:\n%s", name, html)
		}
	}
}
