package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestInitImageRefusesEveryCallerDerivedPlaceholder: the init container runs with
// nogoo9/init-secret in its environment, so what it runs (nogoo9/init-image) and where the AWS
// CLI sends its signed requests (nogoo9/init-s3-endpoint) are the template's alone: a caller
// chooses ${id}, ${name} and ${context.KEY}, and ${owner}, ${user} and ${pod} derive from a
// subject a person often picks (a GitHub login, an email address). Only ${template} and
// ${version} are taken there.
func TestInitImageRefusesEveryCallerDerivedPlaceholder(t *testing.T) {
	spec := `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"home","mountPath":"/h"}]}]}`
	id := Identity{Owner: "attacker-org", ID: "attacker-org", Name: "attacker-org", Context: map[string]string{"org": "attacker-org"}}
	for _, ann := range []string{workspace.AnnInitImage, workspace.AnnInitS3Endpoint} {
		value := map[string]string{workspace.AnnInitImage: "ghcr.io/%s/seed:1", workspace.AnnInitS3Endpoint: "https://%s.example.com"}[ann]
		for _, p := range []string{"${id}", "${user}", "${pod}", "${name}", "${owner}", "${context.org}"} {
			for _, roundTrip := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s round trip %v", ann, p, roundTrip), func(t *testing.T) {
					alwaysRoundTrip = roundTrip
					defer func() { alwaysRoundTrip = false }()
					tmpl := mustTemplate(t, map[string]string{workspace.AnnInitFrom: "s3://seeds/x/", workspace.AnnInitSecret: "s3-creds", ann: fmt.Sprintf(value, p)}, spec, homeClaim)
					pod, _, err := BuildPod(tmpl, id, "attacker-org")
					if err == nil {
						c := pod.Spec.InitContainers[0]
						t.Fatalf("built: init image %q, env %v, envFrom %s", c.Image, c.Env, c.EnvFrom[0].SecretRef.Name)
					}
					for _, w := range []string{ann, p, "${template}", "${version}"} {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error %q does not name %s", err, w)
						}
					}
				})
			}
		}
	}
	t.Run("${template} and ${version} are the template's own", func(t *testing.T) {
		for _, roundTrip := range []bool{false, true} {
			alwaysRoundTrip = roundTrip
			tmpl := mustTemplate(t, map[string]string{workspace.AnnInitFrom: "s3://seeds/x/", workspace.AnnInitSecret: "s3-creds",
				workspace.AnnInitImage: "ghcr.io/acme/${template}-seed:${version}", workspace.AnnInitS3Endpoint: "https://${template}.minio:9000"}, spec, homeClaim)
			pod, _, err := BuildPod(tmpl, id, "p")
			alwaysRoundTrip = false
			if err != nil {
				t.Fatal(err)
			}
			c, env := initContainer(t, pod)
			if c.Image != "ghcr.io/acme/node-seed:v1.2" || env["AWS_ENDPOINT_URL"] != "https://node.minio:9000" {
				t.Fatalf("round trip %v: image %q, endpoint %q", roundTrip, c.Image, env["AWS_ENDPOINT_URL"])
			}
		}
	})
}

// chain is every message in err's chain: none may echo an oversized input.
func chain(err error) []string {
	var msgs []string
	for ; err != nil; err = errors.Unwrap(err) {
		msgs = append(msgs, err.Error())
	}
	return msgs
}

