package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
		resp := openListStream(t, b)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("alice's stream %d (another session: %t): %s, want 429", max+1, b == aliceElsewhere, resp.Status)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), "you already have 3 live workspace lists open") {
			t.Fatalf("alice's stream %d (another session: %t): %s %q, want 429 saying how many", max+1, b == aliceElsewhere, resp.Status, body)
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
