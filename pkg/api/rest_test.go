package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestRESTEndpoints(t *testing.T) {
	skipShort(t)
	dave, erin, admin := userToken("dave"), userToken("erin"), adminToken("root")
	erinPod := seed(t, "erin", "erin-box", "1.0")
	before := podCount(t)

	steps := []struct {
		name       string
		token      string
		method     string
		path       string
		body       any
		wantStatus int
		wantBody   string
	}{
		{"templates", dave, "GET", "/api/v1/templates", nil, 200, `"name":"python"`},
		{"spawn with malformed JSON", dave, "POST", "/api/v1/workspaces", `{"template":`, 400, "not valid JSON"},
		{"spawn with an unknown field", dave, "POST", "/api/v1/workspaces", `{"template":"python","colour":"red"}`, 400, "colour"},
		{"spawn with an oversized body", dave, "POST", "/api/v1/workspaces", `{"template":"` + strings.Repeat("a", 2<<20) + `"}`, 400, "larger than"},
		{"spawn with an empty body", dave, "POST", "/api/v1/workspaces", "", 400, "empty"},
		{"spawn of an unknown template", dave, "POST", "/api/v1/workspaces", map[string]any{"template": "cobol", "id": "d1"}, 404, "not found"},
		{"spawn with a bad id", dave, "POST", "/api/v1/workspaces", map[string]any{"template": "python", "id": "-bad-"}, 400, "not valid"},
		{"spawn without required context", dave, "POST", "/api/v1/workspaces", map[string]any{"template": "python", "id": "d1"}, 400, "repo"},
		{"spawn", dave, "POST", "/api/v1/workspaces", map[string]any{"template": "python", "id": "d1", "context": map[string]string{"repo": "r"}}, 201, `"phase":"Scheduling"`},
		{"spawn of a taken id", dave, "POST", "/api/v1/workspaces", map[string]any{"template": "python", "id": "d1", "context": map[string]string{"repo": "r"}}, 409, "already exists"},
		{"list own", dave, "GET", "/api/v1/workspaces", nil, 200, `"id":"d1"`},
		{"list all as non-admin", dave, "GET", "/api/v1/workspaces?all=true", nil, 403, "Forbidden"},
		{"list with a bad flag", dave, "GET", "/api/v1/workspaces?all=maybe", nil, 400, "boolean"},
		{"list all as admin", admin, "GET", "/api/v1/workspaces?all=1", nil, 200, `"id":"erin-box"`},
		{"get own", erin, "GET", "/api/v1/workspaces/erin-box", nil, 200, `"owner":"erin"`},
		{"get another's", dave, "GET", "/api/v1/workspaces/erin-box", nil, 403, "Access Denied"},
		{"get unknown", dave, "GET", "/api/v1/workspaces/nope", nil, 404, "not found"},
		{"get with a bad id", dave, "GET", "/api/v1/workspaces/NOPE_", nil, 400, "not valid"},
		{"upgrade up to date", erin, "POST", "/api/v1/workspaces/erin-box/upgrade", nil, 200, `"status":"upToDate"`},
		{"upgrade another's", dave, "POST", "/api/v1/workspaces/erin-box/upgrade", nil, 403, "Access Denied"},
		{"upgrade-all as non-admin", erin, "POST", "/api/v1/upgrade-all", nil, 403, frontend.MsgUpgradeAllForAdmin},
		{"maintenance as non-admin", erin, "PUT", "/api/v1/workspaces/erin-box/maintenance", map[string]string{"reason": "x"}, 403, "Forbidden"},
		{"maintenance without a reason", admin, "PUT", "/api/v1/workspaces/erin-box/maintenance", map[string]string{}, 400, "reason"},
		{"maintenance as admin", admin, "PUT", "/api/v1/workspaces/erin-box/maintenance", map[string]string{"reason": "disk"}, 200, `"maintenance":"disk"`},
		{"maintenance cleared", admin, "DELETE", "/api/v1/workspaces/erin-box/maintenance", nil, 200, `"id":"erin-box"`},
		{"pin another's", dave, "PUT", "/api/v1/workspaces/erin-box/pin", nil, 403, "Access Denied"},
		{"pin own", erin, "PUT", "/api/v1/workspaces/erin-box/pin", nil, 200, `"pinned":true`},
		{"unpin own", erin, "DELETE", "/api/v1/workspaces/erin-box/pin", nil, 200, `"id":"erin-box"`},
		{"update policy with a bad window", erin, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "window", "window": "Sat"}, 400, "update window"},
		{"update policy unknown", erin, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "always"}, 400, "not one of manual, on-start, when-idle, window"},
		{"update policy of another's", dave, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "when-idle"}, 403, "Access Denied"},
		{"update policy with its own window", erin, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "window", "window": "Sat 02:00-04:00 UTC"}, 200, `"updatePolicy":"window","updateWindow":"Sat 02:00-04:00 UTC"}`},
		// PUT replaces the workspace's policy and window together: a window left out goes.
		{"update policy without a window", erin, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "when-idle"}, 200, `"updatePolicy":"when-idle"}`},
		{"update policy stored as parsed, not as written", erin, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "  when-idle" + strings.Repeat(" ", 10000)}, 200, `"updatePolicy":"when-idle"}`},
		{"update window of unbounded size", erin, "PUT", "/api/v1/workspaces/erin-box/update-policy", map[string]string{"policy": "window", "window": "Mon" + strings.Repeat(",Mon", 1000) + " 02:00-04:00 UTC"}, 400, "longer than 128 bytes"},
		{"update policy cleared", erin, "DELETE", "/api/v1/workspaces/erin-box/update-policy", nil, 200, `"id":"erin-box"`},
		{"dry run up to date", erin, "POST", "/api/v1/workspaces/erin-box/upgrade?dryRun=true", nil, 200, `"status":"upToDate"`},
		{"dry run with a bad flag", erin, "POST", "/api/v1/workspaces/erin-box/upgrade?dryRun=perhaps", nil, 400, "dryRun"},
		{"rollback as the owner", erin, "POST", "/api/v1/workspaces/erin-box/upgrade?version=0.9", nil, 403, "only admin users"},
		{"rollback without history", admin, "POST", "/api/v1/workspaces/erin-box/upgrade?version=0.9", nil, 404, "no template history"},
		{"history", dave, "GET", "/api/v1/templates/python/history", nil, 200, `"versions":[]`},
		{"history of another namespace's template by its key", dave, "GET", "/api/v1/templates/team%2Fpython/history", nil, 400, `template name \"team/python\" is not valid`},
		{"template rollback as non-admin", dave, "POST", "/api/v1/templates/python/rollback", map[string]string{"version": "1.0"}, 403, "only admin users"},
		{"template rollback without a version", admin, "POST", "/api/v1/templates/python/rollback", map[string]string{}, 400, "version is empty"},
		{"events of another's", dave, "GET", "/api/v1/workspaces/erin-box/events", nil, 403, "Access Denied"},
		{"events with a bad timeout", erin, "GET", "/api/v1/workspaces/erin-box/events?follow=true&timeout=1h", nil, 400, "timeout"},
		{"events with a bad until", erin, "GET", "/api/v1/workspaces/erin-box/events?follow=true&until=a%20b", nil, 400, "until"},
		{"list with a bad limit", dave, "GET", "/api/v1/workspaces?limit=-1", nil, 400, "limit"},
		{"list with a bad continue", dave, "GET", "/api/v1/workspaces?continue=NOPE_", nil, 400, "continue"},
		{"events", erin, "GET", "/api/v1/workspaces/erin-box/events", nil, 200, `"events":[]`},
		{"unknown endpoint", erin, "GET", "/api/v1/nothing", nil, 404, "no endpoint"},
		{"delete another's", dave, "DELETE", "/api/v1/workspaces/erin-box", nil, 403, "Access Denied"},
		{"delete own", dave, "DELETE", "/api/v1/workspaces/d1", nil, 202, `"status":"deleting"`},
	}
	for _, s := range steps {
		code, body := rest(t, s.token, s.method, s.path, s.body)
		if code != s.wantStatus || !strings.Contains(string(body), s.wantBody) {
			t.Errorf("%s: %s %s = %d %s; want %d containing %q", s.name, s.method, s.path, code, body, s.wantStatus, s.wantBody)
		}
		if s.name == "spawn" {
			waitCached(t, workspace.PodName("dave", "d1"))
		}
	}
	g := NewWithT(t)
	g.Eventually(func() int { return podCount(t) }, 30*time.Second, 50*time.Millisecond).Should(Equal(before))

	t.Run("upgrade as admin keeps the owner and returns 202 at once", func(t *testing.T) {
		g := NewWithT(t)
		env.templates.setVersion("python", "3.0")
		defer env.templates.setVersion("python", "1.0")
		code, body := rest(t, admin, "POST", "/api/v1/workspaces/erin-box/upgrade", nil)
		g.Expect(code).To(Equal(202), string(body))
		var r frontend.UpgradeResult
		g.Expect(json.Unmarshal(body, &r)).To(Succeed())
		g.Expect(r.PodName).To(Equal(workspace.NextPodName(erinPod, "3.0")))
		p, err := getPod(t, erinPod.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Annotations[workspace.AnnOwner]).To(Equal("erin"))
		g.Expect(p.Annotations[workspace.AnnUpgradePod]).To(Equal(r.PodName))
	})

	t.Run("a list pages with limit and continue, in id order", func(t *testing.T) {
		g := NewWithT(t)
		for _, id := range []string{"frank-c", "frank-a", "frank-b"} {
			seed(t, "frank", id, "1.0")
		}
		frank := userToken("frank")
		type page struct {
			Workspaces []frontend.Workspace
			Continue   string
		}
		var got []string
		path := "/api/v1/workspaces?limit=2"
		for range 3 {
			code, body := rest(t, frank, "GET", path, nil)
			g.Expect(code).To(Equal(200), string(body))
			var p page
			g.Expect(json.Unmarshal(body, &p)).To(Succeed())
			for _, w := range p.Workspaces {
				got = append(got, w.ID)
			}
			if p.Continue == "" {
				break
			}
			path = "/api/v1/workspaces?limit=2&continue=" + p.Continue
		}
		g.Expect(got).To(Equal([]string{"frank-a", "frank-b", "frank-c"}))
	})

	t.Run("events follow as Server-Sent Events", func(t *testing.T) {
		g := NewWithT(t)
		addEvent(t, erinPod.Name, "Pulling", "pulling image")
		req, _ := http.NewRequest("GET", env.server.URL+"/api/v1/workspaces/erin-box/events?follow=true&timeout=2m&until=Started,Failed", nil)
		req.Header.Set("Authorization", "Bearer "+erin)
		resp, err := httpc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var seen []string
		next := func(want string) {
			deadline := time.After(30 * time.Second)
			for {
				select {
				case l, ok := <-lines:
					g.Expect(ok).To(BeTrue(), "stream ended before %q; saw %v", want, seen)
					seen = append(seen, l)
					if strings.Contains(l, want) {
						return
					}
				case <-deadline:
					t.Fatalf("no %q within 30s; saw %v", want, seen)
				}
			}
		}
		next("Pulling")
		addEvent(t, erinPod.Name, "Started", "container started")
		next("Started")
		// Started is listed in until: the stream ends with it, long before its timeout.
		next("event: end")
		next(`{"reason":"until"}`)

		// Without until, the stream ends at its timeout.
		code, body := rest(t, erin, "GET", "/api/v1/workspaces/erin-box/events?follow=true&timeout=1s", nil)
		g.Expect(code).To(Equal(200))
		g.Expect(string(body)).To(And(ContainSubstring("Started"), HaveSuffix("event: end\ndata: {\"reason\":\"timeout\"}\n\n")))
	})
}