// TestSpawnErrorsAndContextAreBounded: a refused spawn quotes at most the start of an oversized
// name, template, namespace, owner or context value; and the spawn's context, which lands in
// the pod's nogoo9/context annotation (kept by every replica's pod cache), is bounded: keys as
// nogoo9/required-context writes them, at most MaxContextKeys keys and MaxContextBytes bytes.
func TestSpawnErrorsAndContextAreBounded(t *testing.T) {
	s := New(nil, nil, templates.NewStatic(), Options{Namespace: "ns"})
	jane := Caller{Subject: "jane"}
	huge := strings.Repeat("\x01", 1<<20)
	big := map[string]string{}
	for i := range MaxContextKeys + 1 {
		big[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name string
		req  Request
		want []string
	}{
		{"a huge name without an id", Request{Name: huge, Template: "x", Caller: jane}, []string{"workspace name", "1048576 bytes"}},
		{"a huge name of letters without an id", Request{Name: strings.Repeat("a", 1<<20), Template: "x", Caller: jane}, []string{"workspace name", "1048576 bytes"}},
		{"a name without a letter or digit", Request{Name: "???", Template: "x", Caller: jane}, []string{`"???"`, "give a workspace id"}},
		{"a huge template name", Request{ID: "a", Template: huge, Caller: jane}, []string{"template name", "1048576 bytes", "DNS-1123"}},
		{"a huge namespace", Request{ID: "a", Template: "x", Namespace: strings.Repeat("a", 1<<20), Caller: jane}, []string{"namespace", "1048576 bytes", "not watched"}},
		{"a huge owner", Request{ID: "a", Template: "x", Owner: huge, Caller: jane}, []string{"only an admin", "1048576 bytes"}},
		{"too many context keys", Request{ID: "a", Template: "x", Context: big, Caller: jane}, []string{"65 keys", "at most 64"}},
		{"a huge context value", Request{ID: "a", Template: "x", Context: map[string]string{"repo": huge}, Caller: jane}, []string{"1048580 bytes", "at most 16384"}},
		{"a context just over its size", Request{ID: "a", Template: "x", Context: map[string]string{"repo": strings.Repeat("v", MaxContextBytes-3)}, Caller: jane}, []string{"16385 bytes", "at most 16384"}},
		{"a huge context key", Request{ID: "a", Template: "x", Context: map[string]string{huge: "v"}, Caller: jane}, []string{"1048577 bytes"}},
		{"a context key with a slash", Request{ID: "a", Template: "x", Context: map[string]string{"a/b": "v"}, Caller: jane}, []string{`context key "a/b"`, "letters, digits"}},
		{"an empty context key", Request{ID: "a", Template: "x", Context: map[string]string{"": "v"}, Caller: jane}, []string{`context key ""`}},
		{"a context key with a blank", Request{ID: "a", Template: "x", Context: map[string]string{"my key": "v"}, Caller: jane}, []string{`"my key"`}},
		{"a context key that is a placeholder", Request{ID: "a", Template: "x", Context: map[string]string{"${id}": "v"}, Caller: jane}, []string{`"${id}"`}},
		{"a long context key of control characters", Request{ID: "a", Template: "x", Context: map[string]string{strings.Repeat("\x01", 4000): "v"}, Caller: jane}, []string{"context key", "4000 bytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Spawn(t.Context(), tc.req)
			if CodeOf(err) != Invalid && CodeOf(err) != NotFound && CodeOf(err) != Forbidden {
				t.Fatalf("err = %.300v (code %q), want a refusal", err, CodeOf(err))
			}
			for _, msg := range chain(err) {
				if len(msg) >= 1024 {
					t.Errorf("a %d-byte error: %.300q...", len(msg), msg)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	// The limits themselves are taken: 64 keys, 16 KiB, every character a required key may have.
	atLimit := map[string]string{}
	for i := range MaxContextKeys - 1 {
		atLimit[fmt.Sprintf("k%02d", i)] = ""
	}
	atLimit["Key_with-every.char9"] = ""
	size := 0
	for k := range atLimit {
		size += len(k)
	}
	atLimit["k00"] = strings.Repeat("v", MaxContextBytes-size)
	if err := ValidateContext(atLimit); err != nil {
		t.Fatalf("a context at the limits: %v", err)
	}
	if err := ValidateContext(nil); err != nil {
		t.Fatalf("no context: %v", err)
	}
	// The keys ValidateContext takes are the keys nogoo9/required-context may name.
	for _, k := range []string{"repo", "a.b", "A_b-9", "a/b", "a b", "${x}", "ü", "a:b", "a}"} {
		_, tmplErr := templates.Decode("t", "test", map[string]string{workspace.AnnTemplateVersion: "1", workspace.AnnRequiredContext: k},
			map[string]string{"spec": `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}]}]}`})
		ctxErr := ValidateContext(map[string]string{k: "v"})
		if (tmplErr == nil) != (ctxErr == nil) {
			t.Errorf("key %q: nogoo9/required-context says %v, ValidateContext says %v", k, tmplErr, ctxErr)
		}
	}

	// BuildPod's own messages about a context (an upgrade renders a pod's stored context) and a
	// shell-unsafe value quote the start only.
	tmpl := mustTemplate(t, map[string]string{workspace.AnnPreStop: "echo ${context.msg}"}, `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}]}]}`, "")
	for name, ctx := range map[string]map[string]string{
		"a value that is not UTF-8":  {"msg": strings.Repeat("\xff", 16000)},
		"a key that is not UTF-8":    {strings.Repeat("\xff", 16000): "v", "msg": "x"},
		"a value a shell would read": {"msg": strings.Repeat("$", 16000)},
	} {
		_, _, err := BuildPod(tmpl, Identity{Owner: "jane", ID: "demo", Context: ctx}, "p")
		if err == nil {
			t.Fatalf("%s: built", name)
		}
		for _, msg := range chain(err) {
			if len(msg) >= 1024 {
				t.Errorf("%s: a %d-byte error: %.300q...", name, len(msg), msg)
			}
		}
	}
}

// TestSpawnTakesAContextAtItsLimits: a spawn whose context is at both limits is created, and the
// API server keeps the context whole in nogoo9/context.
func TestSpawnTakesAContextAtItsLimits(t *testing.T) {
	ctx, c, ns := setup(t)
	tmpl := mustTemplate(t, map[string]string{workspace.AnnRequiredContext: "k00"},
		`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"env":[{"name":"K","value":"${context.k00}"}]}]}`, "")
	s := New(c, c, templates.NewStatic(tmpl), Options{Namespace: ns})
	atLimit := map[string]string{}
	for i := range MaxContextKeys {
		atLimit[fmt.Sprintf("k%02d", i)] = ""
	}
	atLimit["k00"] = strings.Repeat("v", MaxContextBytes-3*MaxContextKeys)
	if _, err := s.Spawn(ctx, Request{Template: "node", ID: "limits", Context: atLimit, Caller: Caller{Subject: "jane"}}); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %v", pods.Items, err)
	}
	var stored map[string]string
	if err := json.Unmarshal([]byte(pods.Items[0].Annotations[workspace.AnnContext]), &stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != MaxContextKeys || stored["k00"] != atLimit["k00"] {
		t.Fatalf("stored context: %d keys, k00 of %d bytes", len(stored), len(stored["k00"]))
	}
	// One byte more is refused before anything is written.
	atLimit["k00"] += "v"
	if _, err := s.Spawn(ctx, Request{Template: "node", ID: "over", Context: atLimit, Caller: Caller{Subject: "jane"}}); CodeOf(err) != Invalid {
		t.Fatalf("err = %v, want Invalid", err)
	}
}
