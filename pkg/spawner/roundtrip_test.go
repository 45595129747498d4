package spawner

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestBuildPodSkipsTheRoundTripOnlyWhereItChangesNothing renders every case of renderCases once
// as BuildPod does (the spec expanded from the template's program, computed once per template,
// the injections' values one by one; nothing expanded without a "${") and once through the
// whole spec's JSON round trip after the injections every time, as before. Both must give the
// same pods and claims, the same JSON to the API server, and the same errors. And BuildPod must
// render from the program exactly where the case says it does: renderSpec falls back to the
// round trip whenever the program fails, so a lost fast path would go unnoticed otherwise.
func TestBuildPodSkipsTheRoundTripOnlyWhereItChangesNothing(t *testing.T) {
	renders := renderCases(t)
	build := func(r render, roundTrip bool) (string, []byte, any, error) {
		t.Helper()
		alwaysRoundTrip = roundTrip
		defer func() { alwaysRoundTrip = false }()
		pod, pvcs, err := BuildPod(r.tmpl, r.id, workspace.PodName(r.id.Owner, r.id.ID))
		if err != nil {
			return err.Error(), nil, nil, err
		}
		b, jerr := json.Marshal(struct {
			Pod  any `json:"pod"`
			PVCs any `json:"pvcs"`
		}{pod, pvcs})
		if jerr != nil {
			t.Fatal(jerr)
		}
		return "", b, struct {
			Pod  any
			PVCs any
		}{pod, pvcs}, nil
	}
	errs := 0
	for _, r := range renders {
		t.Run(r.name, func(t *testing.T) {
			if err := fromProgram(r); (err == nil) == r.roundTrip {
				t.Errorf("rendered from the program: %v (%v), want %v", err == nil, err, !r.roundTrip)
			}
			fastErr, fastJSON, fast, err := build(r, false)
			slowErr, slowJSON, slow, _ := build(r, true)
			if fastErr != slowErr {
				t.Fatalf("errors differ:\n without the round trip: %s\n with it:                %s", fastErr, slowErr)
			}
			if err != nil {
				errs++
				return
			}
			if string(fastJSON) != string(slowJSON) {
				t.Errorf("the JSON sent differs:\n without the round trip: %s\n with it:                %s", fastJSON, slowJSON)
			}
			// In memory an empty list the template wrote ("tolerations": []) stays empty without
			// the round trip and comes back nil through it (omitempty): the same JSON, and nogoo9
			// compares no pod in memory. Anything else must be equal, quantities' forms included.
			if d := cmp.Diff(fast, slow, cmpopts.EquateEmpty(), cmp.Exporter(func(reflect.Type) bool { return true })); d != "" {
				t.Errorf("the objects differ (-without the round trip +with it):\n%s", d)
			}
		})
	}
	if errs != 4 {
		t.Errorf("%d renders failed, want the 4 made to fail", errs)
	}
}

// A template with a placeholder goes through JSON, from its program or the whole spec's round
// trip; its numbers must come back as the template wrote them (decoded as float64, an integer
// above 2^53 came back altered).
func TestBuildPodKeepsLargeIntegersThroughTheRoundTrip(t *testing.T) {
	const big = int64(1)<<53 + 1
	spec := fmt.Sprintf(`{"terminationGracePeriodSeconds":%d,"containers":[{"name":"ide","image":"b:${id}","ports":[{"containerPort":80}]}]}`, big)
	id := Identity{Owner: "jane", ID: "demo"}
	for name, roundTrip := range map[string]bool{"from the template's program": false, "through the whole spec's round trip": true} {
		t.Run(name, func(t *testing.T) {
			alwaysRoundTrip = roundTrip
			defer func() { alwaysRoundTrip = false }()
			tmpl := mustTemplate(t, nil, spec, "")
			pod, _, err := BuildPod(tmpl, id, workspace.PodName(id.Owner, id.ID))
			if err != nil {
				t.Fatal(err)
			}
			if got := pod.Spec.TerminationGracePeriodSeconds; got == nil || *got != big {
				t.Errorf("terminationGracePeriodSeconds = %v, want %d", got, big)
			}
			if img := pod.Spec.Containers[0].Image; img != "b:demo" {
				t.Errorf("image = %q, want b:demo (the placeholder expanded)", img)
			}
			if err := fromProgram(render{tmpl: tmpl, id: id}); !roundTrip && err != nil {
				t.Errorf("not rendered from the program: %v", err)
			}
		})
	}
}

// render is one of renderCases: a template and the identity to render it for.
type render struct {
	name string
	tmpl *templates.Template
	id   Identity
	// roundTrip: BuildPod renders it through the round trip, not from the template's program
	// (a name holds a placeholder, or the program's render fails).
	roundTrip bool
}