func TestKubernetesTokenReview(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}}
	g.Expect(env.k8s.Create(ctx, sa)).To(Succeed())
	t.Cleanup(func() { _ = env.k8s.Delete(ctx, sa) })
	tr, err := env.clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	cases := []struct {
		name      string
		cfg       auth.KubernetesConfig
		token     string
		wantSub   string
		wantAdmin bool
		wantErr   string
	}{
		{"a service-account token of an admin group member", auth.KubernetesConfig{AdminGroup: "system:serviceaccounts:" + ns}, tr.Status.Token, "system:serviceaccount:default:agent", true, ""},
		{"a service-account token, no admin group", auth.KubernetesConfig{}, tr.Status.Token, "system:serviceaccount:default:agent", false, ""},
		{"a token for another audience", auth.KubernetesConfig{Audiences: []string{"not-the-apiserver"}}, tr.Status.Token, "", false, "rejected"},
		{"garbage", auth.KubernetesConfig{}, "garbage", "", false, "rejected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := auth.NewKubernetes(env.k8s, tc.cfg).VerifyToken(ctx, tc.token)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Subject).To(Equal(tc.wantSub))
			g.Expect(c.IsAdmin).To(Equal(tc.wantAdmin))
		})
	}
}

// A path that exists, asked with a method it does not have, is a 405 in the API's error shape
// with Allow naming the methods it has (as net/http would without the catch-all); a path that
// does not exist stays a 404.
func TestWrongMethodIsAnswered405WithAllow(t *testing.T) {
	skipShort(t)
	dave := userToken("dave")
	for _, tc := range []struct {
		name, method, path string
		wantStatus         int
		wantAllow          string
	}{
		{"PATCH of a workspace", "PATCH", "/api/v1/workspaces/box", 405, "GET, HEAD, DELETE"},
		{"PUT of a workspace", "PUT", "/api/v1/workspaces/box", 405, "GET, HEAD, DELETE"},
		{"POST of a workspace in a namespace", "POST", "/api/v1/namespaces/team/workspaces/box", 405, "GET, HEAD, DELETE"},
		{"DELETE of the list", "DELETE", "/api/v1/workspaces", 405, "GET, HEAD, POST"},
		{"GET of upgrade", "GET", "/api/v1/workspaces/box/upgrade", 405, "POST"},
		{"POST of the pin", "POST", "/api/v1/workspaces/box/pin", 405, "PUT, DELETE"},
		{"PATCH of the update policy", "PATCH", "/api/v1/workspaces/box/update-policy", 405, "PUT, DELETE"},
		{"POST of whoami", "POST", "/api/v1/whoami", 405, "GET, HEAD"},
		{"DELETE of upgrade-all", "DELETE", "/api/v1/upgrade-all", 405, "POST"},
		{"GET of a template's rollback", "GET", "/api/v1/templates/python/rollback", 405, "POST"},
		{"OPTIONS of the events", "OPTIONS", "/api/v1/workspaces/box/events", 405, "GET, HEAD"},
		{"PATCH of a path that does not exist", "PATCH", "/api/v1/nothing", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, h := do(t, env.server.URL, tc.method, tc.path, "", map[string]string{"Authorization": "Bearer " + dave})
			if code != tc.wantStatus || h.Get("Allow") != tc.wantAllow {
				t.Fatalf("%s %s = %d, Allow %q, %s; want %d, Allow %q", tc.method, tc.path, code, h.Get("Allow"), body, tc.wantStatus, tc.wantAllow)
			}
			var e struct{ Error, Code string }
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("not the API's error shape: %s", body)
			}
			if code == 405 && (e.Code != "MethodNotAllowed" || !strings.Contains(e.Error, "method "+tc.method+" is not allowed on "+tc.path+": use "+tc.wantAllow)) {
				t.Errorf("405 body %s does not say which method and which are allowed", body)
			}
		})
	}
}
