package ui

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The confirmation after a redirect names the workspace, says what was done, and is only ever one
// of the fixed texts: neither an unknown done= nor an id that is not a workspace id puts text of
// the link's choosing on the page.
func TestNoticeSaysOnlyFixedTexts(t *testing.T) {
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
		if got := notice(httptest.NewRequest("GET", "/?done="+done+"&id=a1", nil)); !strings.HasPrefix(got, want) {
			t.Errorf("done=%s: notice %q, want it to start with %q", done, got, want)
		}
	}
	if got := notice(httptest.NewRequest("GET", "/?done=%3Cb%3Ehi&id=a1", nil)); got != "" {
		t.Errorf("an unknown done= gave the notice %q, want none", got)
	}
	if got := notice(httptest.NewRequest("GET", "/?done=created&id=%3Cscript%3E", nil)); strings.Contains(got, "script") {
		t.Errorf("an id that is not a workspace id reached the notice: %q", got)
	}
}
