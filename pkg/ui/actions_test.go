package ui

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

var htmxConfigRe = regexp.MustCompile(`<meta name="htmx-config" content='([^']*)'>`)

// htmxResponseHandling is the page's htmx responseHandling: the rules htmx 2 (the vendored
// 2.0.11) goes through in order, the first whose code (a regular expression, tested against the
// status as JavaScript's RegExp.test does: unanchored) matches deciding whether an answer is
// swapped.
type htmxRule struct {
	Code  string `json:"code"`
	Swap  bool   `json:"swap"`
	Error bool   `json:"error"`
}

// htmx 2 swaps no 4xx or 5xx answer by default: a refused Upgrade, Stop or Start (409 pinned,
// 403 another's, 403 a stale token, 503 the API server away) showed nothing at all, the button
// just did nothing. The page's htmx-config swaps them into the request's target (the row's
// message), and those answers are the fragment meant for it. The browser's side is the e2e
// spec "shows a refused Upgrade's message in the row" (test/e2e/ui_test.go).
func TestRefusedActionsAreSwappedIntoTheRowsMessage(t *testing.T) {
	pinned := wsPod("alice", "a1", "1.0", true)
	pinned.Annotations[workspace.AnnPinned] = "true"
	f := newFixture(t, Options{InsecureCookie: true}, pinned, wsPod("bob", "b1", "1.0", true))
	b := f.browser(t)
	csrf := b.login("alice-token")
	_, page := b.do("GET", "/", nil)
	m := htmxConfigRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no htmx-config meta:\n%s", page)
	}
	var cfg struct {
		ResponseHandling []htmxRule `json:"responseHandling"`
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &cfg); err != nil {
		t.Fatalf("htmx-config %q: %v", m[1], err)
	}
	first := func(status string) (htmxRule, bool) {
		for _, r := range cfg.ResponseHandling {
			if regexp.MustCompile(r.Code).MatchString(status) {
				return r, true
			}
		}
		return htmxRule{}, false // htmx: no swap
	}
	for status, swap := range map[string]bool{"200": true, "204": false, "400": true, "401": true, "403": true, "404": true, "409": true, "413": true, "429": true, "500": true, "503": true} {
		r, ok := first(status)
		if !ok || r.Swap != swap {
			t.Errorf("htmx-config's responseHandling %+v: a %s answer is swapped: %t, want %t", cfg.ResponseHandling, status, ok && r.Swap, swap)
		}
		if ok && status[0] >= '4' && !r.Error {
			t.Errorf("a %s answer is not marked an error (htmx:responseError is how htmx tells it from a success)", status)
		}
	}

	// The answers of refused actions to htmx: the message as one element, for the target.
	fragment := regexp.MustCompile(`^<span class="error" role="alert">[^<]+</span>$`)
	for _, tc := range []struct {
		what, path string
		hdr        []string
		status     int
	}{
		{"an upgrade of a pinned workspace", "/workspaces/a1/upgrade", []string{"X-CSRF-Token", csrf}, http.StatusConflict},
		{"a start of another user's workspace", "/workspaces/b1/start", []string{"X-CSRF-Token", csrf}, http.StatusForbidden},
		{"an upgrade of a workspace that is none", "/workspaces/nope/upgrade", []string{"X-CSRF-Token", csrf}, http.StatusNotFound},
		{"a stop of another user's workspace", "/workspaces/b1/stop", []string{"X-CSRF-Token", csrf}, http.StatusForbidden},
		{"an upgrade with a stale token", "/workspaces/a1/upgrade", []string{"X-CSRF-Token", "stale"}, http.StatusForbidden},
	} {
		resp, body := b.do("POST", tc.path, nil, append(tc.hdr, "HX-Request", "true")...)
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !fragment.MatchString(strings.TrimSpace(body)) {
			t.Errorf("%s: %s %s %q, want %d and the message as one element for the row's message", tc.what, resp.Status, resp.Header.Get("Content-Type"), body, tc.status)
		}
	}
}

