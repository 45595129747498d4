package templates

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestLookupNamespace(t *testing.T) {
	const home = "nogoo9-system"
	for _, tc := range []struct {
		name        string
		ns          string
		nsTemplates bool
		inNamespace bool
		want        string
	}{
		{name: "a team namespace with its own template of the name gets it", ns: "team-a", nsTemplates: true, inNamespace: true, want: "team-a"},
		{name: "a team namespace without a template of the name gets nogoo9's", ns: "team-a", nsTemplates: true, inNamespace: false, want: ""},
		{name: "with --namespace-templates=false a team template is never used", ns: "team-a", nsTemplates: false, inNamespace: true, want: ""},
		{name: "nogoo9's own namespace always means nogoo9's templates", ns: home, nsTemplates: true, inNamespace: true, want: ""},
		{name: "no namespace given means nogoo9's templates", ns: "", nsTemplates: true, inNamespace: true, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LookupNamespace(tc.ns, home, tc.nsTemplates, tc.inNamespace); got != tc.want {
				t.Errorf("LookupNamespace(%q) = %q, want %q", tc.ns, got, tc.want)
			}
		})
	}
}

func TestKeyNamesNogoo9sTemplatesByNameAndTeamTemplatesWithTheirNamespace(t *testing.T) {
	const home = "nogoo9-system"
	for _, tc := range []struct {
		name, ns, want, wantNS string
	}{
		{name: "a template listed in nogoo9's namespace is keyed by its name", ns: home, want: "python"},
		{name: "a template with no namespace is nogoo9's, keyed by its name", ns: "", want: "python"},
		{name: "a team template is keyed <namespace>/<name>", ns: "team-a", want: "team-a/python", wantNS: "team-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := Key(tc.ns, "python", home)
			if key != tc.want {
				t.Fatalf("Key(%q, python) = %q, want %q", tc.ns, key, tc.want)
			}
			if ns, name := keyNamespace(key, home); ns != tc.wantNS || name != "python" {
				t.Errorf("keyNamespace(%q) = %q, %q; want %q, python", key, ns, name, tc.wantNS)
			}
		})
	}
}

func TestVisibleOffersTheNamespacesTemplatesThenNogoo9sNotShadowed(t *testing.T) {
	const home = "nogoo9-system"
	all := []Info{
		{Name: "go", Namespace: home},
		{Name: "node", Namespace: "team-b"},
		{Name: "python", Namespace: home},
		{Name: "python", Namespace: "team-a"},
		{Name: "python", Namespace: "team-b"},
		{Name: "rust", Namespace: "team-a", Error: "broken"},
	}
	names := func(infos []Info) []string {
		var out []string
		for _, i := range infos {
			out = append(out, i.Namespace+"/"+i.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name, ns string
		want     []string
	}{
		{name: "a team namespace sees its own python (shadowing nogoo9's), its broken rust, and nogoo9's go", ns: "team-a",
			want: []string{home + "/go", "team-a/python", "team-a/rust"}},
		{name: "another team sees only its own and nogoo9's, never team-a's", ns: "team-b",
			want: []string{home + "/go", "team-b/node", "team-b/python"}},
		{name: "a namespace without templates sees nogoo9's", ns: "team-c",
			want: []string{home + "/go", home + "/python"}},
		{name: "nogoo9's namespace sees nogoo9's only", ns: home,
			want: []string{home + "/go", home + "/python"}},
		{name: "no namespace means nogoo9's", ns: "",
			want: []string{home + "/go", home + "/python"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(Visible(all, tc.ns, home)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Visible(%q) = %v, want %v", tc.ns, got, tc.want)
			}
		})
	}
}

func TestTemplateKeyFollowsTheStamp(t *testing.T) {
	pod := func(ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Labels: map[string]string{workspace.LabelTemplate: "python"}, Annotations: ann}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{name: "an unstamped pod (every workspace spawned before team templates) follows nogoo9's template", pod: pod(nil), want: "python"},
		{name: "a stamped pod follows its namespace's template", pod: pod(map[string]string{workspace.AnnTemplateNamespace: "team-a"}), want: "team-a/python"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := workspace.TemplateKey(tc.pod)
			if key != tc.want {
				t.Fatalf("TemplateKey = %q, want %q", key, tc.want)
			}
			ns, name := workspace.SplitTemplateKey(key)
			if name != "python" || workspace.JoinTemplateKey(ns, name) != key {
				t.Errorf("SplitTemplateKey(%q) = %q, %q: does not join back", key, ns, name)
			}
		})
	}
	t.Run("a stamp naming another namespace than the pod's is never followed", func(t *testing.T) {
		key := workspace.TemplateKey(pod(map[string]string{workspace.AnnTemplateNamespace: "team-b"}))
		if _, err := (&History{Namespace: "nogoo9-system"}).Version(context.Background(), key, "7"); !errors.As(err, new(*ErrVersionNotKept)) {
			t.Errorf("History.Version(%q) = %v, want ErrVersionNotKept (and no read)", key, err)
		}
		r := NewStatic(&Template{Name: "python", Version: "1"}, &Template{Name: "python", Version: "7", Namespace: "team-b"})
		if tmpl, ok := r.Get(key); ok {
			t.Fatalf("TemplateKey of a team-a pod stamped team-b = %q, which resolves to %+v: a pod must never follow another namespace's template", key, tmpl)
		}
		if !strings.Contains(key, "team-b/python") || !strings.Contains(key, "team-a") {
			t.Errorf("TemplateKey = %q: an error naming it should say which stamp and which namespace", key)
		}
	})
}

