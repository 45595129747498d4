package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// chromiumPath is the browser the test drives, found as test/e2e finds it: $CHROMIUM, else
// chromium or chromium-browser on PATH (make test-integration installs Debian's when missing).
// A browser is no unit test's part: under -short the test skips itself, as the envtests do.
func chromiumPath(t *testing.T) string {
	if testing.Short() {
		t.Skip("integration test: drives Chromium (run without -short)")
	}
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run hack/install-chromium.sh (make test-integration runs it), or set CHROMIUM to a Chromium binary")
	return ""
}

// The attack of TestStreamsFromOtherOriginsTakeNoSlot in a real browser: a workspace's page on
// another port of the UI's host (the same site: Chromium sends the SameSite=Strict session
// cookie along) opens EventSources to the UI's list stream with credentials. Before, each took
// one of the viewer's live lists, and the viewer's own list, opened in another tab, said "you
// already have 2 live workspace lists open" and stopped updating. Now they are refused before
// taking a place, and the viewer's list follows a rename live.
func TestAWorkspacePageOnTheSameSiteCannotTakeTheViewersLiveLists(t *testing.T) {
	chromium := chromiumPath(t)
	f := newFixture(t, Options{InsecureCookie: true, MaxListStreams: 2}, wsPod("alice", "a1", "1.0", true))
	// The UI on its own server, which tells the test when it answers a stream request from
	// another origin of the site (the workspace's page).
	foreign := make(chan int, 64)
	ui := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stream") && r.Header.Get("Sec-Fetch-Site") == "same-site" {
			w = &statusTap{ResponseWriter: w, tap: foreign}
		}
		f.ui.Handler().ServeHTTP(w, r)
	}))
	defer ui.Close()
	const opened = 4
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>a workspace</title><script>for (let i = 0; i < %d; i++) new EventSource(%q, {withCredentials: true});</script>`, opened, ui.URL+"/stream")
	}))
	defer evil.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	if err := chromedp.Do(browser); err != nil { // starts the browser: a timeout here would stop it
		t.Fatalf("start chromium: %v", err)
	}
	do := func(tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			short, cancel := context.WithTimeout(tab, 5*time.Second)
			defer cancel()
			html, herr := chromedp.Run(short, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
			if herr != nil {
				html = herr.Error()
			}
			t.Fatalf("in the browser: %v\npage:\n%s", err, html)
		}
	}

	do(browser, chromedp.Navigate(ui.URL+"/login"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "alice-token"), chromedp.Click(chromedp.ID("dev-login")),
		chromedp.WaitVisible(chromedp.ID("ws-a1")))
	// The workspace's page, in this tab, stays open.
	do(browser, chromedp.Navigate(evil.URL))
	deadline := time.After(20 * time.Second)
	for n := 0; n < opened; n++ {
		select {
		case <-foreign:
		case <-deadline:
			t.Fatalf("the workspace's page made %d of its %d stream requests to the UI in 20 s", n, opened)
		}
	}
	// The viewer's list in another tab (same profile, same session).
	list, cancelList := chromedp.NewContext(browser)
	defer cancelList()
	if err := chromedp.Do(list); err != nil { // opens the tab: a timeout here would close it
		t.Fatalf("open a tab: %v", err)
	}
	do(list, chromedp.Navigate(ui.URL+"/"), chromedp.WaitVisible(chromedp.ID("ws-a1")))
	var p corev1.Pod
	ctx := context.Background()
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ws-a1"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Annotations[workspace.AnnWorkspaceName] = "renamed-live"
	if err := f.k8s.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	f.hub.changed("a1")
	do(list, chromedp.Poll[chromedp.Void](`document.getElementById("ws-a1") && document.getElementById("ws-a1").innerText.includes("renamed-live")`,
		chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(15*time.Second)))
	if n, _ := f.ui.listStreams.holding("alice"); n != 1 {
		t.Errorf("alice holds %d live lists, want 1 (her own tab's)", n)
	}
}

// statusTap sends each answer's status to tap when it is written.
type statusTap struct {
	http.ResponseWriter
	tap chan<- int
}

func (s *statusTap) WriteHeader(code int) {
	s.tap <- code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusTap) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