// A pinned workspace is refused an upgrade (unpin first), and one in maintenance is refused to
// its owner (an admin may): neither offers an Upgrade button that would be refused, and the one
// in maintenance offers its owner no Delete either (Service.Delete refuses it). Upgrade All
// skips both, so its count and its confirmation leave them out, and its result says why each was
// skipped. Before stop 51 the button was there and refused, the header counted them, and the
// result said "Requested 3 upgrades" with "skipped" and no reason.
func TestPinnedAndInMaintenanceWorkspacesAreNotOfferedAnUpgrade(t *testing.T) {
	pinned := wsPod("alice", "a1", "1.0", true)
	pinned.Annotations[workspace.AnnPinned] = "true"
	maint := wsPod("bob", "b1", "1.0", true)
	maint.Annotations[workspace.AnnMaintenance] = "disk migration"
	f := newFixture(t, Options{InsecureCookie: true}, pinned, maint, wsPod("carol", "c1", "1.0", true))
	alice, bob, admin := f.browser(t), f.browser(t), f.browser(t)
	alice.login("alice-token")
	bob.login("bob-token")
	csrf := admin.login("admin-token")

	for _, tc := range []struct {
		who  *browser
		path string
		want map[string]bool // workspace id: has an Upgrade button
	}{
		{alice, "/", map[string]bool{"a1": false}},
		{alice, "/workspaces/a1", map[string]bool{"a1": false}},
		{bob, "/", map[string]bool{"b1": false}},
		{bob, "/workspaces/b1", map[string]bool{"b1": false}},
		{admin, "/?all=1", map[string]bool{"a1": false, "b1": true, "c1": true}},
		{admin, "/workspaces/b1", map[string]bool{"b1": true}},
	} {
		_, page := tc.who.do("GET", tc.path, nil)
		for id, want := range tc.want {
			if !strings.Contains(page, `id="ws-`+id+`"`) && !strings.Contains(page, `id="ws-`+id+`__msg"`) {
				t.Fatalf("GET %s does not show %s:\n%s", tc.path, id, page)
			}
			if got := strings.Contains(page, `id="ws-`+id+`__upgrade"`); got != want {
				t.Errorf("GET %s: %s has an Upgrade button: %t, want %t", tc.path, id, got, want)
			}
			if got, want := strings.Contains(page, `id="ws-`+id+`__delete"`), id != "b1" || tc.who == admin; got != want {
				t.Errorf("GET %s: %s has a Delete button: %t, want %t", tc.path, id, got, want)
			}
		}
	}

	_, page := admin.do("GET", "/?all=1", nil)
	if !strings.Contains(page, "Upgrade All Outdated (1)") {
		t.Errorf("the header's button counts what Upgrade All would skip, want (1):\n%s", page)
	}
	read, _ := admin.pageStream(t, "/?all=1")
	if got := read("upgrade-all-slot"); !strings.Contains(got, "Upgrade All Outdated (1)") {
		t.Errorf("the stream's header counts what Upgrade All would skip, want (1):\n%s", got)
	}
	_, page = admin.do("GET", "/upgrade-all", nil)
	if !strings.Contains(page, "This upgrades 1 workspace of 1 user") || strings.Contains(page, ">a1<") || strings.Contains(page, ">b1<") {
		t.Errorf("the confirmation lists what Upgrade All skips:\n%s", page)
	}
	resp, page := admin.do("POST", "/upgrade-all", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upgrade-all: %s\n%s", resp.Status, page)
	}
	if summary := between(page, `id="upgrade-all-result">`, "</p>"); !strings.Contains(summary, "Requested 1 upgrade for 1 user") || !strings.Contains(summary, "2 skipped") {
		t.Errorf("the result's summary %q, want 1 requested and 2 skipped", summary)
	}
	for id, why := range map[string]string{"a1": "is pinned to version 1.0", "b1": "is in maintenance"} {
		if row := between(page, `id="result-`+id+`"`, "</tr>"); !strings.Contains(row, "skipped") || !strings.Contains(row, why) {
			t.Errorf("the result's row of %s %q does not say why it was skipped (%q)", id, row, why)
		}
	}
}

