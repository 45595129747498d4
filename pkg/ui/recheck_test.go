package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kfake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/session"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// revocable is the tokens stand-in whose table changes while a test runs: a token revoked, an
// admin demoted. It answers what the authenticator would answer now.
type revocable struct {
	mu sync.Mutex
	t  tokens
}

func (r *revocable) Authenticate(req *http.Request) (*auth.Caller, error) {
	tok, err := auth.TokenFromRequest(req)
	if err != nil {
		return nil, err
	}
	return r.VerifyToken(req.Context(), tok)
}

func (r *revocable) VerifyToken(_ context.Context, token string) (*auth.Caller, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.t[token]
	if !ok {
		return nil, &auth.Error{Reason: "token has been revoked"}
	}
	cp := *c
	return &cp, nil
}

// set makes token verify as c from now on; nil revokes it.
func (r *revocable) set(token string, c *auth.Caller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == nil {
		delete(r.t, token)
		return
	}
	r.t[token] = c
}

// movingClock is a clock the test moves: the sessions' and their rechecks'.
type movingClock struct{ ns atomic.Int64 }

func newMovingClock() *movingClock {
	c := &movingClock{}
	c.ns.Store(time.Now().UnixNano()) // the session cookie's Max-Age counts from the real time
	return c
}
func (c *movingClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

// afterRecheck moves the clock past the sessions' recheck interval (30 s).
func (c *movingClock) afterRecheck() { c.ns.Add(int64(31 * time.Second)) }

// A session used to hold the caller as verified at login for its whole life (8 hours, or the
// token's expiry): a token revoked (a service account deleted, a TokenReview that now says no)
// kept its UI sessions working, and an admin removed from the admin group stayed an admin in
// every open session, although docs/auth.md promised a revoked token ends them. Now the session
// keeps the token (in memory only) and has it verified again by the API's authenticator when its
// last check is 30 s old or older: refused, the session ends; verified, the caller is what the
// authenticator says now.
func TestASessionEndsWhenItsTokenIsRevoked(t *testing.T) {
	clock := newMovingClock()
	authn := &revocable{t: tokens{
		"alice-token": {Subject: "alice"},
		"admin-token": {Subject: "root", IsAdmin: true},
		"ops-token":   {Subject: "ops", IsAdmin: true},
	}}
	events := kfake.NewClientset()
	f := newFixtureConfig(t, Options{InsecureCookie: true, Auth: authn, Sessions: session.NewStore(session.Options{Now: clock.now})}, nil,
		func(c *frontend.Config) { c.Events = events.CoreV1() },
		wsPod("alice", "a1", "1.0", true), wsPod("bob", "b1", "1.0", true))
	upgradeRequested := func(name string) bool {
		var p corev1.Pod
		if err := f.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[workspace.AnnUpgradeRequested] != ""
	}
	noUpgrades := func(t *testing.T) {
		t.Helper()
		for _, name := range []string{"ws-a1", "ws-b1"} {
			if upgradeRequested(name) {
				t.Fatalf("a refused session's action requested an upgrade of %s", name)
			}
		}
	}

	t.Run("a revoked token's session ends: its pages go to the login page, its actions are refused", func(t *testing.T) {
		alice, admin := f.browser(t), f.browser(t)
		alice.login("alice-token")
		adminCSRF := admin.login("admin-token")
		authn.set("alice-token", nil)
		authn.set("admin-token", nil)
		clock.afterRecheck()

		resp, _ := alice.do("GET", "/", nil)
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
			t.Fatalf("GET / with the session of a revoked token: %s to %q, want 303 to /login", resp.Status, resp.Header.Get("Location"))
		}
		resp, _ = admin.do("POST", "/upgrade-all", nil, "X-CSRF-Token", adminCSRF, "HX-Request", "true")
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("HX-Redirect") != "/login" {
			t.Errorf("htmx's POST /upgrade-all with the session of a revoked admin token: %s (HX-Redirect %q), want 401 to /login", resp.Status, resp.Header.Get("HX-Redirect"))
		}
		resp, _ = admin.do("POST", "/upgrade-all", url.Values{"csrf": {adminCSRF}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
			t.Errorf("a form's POST /upgrade-all with the session of a revoked admin token: %s to %q, want 303 to /login", resp.Status, resp.Header.Get("Location"))
		}
		noUpgrades(t)
		// Ended, not merely refused once: the token coming back does not bring the session back.
		authn.set("alice-token", &auth.Caller{Subject: "alice"})
		if resp, _ := alice.do("GET", "/", nil); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("GET / after the token verifies again: %s, want 303 (the session ended when it was refused)", resp.Status)
		}
	})

	t.Run("a demoted admin's session is a user's", func(t *testing.T) {
		ops := f.browser(t)
		csrf := ops.login("ops-token")
		if _, page := ops.do("GET", "/?all=1", nil); !strings.Contains(page, `class="badge admin"`) {
			t.Fatalf("ops is no admin before the demotion:\n%s", page)
		}
		authn.set("ops-token", &auth.Caller{Subject: "ops"})
		clock.afterRecheck()
		resp, _ := ops.do("POST", "/upgrade-all", url.Values{"csrf": {csrf}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST /upgrade-all by a demoted admin: %s, want 403", resp.Status)
		}
		noUpgrades(t)
		if resp, _ := ops.do("GET", "/?all=1", nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET /?all=1 by a demoted admin: %s, want 403", resp.Status)
		}
	})

	t.Run("an open list stream ends at its next wake-up once its token is refused", func(t *testing.T) {
		authn.set("bob-token", &auth.Caller{Subject: "bob"})
		bob := f.browser(t)
		bob.login("bob-token")
		read, _ := bob.pageStream(t, "/")
		read(": connected")
		authn.set("bob-token", nil)
		clock.afterRecheck()
		f.hub.changed("b1")
		if got := read("event: close\n"); !strings.Contains(got, "log in again") {
			t.Errorf("the stream of a revoked token's session did not say so before closing:\n%s", got)
		}
	})

	t.Run("a workspace's stream ends at its next event after logout", func(t *testing.T) {
		authn.set("alice-token", &auth.Caller{Subject: "alice"})
		alice := f.browser(t)
		csrf := alice.login("alice-token")
		read, ctx := alice.pageStream(t, "/workspaces/a1")
		read("event: update") // the page's events, as the watch begins
		if resp, _ := alice.do("POST", "/logout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout: %s", resp.Status)
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "ws-a1.after-logout", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "ws-a1", Namespace: ns},
			Reason:         "SecretAfterLogout", Message: "sent to a session that has ended", Type: corev1.EventTypeNormal,
			LastTimestamp: metav1.Now(),
		}
		if _, err := events.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := read("event: close\n")
		if strings.Contains(got, "SecretAfterLogout") || !strings.Contains(got, "log in again") {
			t.Errorf("after logout the workspace's stream sent the next event, or closed without saying why:\n%s", got)
		}
	})
}
