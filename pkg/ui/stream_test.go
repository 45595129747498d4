package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// An event's data is HTML holding text tenants write (a workspace's name, a container's
// termination message). A browser's event-stream parser ends a line at CR, LF or CRLF, so a CR in
// that text must not reach the stream, or it ends the data line and starts a field of the
// writer's choosing (retry: stalls the reconnect, id: forges the position, a blank line ends the
// event). Before stop 48 only a CR before LF was removed.
func TestAnEventsDataCannotStartAFieldOfItsOwn(t *testing.T) {
	for _, tc := range []struct{ name, html string }{
		{"bare CRs", "<td>x\r\rretry: 2147483647\rid: 18446744073709551615\rdata: <b>forged</b>\r</td>"},
		{"CRLF and LF", "<td>x\r\nretry: 1\nid: 9\r\n</td>"},
		{"a CR at the end", "<td>x</td>\r"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if err := (&sse{w: rec, f: rec}).send(7, []byte(tc.html)); err != nil {
				t.Fatal(err)
			}
			body := rec.Body.String()
			if strings.Contains(body, "\r") {
				t.Errorf("a CR reached the stream: %q", body)
			}
			// Read it as an EventSource does: every line is a field of one event.
			lines := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n")
			if lines[0] != "id: 7" || lines[1] != "event: update" {
				t.Fatalf("event starts %q, want id: 7 then event: update", lines[:2])
			}
			var data []string
			for _, l := range lines[2:] {
				v, ok := strings.CutPrefix(l, "data: ")
				if !ok {
					t.Fatalf("line %q is not a data line: the text started a field of its own in %q", l, body)
				}
				data = append(data, v)
			}
			want := strings.ReplaceAll(strings.ReplaceAll(tc.html, "\r\n", "\n"), "\r", "\n")
			if got := strings.Join(data, "\n"); got != want {
				t.Errorf("the browser rebuilds %q, want %q (the HTML, CRs as line ends)", got, want)
			}
		})
	}
}

// openListStream opens b's list stream and returns its answer; closing its body ends the stream.
func openListStream(t *testing.T, b *browser) *http.Response {
	t.Helper()
	resp, _ := b.openStream(t, "/stream")
	return resp
}

// Each live list holds a subscription, a goroutine and a connection for up to 30 minutes and reads
// its rows back on every change: one user (over all their sessions) keeps at most MaxListStreams
// open, another user is not affected, and a stream that ends gives its place back. Before stop 49
// a user could open as many as they liked (a workspace page's stream was bounded by the service,
// the list's by nothing).
func TestOneUsersLiveListsAreBoundedAndEndingOneFreesItsPlace(t *testing.T) {
	const max = 3
	f := newFixture(t, Options{InsecureCookie: true, MaxListStreams: max})
	alice, aliceElsewhere, bob := f.browser(t), f.browser(t), f.browser(t)
	alice.login("alice-token")
	aliceElsewhere.login("alice-token")
	bob.login("bob-token")
	var open []*http.Response
	for i := range max {
		resp := openListStream(t, alice)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("alice's list stream %d: %s, want 200", i+1, resp.Status)
		}
		open = append(open, resp)
	}
	for _, b := range []*browser{alice, aliceElsewhere} {
		// Refused as a stream that says why and closes (see refusedStream): a 429 is an error
		// to the browser's EventSource, which the page never shows and htmx retries forever.
		resp := openListStream(t, b)
		body, _ := io.ReadAll(resp.Body)
		if !refusedStream(resp, string(body), "you already have 3 live workspace lists open") {
			t.Fatalf("alice's stream %d (another session: %t): %s %q, want the refusal saying how many, then close", max+1, b == aliceElsewhere, resp.Status, body)
		}
	}
	if resp := openListStream(t, bob); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's list stream while alice holds %d: %s, want 200", max, resp.Status)
	}

	open[0].Body.Close() // the tab is closed: the server sees the connection end
	deadline := time.After(10 * time.Second)
	for {
		n, freed := f.ui.listStreams.holding("alice")
		if n < max {
			break
		}
		select {
		case <-freed:
		case <-deadline:
			t.Fatalf("alice still holds %d list streams 10 s after closing one", n)
		}
	}
	if resp := openListStream(t, aliceElsewhere); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's list stream after one ended: %s, want 200", resp.Status)
	}
}

// refusedStream reports whether resp and its whole body are a stream refused as the page can show
// it: an event stream (status 200, which an EventSource needs to read any event) whose update
// swaps the page's live-status banner with a message holding want, then the close event that
// makes htmx's SSE extension close the source instead of retrying, then the end.
func refusedStream(resp *http.Response, body, want string) bool {
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return false
	}
	banner := strings.Index(body, `id="live-status"`)
	closing := strings.Index(body, "event: close\ndata: ")
	return banner >= 0 && strings.Contains(body[banner:], want) && closing > banner && strings.HasSuffix(body, "\n\n") &&
		strings.Count(body[closing:], "event:") == 1
}

