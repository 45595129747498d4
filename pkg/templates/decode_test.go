package templates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

const goodSpec = `{"containers":[{"name":"ide","image":"node:22","ports":[{"containerPort":3000}],
  "volumeMounts":[{"name":"home","mountPath":"/home/node"}]}]}`

const goodClaims = `[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]`

func ann(kv ...string) map[string]string {
	m := map[string]string{workspace.AnnTemplateVersion: "1"}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<delete>" {
			delete(m, kv[i])
			continue
		}
		m[kv[i]] = kv[i+1]
	}
	return m
}

// A template name's error names the field and quotes only the start of an oversized name,
// marked as cut: a 500 KB name must not make a 2 MB error.
func TestValidateNameQuotesOnlyTheStartOfAnOversizedName(t *testing.T) {
	for _, big := range []string{strings.Repeat("\x01", 500_000), strings.Repeat("-", 500_000), strings.Repeat("é", 250_000)} {
		err := ValidateName(big)
		if err == nil {
			t.Fatalf("a %d-byte name was accepted", len(big))
		}
		if msg := err.Error(); len(msg) >= 1024 || !strings.Contains(msg, "template name") || !strings.Contains(msg, "...") {
			t.Errorf("a %d-byte name: a %d-byte error that must name the template name and quote a cut start: %.300q", len(big), len(msg), msg)
		}
		if _, err := Decode(big, "test", ann(), map[string]string{"spec": goodSpec}); err == nil {
			t.Errorf("Decode of a %d-byte name succeeded", len(big))
		} else if len(err.Error()) >= 1024 {
			t.Errorf("Decode of a %d-byte name: a %d-byte error, want under 1 KiB", len(big), len(err.Error()))
		}
	}
	if err := ValidateName("Node_1"); err == nil || !strings.Contains(err.Error(), `template name "Node_1" is not valid`) {
		t.Errorf("a short bad name is quoted whole: %v", err)
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		tmpl    string
		ann     map[string]string
		data    map[string]string
		wantErr []string // substrings; empty: must decode
	}{
		{name: "a spec with a container, a claim and a version decodes", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}},
		{name: "a spec without claims decodes", tmpl: "plain", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}]}]}`}},
		{name: "a missing version annotation is refused", tmpl: "node", ann: ann(workspace.AnnTemplateVersion, "<delete>"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{"nogoo9/template-version", "missing"}},
		{name: "a blank version is refused", tmpl: "node", ann: ann(workspace.AnnTemplateVersion, "  "),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{"nogoo9/template-version"}},
		{name: "a missing spec key is refused", tmpl: "node", ann: ann(),
			data: map[string]string{}, wantErr: []string{"data.spec is missing"}},
		{name: "an unknown data key is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims, "specc": "{}"}, wantErr: []string{`data key "specc"`}},
		{name: "bad JSON names line and column", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": "{\"containers\": [\n  {\"name\": \"a\",, \"image\": \"b\"}]}"}, wantErr: []string{"data.spec: invalid JSON at line 2, column 16"}},
		{name: "an unknown field names its path", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"a","image":"b","imagee":"c"}]}`}, wantErr: []string{"data.spec", `containers[0].imagee`}},
		{name: "a duplicate field is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"a","image":"b","image":"c"}]}`}, wantErr: []string{"data.spec", "duplicate"}},
		{name: "a wrong type names the field and position", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":"x"}]}]}`}, wantErr: []string{"data.spec", "containerPort", "line 1"}},
		{name: "a spec without containers is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[]}`}, wantErr: []string{"no containers"}},
		{name: "a container without an image is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"a"}]}`}, wantErr: []string{`data.spec: container "a" has no image: set "image"`}},
		{name: "a mount of an undeclared volume is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": goodSpec}, wantErr: []string{`data.spec: container "ide" mounts volume "home", which is neither in spec.volumes nor in data.volumeClaims: add it, or fix the mount (volumes: []; claims: [])`}},
		{name: "a mount of an undeclared volume lists the volumes and claims there are", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"ide","image":"node:22","ports":[{"containerPort":3000}],
  "volumeMounts":[{"name":"home","mountPath":"/home/node"}]}],"volumes":[{"name":"cache","emptyDir":{}}]}`,
				"volumeClaims": `[{"metadata":{"name":"work"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]`},
			wantErr: []string{`(volumes: [cache]; claims: [work])`}},
		{name: "a claim without a name says what to give", tmpl: "node", ann: ann(),
			data:    map[string]string{"spec": goodSpec, "volumeClaims": `[{"metadata":{},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]`},
			wantErr: []string{"claim #1 has no metadata.name: give every claim a name"}},
		{name: "a claim name used twice says what to do", tmpl: "node", ann: ann(),
			data:    map[string]string{"spec": goodSpec, "volumeClaims": "[" + strings.Trim(goodClaims, "[]") + "," + strings.Trim(goodClaims, "[]") + "]"},
			wantErr: []string{`claim name "home" is used twice: give each claim a name of its own`}},
		{name: "init-secret on a ConfigMap source names it and what to do", tmpl: "node", ann: ann(workspace.AnnInitFrom, "configmap:seed", workspace.AnnInitSecret, "aws"),
			data:    map[string]string{"spec": goodSpec, "volumeClaims": goodClaims},
			wantErr: []string{`annotation nogoo9/init-secret applies to s3:// sources only, and nogoo9/init-from is "configmap:seed", a ConfigMap: remove it, or fill the volume from s3://bucket/prefix`}},
		{name: "an unknown field in a claim is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": goodSpec, "volumeClaims": `[{"metadata":{"name":"home"},"spec":{"accesModes":["ReadWriteOnce"]}}]`}, wantErr: []string{"data.volumeClaims", "accesModes"}},
		{name: "a claim without a size is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": goodSpec, "volumeClaims": `[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"]}}]`}, wantErr: []string{"storage"}},
		{name: "an invalid template name is refused", tmpl: "Node_JS", ann: ann(),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{`template name "Node_JS"`}},
		{name: "a template without any port is refused", tmpl: "node", ann: ann(),
			data: map[string]string{"spec": `{"containers":[{"name":"a","image":"b"}]}`}, wantErr: []string{"no workspace port", "nogoo9/workspace-port"}},
		{name: "a bad port annotation is refused", tmpl: "node", ann: ann(workspace.AnnPreviewPort, "http"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{"nogoo9/preview-port", `"http"`}},
		{name: "an init source with an unknown scheme is refused", tmpl: "node", ann: ann(workspace.AnnInitFrom, "http://x"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{"nogoo9/init-from", "s3://"}},
		{name: "an init volume that does not exist is refused", tmpl: "node", ann: ann(workspace.AnnInitFrom, "s3://b/p", workspace.AnnInitVolume, "nope"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{`annotation nogoo9/init-volume is "nope", which is neither a volume of the spec nor a volume claim: use one of [home]`}},
		{name: "a pre-stop container that does not exist is refused", tmpl: "node", ann: ann(workspace.AnnPreStop, "sync", workspace.AnnPreStopContainer, "nope"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{`annotation nogoo9/pre-stop-container is "nope", which is not a container of the spec: use one of [ide]`}},
		{name: "a bad grace period is refused", tmpl: "node", ann: ann(workspace.AnnPreStop, "sync", workspace.AnnTerminationGrace, "-3"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{"nogoo9/termination-grace-period"}},
		{name: "a bad required-context key is refused", tmpl: "node", ann: ann(workspace.AnnRequiredContext, "repo, bad key"),
			data: map[string]string{"spec": goodSpec, "volumeClaims": goodClaims}, wantErr: []string{"nogoo9/required-context", `"bad key"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.tmpl, "test", tc.ann, tc.data)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got.Name != tc.tmpl || got.Version != tc.ann[workspace.AnnTemplateVersion] || len(got.Spec.Containers) == 0 {
					t.Fatalf("decoded %+v", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode succeeded, want an error containing %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestExpansionDefaults(t *testing.T) {
	tmpl, err := Decode("node", "test", ann(workspace.AnnPreStop, "sync", workspace.AnnInitFrom, "configmap:seed", workspace.AnnRequiredContext, "repo,branch,repo"),
		map[string]string{"spec": `{"containers":[{"name":"ide","image":"i","ports":[{"containerPort":3000},{"containerPort":5173}],"volumeMounts":[{"name":"home","mountPath":"/h"}]}]}`, "volumeClaims": goodClaims})
	if err != nil {
		t.Fatal(err)
	}
	e, err := tmpl.Expansion()
	if err != nil {
		t.Fatal(err)
	}
	if e.WorkspacePort != 3000 || e.PreviewPort != 3000 {
		t.Errorf("ports = %d, %d; want 3000, 3000 (both default to the first container port)", e.WorkspacePort, e.PreviewPort)
	}
	if got := strings.Join(e.RequiredContext, ","); got != "branch,repo" {
		t.Errorf("required context = %q", got)
	}
	if e.Init == nil || e.Init.Volume != "home" || e.Init.Image != DefaultConfigMapInitImage || e.Init.Location != "seed" {
		t.Errorf("init = %+v", e.Init)
	}
	if e.PreStop == nil || e.PreStop.Container != "ide" || e.PreStop.GracePeriodSeconds != DefaultTerminationGrace {
		t.Errorf("preStop = %+v", e.PreStop)
	}
}

func TestLoadDirReadsSamplesAndReportsBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n")
	write("good.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: good
  labels: {nogoo9/pod-template: "true"}
  annotations: {nogoo9/template-version: "2"}
data:
  spec: '{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}]}]}'
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: second
  annotations: {nogoo9/template-version: "1"}
data:
  spec: '{"containers":[]}'
`)
	write("typo.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadat:\n  name: typo\n")
	// A template without metadata.name is named after its file: it used to be listed so and
	// refused all the same, as a template named "".
	write("unnamed.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  labels: {nogoo9/pod-template: "true"}
  annotations: {nogoo9/template-version: "1"}
data:
  spec: '{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}]}]}'
`)
	write("notes.txt", "ignored")
	got, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Loaded{}
	for _, l := range got {
		byName[l.Name] = l
	}
	if len(got) != 4 {
		t.Fatalf("loaded %d documents, want 4: %+v", len(got), got)
	}
	if l := byName["unnamed"]; l.Err != nil || l.Template == nil || l.Template.Name != "unnamed" {
		t.Errorf("unnamed: %+v", l)
	}
	if l := byName["good"]; l.Err != nil || l.Template.Version != "2" {
		t.Errorf("good: %+v", l)
	}
	if l := byName["second"]; l.Err == nil || !strings.Contains(l.Err.Error(), "no containers") || !strings.Contains(l.Source, "#2") {
		t.Errorf("second: %+v", l)
	}
	if l := byName["typo"]; l.Err == nil || !strings.Contains(l.Err.Error(), "metadat") {
		t.Errorf("typo: %+v", l)
	}
}

func TestSamplesDecode(t *testing.T) {
	got, err := LoadDir("../../config/samples")
	if err != nil {
		t.Fatalf("load the sample templates (config/samples): %v", err)
	}
	if len(got) < 2 {
		t.Fatalf("want at least 2 sample templates, got %d", len(got))
	}
	for _, l := range got {
		if l.Err != nil {
			t.Errorf("sample %s (%s): %v", l.Name, l.Source, l.Err)
		}
	}
}
