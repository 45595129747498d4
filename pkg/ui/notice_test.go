package ui

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/session"
)

// The confirmation after a redirect names the workspace, says what was done, and is only ever one
// of the fixed texts: neither an unknown done= nor an id that is not a workspace id puts text of
// the link's choosing on the page, and the id is shown only when nogoo9 signed it for the session
// (a link naming a workspace that is none, "nogoo9-has-moved-...", shows no notice).
func TestNoticeSaysOnlyFixedTexts(t *testing.T) {
	const csrf = "the-sessions-csrf-token"
	r := &request{sess: &session.Session{Caller: &auth.Caller{Subject: "alice"}, CSRF: csrf}}
	for done, want := range map[string]string{
		"created":         "Workspace a1 is being created",
		"deleted":         "Workspace a1 is being deleted",
		"upgrading":       "Upgrade of workspace a1 requested.",
		"stopping":        "Workspace a1 is stopping",
		"starting":        "Workspace a1 is starting.",
		"maintenance-on":  "Workspace a1 is in maintenance.",
		"maintenance-off": "Workspace a1 is back in service.",
		"pinned":          "Workspace a1 is pinned to its version.",
		"unpinned":        "Workspace a1 is no longer pinned.",
	} {
		if got := notice(httptest.NewRequest("GET", doneURL(r, "/", done, "a1"), nil), csrf); !strings.HasPrefix(got, want) {
			t.Errorf("done=%s: notice %q, want it to start with %q", done, got, want)
		}
	}
	for _, tc := range []struct{ name, query string }{
		{"an unknown done=", "done=%3Cb%3Ehi&id=a1&sig=" + noticeSig(csrf, "<b>hi", "a1")},
		{"an id that is not a workspace id", "done=created&id=%3Cscript%3E&sig=" + noticeSig(csrf, "created", "<script>")},
		{"an unsigned id", "done=deleted&id=nogoo9-has-moved-to-corp-login"},
		{"an id signed for another session", "done=deleted&id=a1&sig=" + noticeSig("another-sessions-token", "deleted", "a1")},
		{"a signature of another confirmation", "done=deleted&id=a1&sig=" + url.QueryEscape(noticeSig(csrf, "created", "a1"))},
	} {
		if got := notice(httptest.NewRequest("GET", "/?"+tc.query, nil), csrf); got != "" {
			t.Errorf("%s gave the notice %q, want none", tc.name, got)
		}
	}
}