// between is the text of s after the first from up to the next to ("" without from).
func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// A form posted without a live session (it expired, or the person logged out in another tab)
// goes to the login page, as a page does, and the dead cookie is cleared; htmx's request gets 401
// with HX-Redirect (it follows that, not a 303 it would swap into the row). Before stop 51 both
// got a bare text/plain 401.
func TestAFormPostedWithoutASessionGoesToTheLoginPage(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true))
	b := f.browser(t)
	csrf := b.login("alice-token")
	u, _ := url.Parse(f.srv.URL)
	stale := b.c.Jar.Cookies(u)
	if resp, _ := b.do("POST", "/logout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %s", resp.Status)
	}
	cleared := func(resp *http.Response) bool {
		for _, c := range resp.Cookies() {
			if c.Name == "nogoo9-session" && c.MaxAge < 0 {
				return true
			}
		}
		return false
	}
	for _, path := range []string{"/workspaces/a1/stop", "/workspaces/a1/upgrade", "/logout", "/upgrade-all"} {
		b.c.Jar.SetCookies(u, stale) // the dead session's cookie, as a second tab still sends it
		resp, _ := b.do("POST", path, url.Values{"csrf": {csrf}})
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") || !cleared(resp) {
			t.Errorf("POST %s without a live session: %s to %q, cookies %v; want 303 to /login clearing the cookie", path, resp.Status, resp.Header.Get("Location"), resp.Header.Values("Set-Cookie"))
		}
		b.c.Jar.SetCookies(u, stale)
		resp, _ = b.do("POST", path, nil, "X-CSRF-Token", csrf, "HX-Request", "true")
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("HX-Redirect") != "/login" || !cleared(resp) {
			t.Errorf("htmx's POST %s without a live session: %s, HX-Redirect %q, cookies %v; want 401 with HX-Redirect /login clearing the cookie", path, resp.Status, resp.Header.Get("HX-Redirect"), resp.Header.Values("Set-Cookie"))
		}
	}
}

// Without JavaScript, Stop and Start (and Upgrade) post a form and come back to the page they
// were on: the list (with its filter) or the workspace's page. Before stop 51 their forms had
// no back field, so they always landed on /.
func TestLifecycleFormsComeBackToThePageTheyWereOn(t *testing.T) {
	stopped := wsPod("alice", "a2", "2.0", false) // up to date: no Upgrade
	stopped.Annotations[workspace.AnnStopRequested] = "true"
	f := newFixture(t, Options{InsecureCookie: true}, wsPod("alice", "a1", "1.0", true), stopped)
	alice, admin := f.browser(t), f.browser(t)
	csrf := alice.login("alice-token")
	admin.login("admin-token")
	backRe := regexp.MustCompile(`<form method="post" action="(/workspaces/a[12]/(?:stop|start|upgrade))"[^>]*>(?:<input type="hidden" name="(?:csrf|back)" value="[^"]*">)*`)
	for _, tc := range []struct {
		who        *browser
		path, back string
		forms      int
	}{
		{alice, "/", "/", 3},
		{alice, "/workspaces/a1", "/workspaces/a1", 2},
		{alice, "/workspaces/a2", "/workspaces/a2", 1},
		{admin, "/?all=1&owner=alice", "/?all=1&owner=alice", 3},
	} {
		_, page := tc.who.do("GET", tc.path, nil)
		forms := backRe.FindAllString(page, -1)
		if len(forms) != tc.forms {
			t.Errorf("GET %s: %d Stop, Start or Upgrade forms, want %d:\n%s", tc.path, len(forms), tc.forms, page)
		}
		for _, form := range forms {
			if !strings.Contains(html.UnescapeString(form), `name="back" value="`+tc.back+`"`) {
				t.Errorf("GET %s: the form %s does not come back to %s", tc.path, form, tc.back)
			}
		}
	}
	resp, _ := alice.do("POST", "/workspaces/a1/stop", url.Values{"csrf": {csrf}, "back": {"/workspaces/a1"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/workspaces/a1?") || !strings.Contains(loc, "done=stopping") {
		t.Errorf("stop from the workspace's page: %s to %q, want 303 back to it with its notice", resp.Status, loc)
	}
}

// A user's /?all=1 is refused in the UI's words: the page's own address parameter, not the API's
// allUsers.
func TestAUsersAllWorkspacesRefusalNamesTheUIsParameter(t *testing.T) {
	f := newFixture(t, Options{InsecureCookie: true})
	b := f.browser(t)
	b.login("alice-token")
	resp, page := b.do("GET", "/?all=1", nil)
	msg := between(page, `id="error-message">`, "</p>")
	if resp.StatusCode != http.StatusForbidden || strings.Contains(msg, "allUsers") || !strings.Contains(msg, "all=1") {
		t.Errorf("a user's /?all=1: %s %q, want 403 naming all=1, not allUsers", resp.Status, msg)
	}
}
