package ui

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// A live stream holds one of a small number of places: a user's live lists (MaxListStreams) and
// the event follows of a workspace's page (the service's follow limit, shared with REST and MCP).
// A GET is not checked by the cross-origin protection, and the session cookie (SameSite=Strict)
// goes with requests from the same site: a workspace's page on another host or port of the site
// could open the viewer's streams until none were left, and the viewer's own pages (and their
// REST and MCP follows) were refused. Now a stream request that the browser says comes from
// another origin is refused (403) before it takes a place.
func TestStreamsFromOtherOriginsTakeNoSlot(t *testing.T) {
	f := newFixtureConfig(t, Options{InsecureCookie: true, MaxListStreams: 1}, nil,
		func(c *frontend.Config) { c.MaxFollowsPerUser = 1 }, wsPod("alice", "a1", "1.0", true))
	alice := f.browser(t)
	alice.login("alice-token")
	for _, path := range []string{"/stream", "/workspaces/a1/stream"} {
		for _, site := range []string{"same-site", "cross-site"} {
			for range 3 { // more than the one place each
				resp, _ := alice.openStream(t, path, "Sec-Fetch-Site", site)
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("GET %s from a %s page: %s (%s), want 403 before the stream takes a place", path, site, resp.Status, resp.Header.Get("Content-Type"))
				}
				if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), "another origin") {
					t.Fatalf("GET %s from a %s page: %s %q, want 403 saying the stream is not served to another origin", path, site, resp.Status, body)
				}
			}
		}
		// The viewer's own page still gets its stream: nothing took its place.
		read, _ := alice.stream(t, path, "Sec-Fetch-Site", "same-origin")
		read(": connected")
	}
	// A navigation typed into the address bar (Sec-Fetch-Site: none) is not another origin's page
	// (nor is a client that sends no Sec-Fetch-Site: the other tests' streams).
	bob := f.browser(t)
	bob.login("bob-token")
	read, _ := bob.stream(t, "/stream", "Sec-Fetch-Site", "none")
	read(": connected")
}
