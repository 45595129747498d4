package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// snapshot is every pod of the namespace by name with its resourceVersion: what "nothing created,
// changed or lost" is checked against.
func snapshot(t *testing.T) map[string]string {
	t.Helper()
	var l corev1.PodList
	if err := env.k8s.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, p := range l.Items {
		m[p.Name] = p.ResourceVersion
	}
	return m
}

func nested(n int) string { return strings.Repeat(`{"context":`, n) + `{}` + strings.Repeat(`}`, n) }

// TestHostileRESTInputGetsAClearErrorAndChangesNothing: every REST entry point, fed oversized,
// deeply nested, invalid UTF-8, NUL-laden, unicode and very long input, answers 4xx with a JSON
// error that says what is wrong, and no pod in the namespace is created, changed or deleted.
func TestHostileRESTInputGetsAClearErrorAndChangesNothing(t *testing.T) {
	skipShort(t)
	owner := fmt.Sprintf("hostile-%d", time.Now().UnixNano())
	victim := seed(t, owner, "victim", "1.0")
	before := snapshot(t)
	tok := userToken(owner)
	admin := adminToken("root")
	long := strings.Repeat("a", 100_000)
	spawn := func(fields string) string { return `{"template":"python",` + fields + `}` }
	// huge is 500 KB of a character no field accepts, for the query values and path segments
	// whose errors must quote only its start.
	huge := strings.Repeat("-", 500_000)
	cases := []struct {
		name, token, method, path, body string
		// field, when set, is what the error must name; the answer must then be short (< 1 KiB):
		// an error never echoes an oversized value whole.
		field string
	}{
		{"oversized spawn body (2 MiB)", tok, "POST", "/api/v1/workspaces", spawn(`"id":"big","context":{"repo":"` + strings.Repeat("r", 2<<20) + `"}`), ""},
		{"deeply nested JSON (100k levels)", tok, "POST", "/api/v1/workspaces", nested(100_000), ""},
		{"JSON that never ends", tok, "POST", "/api/v1/workspaces", strings.Repeat("[", 500_000), ""},
		{"invalid UTF-8 in the id", tok, "POST", "/api/v1/workspaces", spawn("\"id\":\"\xff\xfe\",\"context\":{\"repo\":\"r\"}"), ""},
		{"a NUL byte in the id", tok, "POST", "/api/v1/workspaces", spawn(`"id":"a\u0000b","context":{"repo":"r"}`), ""},
		{"a raw NUL byte in the body", tok, "POST", "/api/v1/workspaces", "{\"template\":\"python\",\x00\"id\":\"x\"}", ""},
		{"a unicode id", tok, "POST", "/api/v1/workspaces", spawn(`"id":"wörk-ü","context":{"repo":"r"}`), ""},
		{"a right-to-left override in the id", tok, "POST", "/api/v1/workspaces", spawn(`"id":"a\u202eb","context":{"repo":"r"}`), ""},
		{"a 100k-character id", tok, "POST", "/api/v1/workspaces", spawn(`"id":"` + long + `","context":{"repo":"r"}`), ""},
		{"a 100k-character name and no id", tok, "POST", "/api/v1/workspaces", spawn(`"name":"` + strings.Repeat("é", 50_000) + `","context":{"repo":"r"}`), ""},
		{"an unknown field", tok, "POST", "/api/v1/workspaces", spawn(`"id":"x","context":{"repo":"r"},"spec":{"hostNetwork":true}`), ""},
		{"the id of an existing workspace", tok, "POST", "/api/v1/workspaces", spawn(`"id":"victim","context":{"repo":"r"}`), ""},
		{"two JSON objects", tok, "POST", "/api/v1/workspaces", spawn(`"id":"two","context":{"repo":"r"}`) + spawn(`"id":"three"`), ""},
		{"a get of a 100k-character id", tok, "GET", "/api/v1/workspaces/" + long, "", ""},
		{"a get of an id with an encoded NUL", tok, "GET", "/api/v1/workspaces/a%00b", "", ""},
		{"a get of an id with encoded CRLF", tok, "GET", "/api/v1/workspaces/a%0D%0ASet-Cookie:x", "", ""},
		{"a get of an invalid UTF-8 id", tok, "GET", "/api/v1/workspaces/%FF%FE", "", ""},
		{"an upgrade of a unicode id", tok, "POST", "/api/v1/workspaces/" + url.PathEscape("vïctim") + "/upgrade", "", ""},
		{"a delete of a 100k-character id", tok, "DELETE", "/api/v1/workspaces/" + long, "", ""},
		{"events of a NUL id", tok, "GET", "/api/v1/workspaces/a%00b/events", "", ""},
		{"events with an absurd timeout", tok, "GET", "/api/v1/workspaces/victim/events?follow=true&timeout=99999999h", "", ""},
		{"a list with a limit that overflows", tok, "GET", "/api/v1/workspaces?limit=99999999999999999999999", "", ""},
		{"a list with a garbage continue token", tok, "GET", "/api/v1/workspaces?continue=%00%FF" + long[:1000], "", ""},
		{"maintenance with an oversized reason (2 MiB)", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `{"reason":"` + strings.Repeat("m", 2<<20) + `"}`, ""},
		{"maintenance with a deeply nested body", admin, "PUT", "/api/v1/workspaces/victim/maintenance", strings.Repeat(`{"reason":`, 100_000), ""},
		{"maintenance with a reason of only blanks", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `{"reason":" \t\n "}`, ""},
		{"maintenance by its owner, not an admin", tok, "PUT", "/api/v1/workspaces/victim/maintenance", `{"reason":"mine"}`, ""},
		// Oversized values: the error names the field and quotes only the start.
		{"a 500 KB template name", tok, "POST", "/api/v1/workspaces", `{"template":"` + huge + `","id":"big-tpl"}`, "template"},
		{"a 500 KB template name in a history path", tok, "GET", "/api/v1/templates/" + huge + "/history", "", "template"},
		{"a 500 KB template name in a rollback path", admin, "POST", "/api/v1/templates/" + huge + "/rollback", `{"version":"1.0"}`, "template"},
		{"a 500 KB namespace", tok, "GET", "/api/v1/namespaces/" + huge + "/workspaces/victim", "", "namespace"},
		{"a 500 KB namespace with allNamespaces", tok, "GET", "/api/v1/namespaces/" + huge + "/workspaces?allNamespaces=true", "", "allNamespaces"},
		{"a 500 KB until", tok, "GET", "/api/v1/workspaces/victim/events?follow=true&until=" + huge, "", "until"},
		{"a 500 KB timeout", tok, "GET", "/api/v1/workspaces/victim/events?follow=true&timeout=" + huge, "", "timeout"},
		{"a 500 KB limit", tok, "GET", "/api/v1/workspaces?limit=" + huge, "", "limit"},
		{"a 500 KB follow", tok, "GET", "/api/v1/workspaces/victim/events?follow=" + huge, "", "follow"},
		{"until without follow", tok, "GET", "/api/v1/workspaces/victim/events?until=UpgradeSucceeded", "", "follow=true"},
		{"a timeout without follow", tok, "GET", "/api/v1/workspaces/victim/events?follow=false&timeout=5s", "", "follow=true"},
		{"a 500 KB all", tok, "GET", "/api/v1/workspaces?all=" + huge, "", "all"},
		{"a 500 KB allNamespaces", tok, "GET", "/api/v1/workspaces?allNamespaces=" + huge, "", "allNamespaces"},
		{"a 500 KB dryRun", tok, "POST", "/api/v1/workspaces/victim/upgrade?dryRun=" + huge, "", "dryRun"},
		{"a 500 KB version in an admin's upgrade", admin, "POST", "/api/v1/workspaces/victim/upgrade?version=" + huge, "", "version"},
		{"a 500 KB version in a template rollback", admin, "POST", "/api/v1/templates/python/rollback", `{"version":"` + huge + `"}`, "version"},
		{"a 500 KB path no route has", tok, "GET", "/api/v1/" + huge, "", "no endpoint"},
		{"a 500 KB path with a method it does not have", tok, "PATCH", "/api/v1/workspaces/" + huge, "", "PATCH"},
		{"a 500 KB unknown field", tok, "POST", "/api/v1/workspaces", spawn(`"id":"big-key","` + huge + `":1`), "field"},
		// JSON the documentation refuses: one object and nothing after it, fields spelled
		// exactly, each given once.
		{"a stray brace after the object", tok, "POST", "/api/v1/workspaces", spawn(`"id":"brace","context":{"repo":"r"}`) + "}", "after the JSON object"},
		{"a stray bracket after the object", tok, "POST", "/api/v1/workspaces", spawn(`"id":"bracket","context":{"repo":"r"}`) + "]", "after the JSON object"},
		{"garbage after the object", tok, "POST", "/api/v1/workspaces", spawn(`"id":"garbage","context":{"repo":"r"}`) + " x", "after the JSON object"},
		{"a field in upper case", tok, "POST", "/api/v1/workspaces", `{"TEMPLATE":"python","id":"upper","context":{"repo":"r"}}`, `"TEMPLATE"`},
		{"a field in another case", tok, "POST", "/api/v1/workspaces", `{"Template":"python","id":"title","context":{"repo":"r"}}`, `"Template"`},
		{"case variants of one field", tok, "POST", "/api/v1/workspaces", `{"TEMPLATE":"a","template":"python","Template":"c","id":"variants","context":{"repo":"r"}}`, `"TEMPLATE"`},
		{"a field given twice", tok, "POST", "/api/v1/workspaces", `{"template":"nope","template":"python","id":"twice","context":{"repo":"r"}}`, `"template"`},
		{"a context key given twice", tok, "POST", "/api/v1/workspaces", `{"template":"python","id":"ctx-twice","context":{"repo":"a","repo":"r"}}`, `"repo"`},
		{"a maintenance reason in another case", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `{"Reason":"disk full"}`, `"Reason"`},
		{"a maintenance reason given twice", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `{"reason":"","reason":"disk full"}`, `"reason"`},
		{"a body that is not an object", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `null`, "object"},
		// A reason the API server would refuse (annotations are at most 256 KiB) was a 500 "try
		// again"; one with a line break was stored.
		{"maintenance with a 300 KB reason", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `{"reason":"` + strings.Repeat("m", 300_000) + `"}`, "(300000 bytes) is 300000 bytes long"},
		{"maintenance with a line break in its reason", admin, "PUT", "/api/v1/workspaces/victim/maintenance", `{"reason":"disk\nfull"}`, "control character"},
		// Bodies and query parameters a route does not take.
		{"an upgrade with a body", tok, "POST", "/api/v1/workspaces/victim/upgrade", `{"dryRun":true}`, `"dryRun"`},
		{"a delete with a parameter it does not take", tok, "DELETE", "/api/v1/workspaces/victim?dryRun=All", "", `"dryRun"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rest(t, tc.token, tc.method, tc.path, tc.body)
			if code < 400 || code >= 500 {
				t.Fatalf("%s %s answered %d: %.300s", tc.method, tc.path[:min(len(tc.path), 80)], code, body)
			}
			var e struct{ Error, Code string }
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || len(e.Error) > 2000 {
				t.Fatalf("answer %d is not a short JSON error: %.300s", code, body)
			}
			if strings.Contains(e.Error, "goroutine") || strings.Contains(e.Error, "panic") {
				t.Fatalf("the error leaks internals: %s", e.Error)
			}
			if tc.field != "" && (!strings.Contains(e.Error, tc.field) || len(body) >= 1024) {
				t.Fatalf("answer %d (%d bytes) does not name %s in under 1 KiB: %.300s", code, len(body), tc.field, body)
			}
		})
	}
	g := NewWithT(t)
	g.Expect(snapshot(t)).To(Equal(before), "a hostile request created, changed or deleted a pod")
	got, err := getPod(t, victim.Name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Annotations[workspace.AnnMaintenance]).To(BeEmpty())
	g.Expect(got.Annotations[workspace.AnnOwner]).To(Equal(owner))
}

// TestHostileHeadersAreRefusedBeforeAnyHandler: header values with a bare CR, a NUL byte or an
// oversized Authorization header never reach the API's handlers (net/http answers 400 or 431),
// and a token for a very long or unicode subject is either served with the subject intact or
// refused with an error.
func TestHostileHeadersAreRefusedBeforeAnyHandler(t *testing.T) {
	skipShort(t)
	before := snapshot(t)
	u, _ := url.Parse(env.server.URL)
	raw := func(t *testing.T, req string) int {
		t.Helper()
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no HTTP answer: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	body := `{"template":"python","id":"crlf","context":{"repo":"r"}}`
	post := func(hdr string) string {
		return "POST /api/v1/workspaces HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\n" + hdr +
			fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(body)) + body
	}
	tok := userToken(fmt.Sprintf("hdr-%d", time.Now().UnixNano()))
	for name, req := range map[string]string{
		"a bare CR inside the Authorization value":  post("Authorization: Bearer " + tok + "\rX-Evil: 1\r\n"),
		"a NUL byte inside the Authorization value": post("Authorization: Bearer " + tok + "\x00x\r\n"),
		"a 2 MiB Authorization header":              post("Authorization: Bearer " + strings.Repeat("A", 2<<20) + "\r\n"),
		"a header name with a space":                post("Bad Header: x\r\nAuthorization: Bearer " + tok + "\r\n"),
	} {
		t.Run(name, func(t *testing.T) {
			if code := raw(t, req); code < 400 || code >= 500 {
				t.Fatalf("answered %d", code)
			}
		})
	}
	for name, sub := range map[string]string{
		"a 10k-character subject": strings.Repeat("s", 10_000),
		"a unicode subject":       "ü@ß.example\u202e|𝔘",
		"a subject with CRLF":     "jane\r\nSet-Cookie: x=y",
	} {
		t.Run(name, func(t *testing.T) {
			code, b := rest(t, userToken(sub), "GET", "/api/v1/whoami", nil)
			if code >= 500 {
				t.Fatalf("whoami answered %d: %.300s", code, b)
			}
			if code == 200 {
				var who struct{ Subject string }
				if err := json.Unmarshal(b, &who); err != nil || who.Subject != sub {
					t.Fatalf("whoami = %.300s, want the subject unchanged", b)
				}
			}
		})
	}
	NewWithT(t).Expect(snapshot(t)).To(Equal(before))
}