// A static registry (no API server) applies the same rule as the watching one: Resolve picks the
// team template only for its own namespace, Get follows keys, ListFor marks where each comes from.
func TestRegistryResolveAndGetByKey(t *testing.T) {
	home := &Template{Name: "python", Version: "1", Source: "configmap:x/python"}
	team := &Template{Name: "python", Version: "7", Namespace: "team-a", Source: "configmap:team-a/python"}
	r := NewStatic(home, team)
	for _, tc := range []struct {
		name, ns, wantKey, wantVersion, wantNS string
	}{
		{name: "a spawn in team-a gets team-a's python", ns: "team-a", wantKey: "team-a/python", wantVersion: "7", wantNS: "team-a"},
		{name: "a spawn in team-b gets nogoo9's python", ns: "team-b", wantKey: "python", wantVersion: "1"},
		{name: "a spawn in nogoo9's namespace gets nogoo9's python", ns: "", wantKey: "python", wantVersion: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, key, ok := r.Resolve(tc.ns, "python")
			if !ok || key != tc.wantKey || got.Version != tc.wantVersion || got.Namespace != tc.wantNS {
				t.Fatalf("Resolve(%q) = %+v, %q, %v; want version %s namespace %q at key %q", tc.ns, got, key, ok, tc.wantVersion, tc.wantNS, tc.wantKey)
			}
			if again, ok := r.Get(key); !ok || again.Version != tc.wantVersion {
				t.Errorf("Get(%q) = %v, %v; want version %s", key, again, ok, tc.wantVersion)
			}
		})
	}
	if _, ok := r.Get("team-b/python"); ok {
		t.Error(`Get("team-b/python") found a template: team-b has none, and a key never falls back to nogoo9's`)
	}
}

// With team templates off, a team template's kept versions are not offered either; nothing is read
// (the History has no Reader).
func TestHistoryOffersNoTeamVersionsWhenTeamTemplatesAreOff(t *testing.T) {
	h := &History{Namespace: "nogoo9-system", NoTeamTemplates: true}
	if _, err := h.Version(context.Background(), workspace.JoinTemplateKey("team-a", "python"), "7"); !errors.As(err, new(*ErrVersionNotKept)) {
		t.Fatalf("Version of team-a/python with team templates off = %v, want ErrVersionNotKept", err)
	}
}
