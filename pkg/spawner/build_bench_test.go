package spawner

import (
	"testing"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// benchSpec is the benchmark's template (hack/bench/cmd/bench): no placeholder.
const benchSpec = `{"containers":[{"name":"ide","image":"registry.local/bench/ide:v2","ports":[{"containerPort":8080}],"volumeMounts":[{"name":"home","mountPath":"/home"}]}],"terminationGracePeriodSeconds":0}`

const benchClaims = `[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOncePod"],"storageClassName":"rwop","resources":{"requests":{"storage":"1Gi"}}}}]`

// BenchmarkBuildPod renders a pod as an upgrade does: from the benchmark's template (no
// placeholder, a claim) and from the node sample's shape (placeholders). It asserts nothing but
// that the render succeeds.
//
//	go test -run '^$' -bench BuildPod -benchmem ./pkg/spawner/
func BenchmarkBuildPod(b *testing.B) {
	for _, tc := range []struct {
		name         string
		spec, claims string
	}{
		{"no placeholder", benchSpec, benchClaims},
		{"placeholders", nodeSpec, claims},
	} {
		tmpl, err := templates.Decode("node", "test", map[string]string{workspace.AnnTemplateVersion: "v2"},
			map[string]string{"spec": tc.spec, "volumeClaims": tc.claims})
		if err != nil {
			b.Fatal(err)
		}
		id := Identity{Owner: "jane", ID: "demo", Context: map[string]string{"repo": "https://example.com/r.git", "class": "fast"}, Namespace: "ns"}
		name := workspace.PodName(id.Owner, id.ID)
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := BuildPod(tmpl, id, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
