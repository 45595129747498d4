package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// snapshotAll is snapshot over both watched namespaces, keyed "namespace/name".
func snapshotAll(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, n := range []string{ns, teamNS} {
		var l corev1.PodList
		if err := env.k8s.List(context.Background(), &l, client.InNamespace(n)); err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			m[n+"/"+p.Name] = p.ResourceVersion
		}
	}
	return m
}

// TestBodylessWritesRefuseABodyAndWriteNothing: a write route whose table row in docs/api.md
// has no body used to ignore whatever body it was sent, and then did its full work: an upgrade
// sent {"dryRun":true} started a real upgrade, upgrade-all sent a template and a version
// upgraded everything to the latest, a pin sent {"pinned":false} pinned. Such a body is a 400
// naming its first field, and nothing is written.
func TestBodylessWritesRefuseABodyAndWriteNothing(t *testing.T) {
	skipShort(t)
	owner := fmt.Sprintf("bodyless-%d", time.Now().UnixNano())
	seed(t, owner, "p1", "0.9") // outdated: the template is at 1.0
	seedIn(t, teamNS, owner, "p2", "0.9")
	tok, admin := userToken(owner), adminToken("root")
	before := snapshotAll(t)
	for _, tc := range []struct {
		name, token, method, path, body string
		want                            []string
	}{
		{"an upgrade sent a dry run in its body", tok, "POST", "/api/v1/workspaces/p1/upgrade", `{"dryRun":true}`,
			[]string{`request body field \"dryRun\" is not known`, "takes no body", "?dryRun=true"}},
		{"upgrade-all sent a template and version in its body", admin, "POST", "/api/v1/namespaces/" + teamNS + "/upgrade-all", `{"template":"python","version":"0.9"}`,
			[]string{`request body field \"template\" is not known`, "takes no body"}},
		{"a pin sent pinned false", tok, "PUT", "/api/v1/workspaces/p1/pin", `{"pinned":false}`,
			[]string{`request body field \"pinned\" is not known`, "takes no body"}},
		{"an unpin sent a body", tok, "DELETE", "/api/v1/workspaces/p1/pin", `{"pinned":true}`, []string{`\"pinned\"`}},
		{"a delete sent a body", tok, "DELETE", "/api/v1/workspaces/p1", `{"force":true}`, []string{`\"force\"`, "takes no body"}},
		{"a stop sent a body", tok, "POST", "/api/v1/workspaces/p1/stop", `{"reason":"lunch"}`, []string{`\"reason\"`}},
		{"a start sent a body", tok, "POST", "/api/v1/workspaces/p1/start", `{"version":"1.0"}`, []string{`\"version\"`}},
		{"a maintenance lift sent a reason", admin, "DELETE", "/api/v1/workspaces/p1/maintenance", `{"reason":"keep it"}`, []string{`\"reason\"`}},
		{"an update policy reset sent a policy", tok, "DELETE", "/api/v1/workspaces/p1/update-policy", `{"policy":"manual"}`, []string{`\"policy\"`}},
		{"an upgrade sent text that is not JSON", tok, "POST", "/api/v1/workspaces/p1/upgrade", "dryRun=true", []string{"takes no body"}},
		{"an upgrade sent a JSON array", tok, "POST", "/api/v1/workspaces/p1/upgrade", `[{"dryRun":true}]`, []string{"takes no body"}},
		{"an upgrade sent a 500 KB field name", tok, "POST", "/api/v1/workspaces/p1/upgrade", `{"` + strings.Repeat("k", 500_000) + `":1}`, []string{"(500000 bytes)", "takes no body"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rest(t, tc.token, tc.method, tc.path, tc.body)
			if code != 400 || len(body) > 1024 {
				t.Fatalf("%s %s with body %.80q answered %d (%d bytes): %.300s; want a short 400", tc.method, tc.path, tc.body, code, len(body), body)
			}
			var e struct{ Code string }
			_ = json.Unmarshal(body, &e)
			if e.Code != "Invalid" {
				t.Errorf("code %q, want Invalid: %s", e.Code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("answer %s does not contain %s", body, w)
				}
			}
		})
	}
	NewWithT(t).Expect(snapshotAll(t)).To(Equal(before), "a write sent a body it does not take changed a pod")

	t.Run("no body, a blank one and an empty object are no body", func(t *testing.T) {
		for _, body := range []string{"", " \r\n\t", "{}", " { } "} {
			code, b := rest(t, tok, "PUT", "/api/v1/workspaces/p1/pin", body)
			if code != 200 {
				t.Errorf("pin with body %q answered %d: %.300s", body, code, b)
			}
		}
	})
}