// fromProgram is why BuildPod would not render r from its template's program (nil: it would):
// renderSpec's conditions, and renderProgrammed's error.
func fromProgram(r render) error {
	progs := programsOf(r.tmpl)
	if progs == nil || progs.spec == nil {
		return fmt.Errorf("the template has no program for its spec")
	}
	exp, err := r.tmpl.Expansion()
	if err != nil {
		return err
	}
	if !injectsNoPlaceholderNames(exp) {
		return fmt.Errorf("an injection names a volume or container with a placeholder")
	}
	_, _, err = renderProgrammed(r.tmpl, progs, exp, r.id, podVars(r.tmpl, r.id, workspace.PodName(r.id.Owner, r.id.ID), map[string]string{}))
	return err
}

// renderCases are every sample in config/samples, each also with its placeholders written out
// as plain text, and the shapes the spawner's tests use (init containers from S3 and a
// ConfigMap, a preStop hook, claims, a claim a volume refers to, names with placeholders that
// the binding or an injection matches), four of them made to fail.
func renderCases(t *testing.T) []render {
	t.Helper()
	ctx := map[string]string{"repo": "https://example.com/r.git", "class": "fast"}
	id := Identity{Owner: "auth0|Jane", ID: "demo", Name: "My Demo", Context: ctx, Namespace: "team-a"}
	placeholder := regexp.MustCompile(`\$?\$\{[^}]*\}`)
	var renders []render
	loaded, err := templates.LoadDir("../../config/samples")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loaded {
		if l.Err != nil {
			t.Fatalf("sample %s: %v", l.Name, l.Err)
		}
		renders = append(renders, render{"sample " + l.Name, l.Template, id, false})
		// The same sample without a placeholder: the path without the round trip.
		plain := l.Template.DeepCopy()
		b, err := json.Marshal(plain.Spec)
		if err != nil {
			t.Fatal(err)
		}
		plain.Spec.Reset()
		if err := json.Unmarshal(placeholder.ReplaceAll(b, []byte("literal")), &plain.Spec); err != nil {
			t.Fatal(err)
		}
		for i := range plain.VolumeClaims {
			b, err := json.Marshal(plain.VolumeClaims[i].Spec)
			if err != nil {
				t.Fatal(err)
			}
			plain.VolumeClaims[i].Spec.Reset()
			if err := json.Unmarshal(placeholder.ReplaceAll(b, []byte("literal")), &plain.VolumeClaims[i].Spec); err != nil {
				t.Fatal(err)
			}
		}
		for k, v := range plain.Annotations {
			plain.Annotations[k] = placeholder.ReplaceAllString(v, "literal")
		}
		renders = append(renders, render{"sample " + l.Name + " without placeholders", plain, id, false})
	}
	initSpec := `{"initContainers":[{"name":"own","image":"x"}],"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"home","mountPath":"/h"}],"resources":{"requests":{"cpu":"250m","memory":"1Gi"},"limits":{"memory":"2Gi"}}}],"tolerations":[],"nodeSelector":{"disk":"ssd"}}`
	plainClaims := strings.Replace(claims, "${context.class}", "std", 1)
	names := id
	names.Context = map[string]string{"vol": "home", "container": "ide"}
	for _, tc := range []struct {
		name         string
		ann          map[string]string
		spec, claims string
		id           Identity
		// roundTrip: BuildPod takes the round trip (the program is not used, or its render fails).
		roundTrip bool
	}{
		{"the benchmark's template", nil, benchSpec, benchClaims, id, false},
		{"placeholders in spec and claims", nil, nodeSpec, claims, id, false},
		{"only a claim with a placeholder", nil, benchSpec, claims, id, false},
		{"only the spec with placeholders", nil, nodeSpec, plainClaims, id, false},
		{"an escaped $${ and nothing else", nil, `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"args":["$${HOME}"]}]}`, "", id, false},
		{"a placeholder in a map key only (keys are never expanded)", nil, `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}]}],"nodeSelector":{"${id}":"x"}}`, "", id, false},
		{"init from S3 with a per-user prefix", map[string]string{workspace.AnnInitFrom: "s3://seeds/${user}/base", workspace.AnnInitSecret: "s3-creds", workspace.AnnInitS3Endpoint: "http://minio:9000"}, initSpec, plainClaims, id, false},
		{"init from a ConfigMap, no placeholder", map[string]string{workspace.AnnInitFrom: "configmap:seed", workspace.AnnInitImage: "busybox:stable"}, initSpec, plainClaims, id, false},
		{"a preStop hook with a placeholder", map[string]string{workspace.AnnPreStop: "flush ${id}"}, benchSpec, benchClaims, id, false},
		{"a claim a volume refers to, and a preStop hook", map[string]string{workspace.AnnPreStop: "sync"}, `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"data","mountPath":"/d"}]}],
 "volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"home"}}]}`, plainClaims, id, false},
		{"a preStop hook without one", map[string]string{workspace.AnnPreStop: "sync", workspace.AnnTerminationGrace: "120"}, benchSpec, benchClaims, id, false},
		// A placeholder in a name the claims' binding or an injection matches: the round trip
		// matches before it expands (namesHoldPlaceholders keeps such a spec on it), a program
		// would match the expanded name.
		{"a claimName whose placeholder expands to a claim's name (kept raw, the claim gets its own volume)", nil,
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"data","mountPath":"/d"}]}],
 "volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"${context.vol}"}}]}`, plainClaims, names, true},
		{"a volume name whose placeholder expands to the claim nogoo9/init-volume names", map[string]string{workspace.AnnInitFrom: "configmap:seed", workspace.AnnInitVolume: "home"},
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"data","mountPath":"/d"}]}],
 "volumes":[{"name":"${context.vol}","persistentVolumeClaim":{"claimName":"home"}},{"name":"data","persistentVolumeClaim":{"claimName":"home"}}]}`, plainClaims, names, true},
		{"a container name whose placeholder expands to the preStop hook's container", map[string]string{workspace.AnnPreStop: "sync", workspace.AnnPreStopContainer: "ide"},
			`{"containers":[{"name":"${context.container}","image":"b","ports":[{"containerPort":80}]},{"name":"ide","image":"c"}]}`, "", names, true},
		{"nogoo9/init-volume naming a volume with a placeholder in its name", map[string]string{workspace.AnnInitFrom: "configmap:seed", workspace.AnnInitVolume: "${context.vol}"},
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}]}],"volumes":[{"name":"${context.vol}","emptyDir":{}}]}`, "", names, true},
		{"nogoo9/pre-stop-container naming a container with a placeholder in its name", map[string]string{workspace.AnnPreStop: "sync", workspace.AnnPreStopContainer: "${context.container}"},
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}]},{"name":"${context.container}","image":"c"}]}`, "", names, true},
		// Values with "$" in fields the kubelet expands (doubled there) and in others (as they are).
		{"caller values with $ in fields the kubelet expands, an init source and endpoint", map[string]string{
			workspace.AnnInitFrom: "s3://seeds/${context.repo}/", workspace.AnnInitSecret: "s3-creds", workspace.AnnInitS3Endpoint: "https://${template}.minio:${version}"},
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"command":["sh","-c","echo ${name} $(basename ${id})"],
 "args":["$(POD)${context.repo}$(POD)","${owner}"],"env":[{"name":"POD","value":"${pod}"},{"name":"R","value":"$${context.repo} ${context.repo}"}],
 "volumeMounts":[{"name":"home","mountPath":"/h","subPathExpr":"$(POD)/${id}"}],"startupProbe":{"exec":{"command":["t","${context.repo}"]}},
 "lifecycle":{"postStart":{"exec":{"command":["echo","${context.repo}"]}}}}],"nodeSelector":{"repo":"${context.class}"}}`, plainClaims,
			Identity{Owner: "auth0|$(X)$", ID: "demo", Name: "$(Y)$$", Context: map[string]string{"repo": "$(AWS_SECRET_ACCESS_KEY)$", "class": "a$b"}}, false},
		{"a context value the spawn did not give", nil, nodeSpec, plainClaims, Identity{Owner: "jane", ID: "demo"}, true},
		{"a placeholder that would name the variable of a template's $(...) reference", nil,
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"env":[{"name":"X","value":"$(AWS_${context.repo})"}]}]}`, "", id, true},
		{"an unknown placeholder", nil, `{"containers":[{"name":"ide","image":"b:${nope}","ports":[{"containerPort":80}]}]}`, "", id, true},
		{"an unclosed placeholder", nil, `{"containers":[{"name":"ide","image":"b:${id","ports":[{"containerPort":80}]}]}`, "", id, true},
	} {
		renders = append(renders, render{tc.name, mustTemplate(t, tc.ann, tc.spec, tc.claims), tc.id, tc.roundTrip})
	}

	return renders
}

// TestBuildPodNeverWritesIntoItsTemplate: BuildPod reads the template it is given and writes
// into none of it, with or without the JSON round trip, whatever it injects or binds, so callers
// may hand it the registry's own value (templates.Shared: the spawner, the front end's upgrade
// preview, the upgrade controller); nor into the program it keeps with the template: a second
// render, for another workspace, gives what the round trip makes of a fresh copy for it. A write
// into a copy of the template's spec that shares its containers or volumes (a shallow copy), or
// of an expanded value into the program, fails it.
func TestBuildPodNeverWritesIntoItsTemplate(t *testing.T) {
	tmplType := reflect.TypeFor[templates.Template]()
	render := func(tmpl *templates.Template, id Identity, roundTrip bool) string {
		alwaysRoundTrip = roundTrip
		defer func() { alwaysRoundTrip = false }()
		pod, pvcs, err := BuildPod(tmpl, id, workspace.PodName(id.Owner, id.ID))
		b, _ := json.Marshal([]any{pod, pvcs, fmt.Sprint(err)})
		return string(b)
	}
	for _, r := range renderCases(t) {
		t.Run(r.name, func(t *testing.T) {
			before := r.tmpl.DeepCopy()
			other := Identity{Owner: "bob@example.com", ID: "other", Name: "Other", Namespace: "team-b"}
			for k, v := range r.id.Context {
				if other.Context == nil {
					other.Context = map[string]string{}
				}
				other.Context[k] = v + "-2"
			}
			want := render(before.DeepCopy(), other, true)
			for i, step := range []struct {
				id        Identity
				roundTrip bool
			}{{r.id, false}, {other, false}, {r.id, true}, {other, false}} {
				got := render(r.tmpl, step.id, step.roundTrip)
				// The template's memo (Derived) is written once by design; the rest never.
				if d := cmp.Diff(before, r.tmpl, cmpopts.IgnoreUnexported(templates.Template{}), cmp.Exporter(func(t reflect.Type) bool { return t != tmplType })); d != "" {
					t.Fatalf("render %d (round trip %v) wrote into its template (-before +after):\n%s", i, step.roundTrip, d)
				}
				if step.id.ID == other.ID && got != want {
					t.Fatalf("render %d, for another workspace after the first, differs from the round trip's of a fresh copy:\n%s\n%s", i, got, want)
				}
			}
		})
	}
}

// TestBuildPodRendersACopyByAssignmentFromItsOwnSpec: a copy of a template made by assignment
// (c := *t, as a test's fake registry may hand out) shares its original's Derived slot; changed
// after the original was rendered, it still renders from its own spec, not the original's
// program, and the original keeps rendering from its own.
func TestBuildPodRendersACopyByAssignmentFromItsOwnSpec(t *testing.T) {
	tmpl := mustTemplate(t, nil, nodeSpec, claims)
	id := Identity{Owner: "jane", ID: "demo", Context: map[string]string{"repo": "r.git", "class": "fast"}}
	image := func(tmpl *templates.Template) string {
		t.Helper()
		pod, _, err := BuildPod(tmpl, id, "p")
		if err != nil {
			t.Fatal(err)
		}
		return pod.Spec.Containers[0].Image
	}
	if got := image(tmpl); got != "node:22" {
		t.Fatalf("image = %q, want node:22", got)
	}
	c := *tmpl
	c.Spec = *tmpl.Spec.DeepCopy()
	c.Spec.Containers[0].Image = "node:24-${id}"
	if got := image(&c); got != "node:24-demo" {
		t.Errorf("the copy's image = %q, want node:24-demo (its own spec's)", got)
	}
	if got := image(tmpl); got != "node:22" {
		t.Errorf("the original's image after its copy's render = %q, want node:22", got)
	}
}

// TestBuildPodTakesTheRoundTripWhenTheTemplatesSlotHoldsSomethingElse: Derived has one slot per
// template value; when another build filled it first, BuildPod renders through the round trip
// instead of failing (or panicking on the slot's type).
func TestBuildPodTakesTheRoundTripWhenTheTemplatesSlotHoldsSomethingElse(t *testing.T) {
	tmpl := mustTemplate(t, nil, nodeSpec, claims)
	if got := tmpl.Derived(func(*templates.Template) any { return "another build's" }); got != "another build's" {
		t.Fatalf("Derived = %v", got)
	}
	if p := programsOf(tmpl); p != nil {
		t.Errorf("programsOf = %v, want nil", p)
	}
	id := Identity{Owner: "jane", ID: "demo", Context: map[string]string{"repo": "r.git", "class": "fast"}}
	pod, _, err := BuildPod(tmpl, id, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Args; strings.Join(got, " ") != "--user "+workspace.UserLabel("jane")+" --ws demo" {
		t.Errorf("args = %q, want the placeholders expanded", got)
	}
}
