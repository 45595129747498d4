package templates

import (
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// FuzzDecode: whatever a ConfigMap holds (spec and claims JSON, any annotation a template author
// writes), decoding and expanding never panic, and a refusal always says what is wrong.
func FuzzDecode(f *testing.F) {
	f.Add("node", "1", goodSpec, goodClaims, workspace.AnnWorkspacePort, "3000")
	f.Add("node", "1", goodSpec, "", workspace.AnnInitFrom, "s3://seeds/${user}/")
	f.Add("node", "1", goodSpec, goodClaims, workspace.AnnInitFrom, "configmap:${context.x}")
	f.Add("node", "1", goodSpec, "", workspace.AnnPreStop, "echo ${context.msg}")
	f.Add("node", "2", goodSpec, "", workspace.AnnTerminationGrace, "99999999999999999999")
	f.Add("node", "1", goodSpec, "", workspace.AnnRequiredContext, "a,,b, c ,\x00")
	f.Add("x", " ", `{"containers":[]}`, `[{}]`, "", "")
	f.Add("node", "1", `{"containers":[{"name":"a","image":"b"}],"unknown":1}`, "", "", "")
	f.Add("node", "1", strings.Repeat("[", 10000), "", "", "")
	f.Add("node", "1", "{\"containers\":[{\"name\":\"a\xff\",\"image\":\"b\"}]}", "", "", "")
	f.Fuzz(func(t *testing.T, name, version, spec, claims, key, value string) {
		a := map[string]string{workspace.AnnTemplateVersion: version}
		if key != "" {
			a[key] = value
		}
		data := map[string]string{workspace.DataSpec: spec}
		if claims != "" {
			data[workspace.DataVolumeClaims] = claims
		}
		tm, err := Decode(name, "fuzz", a, data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if len(tm.Spec.Containers) == 0 || tm.Version == "" {
			t.Fatalf("decoded a template without containers or version: %+v", tm)
		}
		if _, err := tm.Expansion(); err != nil && err.Error() == "" {
			t.Fatal("an empty error")
		}
		_ = DefaultPolicy().Check(tm)
	})
}