// TestUnknownQueryParametersAreRefusedOnWrites: query parameters used to be read by exact name
// and anything else ignored, so ?dryrun=true (lower case) upgraded for real, a DELETE with
// ?dryRun=All deleted, and ?version= (empty) upgraded to the latest. A parameter a route does not
// take is a 400 naming it and the ones it takes, and nothing is written; every documented
// parameter keeps working.
func TestUnknownQueryParametersAreRefusedOnWrites(t *testing.T) {
	skipShort(t)
	owner := fmt.Sprintf("query-%d", time.Now().UnixNano())
	seed(t, owner, "q1", "0.9") // outdated: the template is at 1.0
	seed(t, owner, "q2", "1.0")
	tok, admin := userToken(owner), adminToken("root")
	before := snapshotAll(t)
	for _, tc := range []struct {
		name, token, method, path string
		want                      []string
	}{
		{"an upgrade with dryrun in lower case", tok, "POST", "/api/v1/workspaces/q1/upgrade?dryrun=true",
			[]string{`query parameter \"dryrun\" is not known`, `case-sensitive`, `\"dryRun\"`}},
		{"an upgrade with a misspelled parameter", tok, "POST", "/api/v1/workspaces/q1/upgrade?dry_run=true",
			[]string{`query parameter \"dry_run\" is not known`, "dryRun, version"}},
		{"an upgrade with an empty version", admin, "POST", "/api/v1/workspaces/q1/upgrade?version=",
			[]string{"version is empty"}},
		{"an upgrade with dryRun given twice", tok, "POST", "/api/v1/workspaces/q1/upgrade?dryRun=true&dryRun=false",
			[]string{`query parameter \"dryRun\" is given twice`}},
		{"a delete with a dry run", tok, "DELETE", "/api/v1/workspaces/q1?dryRun=All",
			[]string{`query parameter \"dryRun\" is not known`, "takes no query parameters"}},
		{"a stop with a parameter", tok, "POST", "/api/v1/workspaces/q1/stop?force=true", []string{`\"force\"`}},
		{"upgrade-all with a namespace parameter", admin, "POST", "/api/v1/upgrade-all?namespace=" + teamNS, []string{`\"namespace\"`}},
		{"a pin with a parameter", tok, "PUT", "/api/v1/workspaces/q1/pin?pinned=false", []string{`\"pinned\"`}},
		{"a 500 KB parameter name", tok, "POST", "/api/v1/workspaces/q1/upgrade?" + strings.Repeat("p", 500_000) + "=1", []string{"(500000 bytes)"}},
		{"a list with all in another case", tok, "GET", "/api/v1/workspaces?ALL=true", []string{`\"ALL\"`, `\"all\"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rest(t, tc.token, tc.method, tc.path, nil)
			if code != 400 || len(body) > 1024 {
				t.Fatalf("%s %.80s answered %d (%d bytes): %.300s; want a short 400", tc.method, tc.path, code, len(body), body)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("answer %s does not contain %s", body, w)
				}
			}
		})
	}
	NewWithT(t).Expect(snapshotAll(t)).To(Equal(before), "a write with a parameter it does not take changed a pod")

	t.Run("every documented parameter is still taken", func(t *testing.T) {
		for _, tc := range []struct{ token, method, path string }{
			{tok, "GET", "/api/v1/workspaces?all=false&limit=5"},
			{admin, "GET", "/api/v1/workspaces?allNamespaces=true&all=true&limit=500"},
			{tok, "GET", "/api/v1/workspaces/q1/events?follow=true&timeout=1s&until=UpgradeSucceeded,UpgradeFailed"},
			{tok, "GET", "/api/v1/workspaces/q1/events?follow=true&timeout=1s&until=UpgradeSucceeded&until=UpgradeFailed"},
			{tok, "POST", "/api/v1/workspaces/q2/upgrade?dryRun=true"},
		} {
			if code, body := rest(t, tc.token, tc.method, tc.path, nil); code != 200 {
				t.Errorf("%s %s answered %d: %.300s", tc.method, tc.path, code, body)
			}
		}
	})
}
