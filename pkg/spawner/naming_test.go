package spawner

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The naming helpers live in pkg/workspace; they are tested here, where the names are made.

func checkName(t *testing.T, what, name string) {
	t.Helper()
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		t.Fatalf("%s %q is not a DNS-1123 label: %v", what, name, errs)
	}
}

func TestPodNames(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name, owner, id string
		wantPrefix      string
	}{
		{name: "a plain owner and id stay readable", owner: "jane", id: "demo", wantPrefix: "ws-jane-demo-"},
		{name: "an email subject is sanitised", owner: "Jane.Doe@Example.com", id: "demo", wantPrefix: "ws-jane-doe-example-com-demo-"},
		{name: "a pipe subject is sanitised", owner: "auth0|5f1c9a", id: "api", wantPrefix: "ws-auth0-5f1c9a-api-"},
		{name: "unicode is dropped", owner: "jürgen✓", id: "ünï", wantPrefix: "ws-j-rgen-n-"},
		{name: "a very long owner is cut", owner: long, id: "demo", wantPrefix: "ws-xxx"},
		{name: "a very long id is cut", owner: "jane", id: long, wantPrefix: "ws-jane-xxx"},
		{name: "an owner with no usable character still names", owner: "@@@", id: "demo", wantPrefix: "ws-demo-"},
		{name: "empty inputs still name", owner: "", id: "", wantPrefix: "ws-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := workspace.PodName(tc.owner, tc.id)
			checkName(t, "pod name", pod)
			if !strings.HasPrefix(pod, tc.wantPrefix) {
				t.Errorf("PodName = %q, want prefix %q", pod, tc.wantPrefix)
			}
			if pod != workspace.PodName(tc.owner, tc.id) {
				t.Errorf("PodName is not deterministic")
			}
			up := workspace.UpgradePodName(tc.owner, tc.id, "uid-1/v2")
			checkName(t, "upgrade pod name", up)
			if !strings.HasPrefix(up, pod+"-up-") || len(up) != len(pod)+len("-up-")+5 {
				t.Errorf("UpgradePodName = %q, want %q-up-xxxxx", up, pod)
			}
			for _, claim := range []string{"home", "a-very-long-claim-name-that-does-not-fit-anywhere-at-all", "Data_Dir"} {
				checkName(t, "claim name", workspace.ClaimName(tc.owner, tc.id, claim))
			}
		})
	}
}

func TestNamesDoNotCollideAfterTruncation(t *testing.T) {
	long := strings.Repeat("a", 100)
	pairs := [][2][2]string{
		{{long + "1", "x"}, {long + "2", "x"}},
		{{"jane", long + "1"}, {"jane", long + "2"}},
		{{"Jane", "x"}, {"jane", "x"}},
		{{"a|b", "x"}, {"a@b", "x"}},
		{{"ab", "c"}, {"a", "bc"}},
	}
	for _, p := range pairs {
		if a, b := workspace.PodName(p[0][0], p[0][1]), workspace.PodName(p[1][0], p[1][1]); a == b {
			t.Errorf("PodName%v and PodName%v collide: %q", p[0], p[1], a)
		}
	}
	home := workspace.ClaimName("jane", "x", strings.Repeat("h", 60)+"1")
	home2 := workspace.ClaimName("jane", "x", strings.Repeat("h", 60)+"2")
	if home == home2 {
		t.Errorf("claim names collide after truncation: %q", home)
	}
}

func FuzzPodName(f *testing.F) {
	f.Add("jane", "demo", "home")
	f.Add("auth0|5f1c", "My Project", "data")
	f.Add("ü@ß.example", strings.Repeat("z", 80), strings.Repeat("c", 70))
	f.Fuzz(func(t *testing.T, owner, id, claim string) {
		pod := workspace.PodName(owner, id)
		checkName(t, "pod name", pod)
		checkName(t, "upgrade pod name", workspace.UpgradePodName(owner, id, claim))
		checkName(t, "claim name", workspace.ClaimName(owner, id, claim))
		if l := workspace.UserLabel(owner); len(validation.IsValidLabelValue(l)) > 0 {
			t.Fatalf("UserLabel(%q) = %q is not a label value", owner, l)
		}
		if derived := workspace.IDFromName(id); derived != "" {
			if err := workspace.ValidateID(derived); err != nil {
				t.Fatalf("IDFromName(%q) = %q: %v", id, derived, err)
			}
			checkName(t, "routing path segment", derived)
		}
	})
}
