package ui

import (
	"fmt"
	"html"
	"net/url"
	"regexp"
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

// A workspace's Open and Preview links are the proxy's route prefix for its path annotations
// (workspace.RoutePrefix, the proxy's own rules), never the annotation itself: a tenant or a
// template's author writes the annotation, and "@evil.example/" after a base URL made the link
// https://ws.example.com@evil.example/ (user info, then another host). An annotation the proxy
// routes nothing for gets no link. Before stop 51 the annotation was appended as written.
func TestOpenAndPreviewLinksNeverLeaveTheProxysHost(t *testing.T) {
	origins, err := workspace.ParseOrigins("https://ws.example.com")
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{"@evil.example/", ".evil.example/", "evil.example/", ":443@evil.example/", "/a/%2e%2e/", "/a?x=@evil.example/", "/_nogoo9/login/", "/", ""}
	hrefRe := regexp.MustCompile(`href="([^"]*)"`)
	for name, o := range map[string]Options{
		"ProxyURL":  {InsecureCookie: true, ProxyURL: "https://ws.example.com"},
		"ProxyPort": {InsecureCookie: true, ProxyPort: "8091"},
		"Origins":   {InsecureCookie: true, Origins: origins},
	} {
		t.Run(name, func(t *testing.T) {
			var pods []*corev1.Pod
			for i, p := range hostile {
				pod := wsPod("alice", fmt.Sprintf("h%d", i), "1.0", true)
				pod.Annotations[workspace.AnnWorkspacePath] = p
				pod.Annotations[workspace.AnnPreviewPath] = p
				pods = append(pods, pod)
			}
			// A path the proxy cleans (it routes "/ws/a/b/" for it): the link is the clean one.
			unclean := wsPod("alice", "unclean", "1.0", true)
			unclean.Annotations[workspace.AnnWorkspacePath] = "/ws//a/./b"
			f := newFixture(t, o, append(pods, routedPod("good"), unclean)...)
			b := f.browser(t)
			b.login("alice-token")
			proxyHost := func(u *url.URL) bool {
				switch name {
				case "Origins":
					return strings.HasSuffix(u.Host, ".ws.example.com") && strings.Count(u.Host, ".") == 3
				case "ProxyPort":
					want, _ := url.Parse(f.srv.URL)
					return u.Host == want.Hostname()+":8091"
				}
				return u.Host == "ws.example.com"
			}
			pages := map[string]string{}
			_, pages["the list"] = b.do("GET", "/", nil)
			for i := range hostile {
				_, pages[fmt.Sprintf("h%d's page", i)] = b.do("GET", fmt.Sprintf("/workspaces/h%d", i), nil)
			}
			read, _ := b.pageStream(t, "/")
			read(": connected")
			f.hub.changed("h0")
			pages["the stream's row"] = read("</template>")
			links := 0
			for what, page := range pages {
				for _, m := range hrefRe.FindAllStringSubmatch(page, -1) {
					href := html.UnescapeString(m[1])
					if strings.HasPrefix(href, "#") || strings.HasPrefix(href, "/") && !strings.HasPrefix(href, "//") {
						continue // a page of the UI's own
					}
					u, err := url.Parse(href)
					if err != nil || u.User != nil || !proxyHost(u) || !strings.HasPrefix(u.Path, "/") {
						t.Errorf("%s links to %q, outside the proxy's host", what, href)
						continue
					}
					if !strings.HasPrefix(u.Path, "/ws/") && !strings.HasPrefix(u.Path, "/preview/") {
						t.Errorf("%s links to %q: a hostile annotation got a link", what, href)
					}
					links++
				}
			}
			list := pages["the list"]
			if !strings.Contains(list, "/ws/ns/good/") || !strings.Contains(list, "/preview/ns/good/") {
				t.Errorf("the well-formed workspace lost its links:\n%s", list)
			}
			if !strings.Contains(list, `/ws/a/b/"`) || strings.Contains(list, "/ws//a") {
				t.Errorf("the unclean path is not linked as the proxy's clean prefix /ws/a/b/:\n%s", list)
			}
			if links < 3 {
				t.Fatalf("only %d links found: the check is broken", links)
			}
		})
	}
}
