package ui

import (
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// replayInformer hands its pods to a handler as the cache's informer does at start, then reports
// synced: the service's views are then built as in production.
type replayInformer []*corev1.Pod

type syncedRegistration struct {
	toolscache.ResourceEventHandlerRegistration
}

func (syncedRegistration) HasSynced() bool { return true }

func (r replayInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	for _, p := range r {
		h.OnAdd(p, true)
	}
	return syncedRegistration{}, nil
}

// BenchmarkListPage is the first paint of the workspace list: one GET of the full HTML page over
// loopback, with n workspaces (every user's, as an admin sees them; a third outdated). It reports
// the page's bytes and the embedded assets' bytes (the page weight). Run by `make bench`:
//
//	go test -run '^$' -bench BenchmarkListPage -benchtime 20x ./pkg/ui/
func BenchmarkListPage(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("workspaces=%d", n), func(b *testing.B) {
			pods := make([]*corev1.Pod, n)
			for i := range pods {
				v := "2.0"
				if i%3 == 0 {
					v = "1.0"
				}
				pods[i] = wsPod(fmt.Sprintf("user-%d", i%50), fmt.Sprintf("ws-%04d", i), v, true)
			}
			f := newFixtureWith(b, Options{InsecureCookie: true}, replayInformer(pods), pods...)
			jar, _ := cookiejar.New(nil)
			// Log in once, outside the measurement.
			c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := c.Get(f.srv.URL + "/login")
			if err != nil {
				b.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			lc := loginCSRFRe.FindStringSubmatch(string(page))[1]
			req, _ := http.NewRequest("POST", f.srv.URL+"/login", strings.NewReader(url.Values{"token": {"admin-token"}, "login_csrf": {lc}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if resp, err = c.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
				b.Fatalf("login: %v %v", resp.Status, err)
			}
			resp.Body.Close()
			var size int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := c.Get(f.srv.URL + "/?all=1")
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`id="ws-ws-%04d"`, n-1)) {
					b.Fatalf("list page: %s, %d bytes, last row missing", resp.Status, len(body))
				}
				size = len(body)
			}
			b.StopTimer()
			b.ReportMetric(float64(size), "page-bytes")
			b.ReportMetric(float64(assetBytes()), "asset-bytes")
		})
	}
}

// assetBytes is what a first visit downloads besides the page: every embedded asset.
func assetBytes() int {
	total := 0
	_ = fs.WalkDir(staticFS, "static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, ".md") && !strings.Contains(path, "LICENSE") {
			data, _ := staticFS.ReadFile(path)
			total += len(data)
		}
		return nil
	})
	return total
}
