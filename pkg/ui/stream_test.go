package ui

import (
	"net/http/httptest"
	"strings"
	"testing"
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