// A stream nogoo9 refuses (too many live lists, too many followed workspaces, a namespace it
// does not watch, no session: logged out in another tab, or the session expired) used to answer
// 4xx before the stream began: the EventSource failed without an event, htmx's SSE extension
// retried forever, and the page just stopped updating without a word. Now the refusal is a
// stream that shows why in the page's banner and closes; a page with a stream has the banner's
// slot and closes on that event.
func TestARefusedStreamSaysWhyInThePageAndStopsTheRetries(t *testing.T) {
	f := newFixtureConfig(t, Options{InsecureCookie: true}, nil, func(c *frontend.Config) { c.MaxFollowsPerUser = 1 }, wsPod("alice", "a1", "1.0", true))
	alice := f.browser(t)
	csrf := alice.login("alice-token")
	for _, path := range []string{"/", "/workspaces/a1"} {
		_, page := alice.do("GET", path, nil)
		if !strings.Contains(page, `sse-close="close"`) || !strings.Contains(page, `id="live-status"`) {
			t.Errorf("GET %s: its stream's element lacks sse-close=\"close\" or the page lacks the live-status banner:\n%s", path, page)
		}
	}
	refused := func(t *testing.T, b *browser, path, want string) {
		t.Helper()
		resp, _ := b.openStream(t, path)
		body, _ := io.ReadAll(resp.Body)
		if !refusedStream(resp, string(body), want) {
			t.Errorf("GET %s: %s %q, want the refusal saying %q, then close", path, resp.Status, body, want)
		}
	}
	t.Run("too many followed workspaces", func(t *testing.T) {
		read, _ := alice.pageStream(t, "/workspaces/a1")
		read("event: update") // holds alice's one follow
		refused(t, alice, "/workspaces/a1/stream", "you already follow 1 event streams")
	})
	t.Run("a namespace nogoo9 does not watch", func(t *testing.T) {
		refused(t, alice, "/stream?namespace=elsewhere", "not watched by nogoo9")
	})
	t.Run("a workspace that is none", func(t *testing.T) {
		refused(t, alice, "/workspaces/nope/stream", "Not found")
	})
	t.Run("no session", func(t *testing.T) {
		nobody := f.browser(t)
		for _, path := range []string{"/stream", "/workspaces/a1/stream"} {
			refused(t, nobody, path, "log in again")
		}
	})
	t.Run("logged out while the stream is open", func(t *testing.T) {
		other := f.browser(t)
		otherCSRF := other.login("alice-token")
		read, _ := other.pageStream(t, "/")
		read(": connected")
		if resp, _ := other.do("POST", "/logout", url.Values{"csrf": {otherCSRF}}); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout: %s", resp.Status)
		}
		f.hub.changed("a1")
		got := read("event: close\n")
		if !strings.Contains(got, `id="live-status"`) || !strings.Contains(got, "log in again") {
			t.Errorf("the stream of a session that ended did not say so before closing:\n%s", got)
		}
	})
	_ = csrf
}

// The hub names a changed workspace by its id label, which anyone who may write pods sets: an id
// the service refuses as malformed (CodeInvalid) made every open list of every user reload in
// full on each change of that one pod. Now it changes nothing on a list that does not show it.
func TestAPodWithAMalformedIDDoesNotReloadEveryList(t *testing.T) {
	bad := wsPod("bob", "x", "1.0", true)
	bad.Name = "ws-bad"
	bad.Labels[workspace.LabelWorkspaceID] = "Bad.ID"
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), bad)
	alice := f.browser(t)
	alice.login("alice-token")
	read, ctx := alice.pageStream(t, "/")
	read(": connected")
	f.hub.changed("Bad.ID")
	// Then a change of alice's own row: its update is the next thing her stream sends.
	var p corev1.Pod
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ws-a1"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Annotations[workspace.AnnWorkspaceName] = "renamed"
	if err := f.k8s.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	f.hub.changed("a1")
	got := read("renamed")
	if strings.Contains(got, `id="rows"`) {
		t.Errorf("a change of another user's pod with a malformed id reloaded alice's whole list:\n%s", got)
	}
	if !strings.Contains(got, `<tr id="ws-a1"`) {
		t.Errorf("alice's row update is missing:\n%s", got)
	}

	// The admin's list of every user's shows the workspace (its key is the hex of its namespace
	// and id): a change of it is read back with the whole list, not dropped.
	admin := f.browser(t)
	admin.login("admin-token")
	key := f.ui.rowKey(ns, "Bad.ID")
	_, page := admin.do("GET", "/?all=1", nil)
	if !strings.Contains(page, `<tr id="ws-`+key+`"`) {
		t.Fatalf("the admin's list does not show the workspace with the malformed id (row ws-%s):\n%s", key, page)
	}
	read, _ = admin.pageStream(t, "/?all=1")
	read("upgrade-all-slot") // the header's count, sent first
	f.hub.changed("Bad.ID")
	if got := read(`id="rows"`); !strings.Contains(got, `<tr id="ws-`+key+`"`) {
		t.Errorf("the admin's list lost the workspace with the malformed id:\n%s", got)
	}
}
