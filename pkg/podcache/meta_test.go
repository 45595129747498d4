package podcache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

func transformed(t testing.TB, p *corev1.Pod) *Pod {
	t.Helper()
	o, err := Transform(p)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*Pod)
}

// TestPodLabelsMatchSelectorsAsTheMapDid: for every fixture pod and selectors of every operator,
// the cached pod's labels (Labels, no map) match exactly when the stripped pod's label map does;
// Label, LookupLabel, Annotation, LookupAnnotation, GetLabels and GetAnnotations answer as the map.
func TestPodLabelsMatchSelectorsAsTheMapDid(t *testing.T) {
	sels := []string{
		"", "nogoo9/type=workspace", "team=blue", "team!=blue", "team", "!team", "absent", "!absent",
		"team in (red,blue)", "team notin (blue)", "nogoo9/template=python,team=blue", "nogoo9/template=go",
		"a-key-after-every-other", "!0-a-key-before-every-other",
	}
	for _, ws := range podcachetest.Workspaces() {
		for _, full := range ws.Pods {
			want, err := Strip(full.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			p := transformed(t, full.DeepCopy())
			for _, s := range sels {
				sel, err := labels.Parse(s)
				if err != nil {
					t.Fatal(err)
				}
				if got, exp := sel.Matches(p.Labels()), sel.Matches(labels.Set(want.Labels)); got != exp {
					t.Errorf("%s: selector %q matches the cached pod: %v, the map: %v", ws.Name, s, got, exp)
				}
			}
			for _, k := range append(keysOf(want.Labels, want.Annotations), "absent", "", "zzz") {
				v, ok := want.Labels[k]
				if gv, gok := p.LookupLabel(k); gv != v || gok != ok || p.Label(k) != v {
					t.Errorf("%s: label %q: got %q %v, want %q %v", ws.Name, k, gv, gok, v, ok)
				}
				v, ok = want.Annotations[k]
				if gv, gok := p.LookupAnnotation(k); gv != v || gok != ok || p.Annotation(k) != v {
					t.Errorf("%s: annotation %q: got %q %v, want %q %v", ws.Name, k, gv, gok, v, ok)
				}
				if workspace.LabelOf(p, k) != want.Labels[k] || workspace.AnnotationOf(p, k) != want.Annotations[k] {
					t.Errorf("%s: workspace.LabelOf/AnnotationOf %q differ from the map", ws.Name, k)
				}
			}
			if !maps.Equal(p.GetLabels(), want.Labels) || !maps.Equal(p.GetAnnotations(), want.Annotations) {
				t.Errorf("%s: GetLabels %v / GetAnnotations %v, want %v / %v", ws.Name, p.GetLabels(), p.GetAnnotations(), want.Labels, want.Annotations)
			}
		}
	}
}

// TestPodOfManyKeysAnswersAsTheMap: pods with up to 44 labels and 44 annotations (lookups past a
// few keys search, and more than 32 keys overflow setMeta's stack buffer) answer every lookup and
// selector as their maps do.
func TestPodOfManyKeysAnswersAsTheMap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	pool := make([]string, 60)
	for i := range pool {
		pool[i] = fmt.Sprintf("k%02d.example.com/key", i)
	}
	for n := 0; n < 300; n++ {
		full := podcachetest.Ready()
		for _, m := range []map[string]string{full.Labels, full.Annotations} {
			for range rnd.IntN(45) {
				m[pool[rnd.IntN(len(pool))]] = fmt.Sprint(rnd.IntN(3))
			}
		}
		want, err := Strip(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		p := transformed(t, full)
		for _, k := range append(pool, keysOf(want.Labels, want.Annotations)...) {
			if v, ok := p.LookupLabel(k); v != want.Labels[k] || ok != hasKey(want.Labels, k) {
				t.Fatalf("pod %d: label %q: %q %v, want %q", n, k, v, ok, want.Labels[k])
			}
			if v, ok := p.LookupAnnotation(k); v != want.Annotations[k] || ok != hasKey(want.Annotations, k) {
				t.Fatalf("pod %d: annotation %q: %q %v, want %q", n, k, v, ok, want.Annotations[k])
			}
			for _, s := range []string{k, "!" + k, k + "=1", k + "!=1", k + " in (0,2)", k + " notin (1)"} {
				sel, err := labels.Parse(s)
				if err != nil {
					t.Fatal(err)
				}
				if got, exp := sel.Matches(p.Labels()), sel.Matches(labels.Set(want.Labels)); got != exp {
					t.Fatalf("pod %d: selector %q matches the cached pod: %v, the map: %v", n, s, got, exp)
				}
			}
		}
		if !maps.Equal(p.GetLabels(), want.Labels) || !maps.Equal(p.GetAnnotations(), want.Annotations) {
			t.Fatalf("pod %d: GetLabels / GetAnnotations differ from the maps", n)
		}
	}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func keysOf(ms ...map[string]string) []string {
	var out []string
	for _, m := range ms {
		for k := range m {
			out = append(out, k)
		}
	}
	return out
}

// TestPodKeysSharedValuesOwn: pods with the same label and annotation keys share one key set and
// hold their own values; a copy's SetLabels and SetAnnotations (a new key set, a changed value)
// reach neither the original nor the pods it shares keys with; an update of a pod (a new object
// from the informer) with a changed label and a new key answers with the new labels while the old
// object keeps its own.
func TestPodKeysSharedValuesOwn(t *testing.T) {
	a, b := podcachetest.Ready(), podcachetest.Ready()
	b.Name = "other"
	b.Labels[workspace.LabelWorkspaceID] = "other-id"
	b.Annotations[workspace.AnnOwner] = "bob"
	pa, pb := transformed(t, a.DeepCopy()), transformed(t, b.DeepCopy())
	if pa.keys != pb.keys {
		t.Error("two pods with the same keys hold two key sets")
	}
	if pa.Label(workspace.LabelWorkspaceID) != a.Labels[workspace.LabelWorkspaceID] || pb.Label(workspace.LabelWorkspaceID) != "other-id" ||
		pa.Annotation(workspace.AnnOwner) != a.Annotations[workspace.AnnOwner] || pb.Annotation(workspace.AnnOwner) != "bob" {
		t.Errorf("values mixed up: a id %q owner %q, b id %q owner %q", pa.Label(workspace.LabelWorkspaceID), pa.Annotation(workspace.AnnOwner),
			pb.Label(workspace.LabelWorkspaceID), pb.Annotation(workspace.AnnOwner))
	}

	c := pb.DeepCopy()
	l := c.GetLabels()
	l["team"], l["added"] = "red", "x"
	c.SetLabels(l)
	an := c.GetAnnotations()
	an[workspace.AnnOwner] = "carol"
	c.SetAnnotations(an)
	if c.keys == pb.keys {
		t.Error("a copy with a label added still holds the shared key set")
	}
	if c.Label("team") != "red" || c.Label("added") != "x" || c.Annotation(workspace.AnnOwner) != "carol" {
		t.Errorf("the copy's setters did not take: %v %v", c.GetLabels(), c.GetAnnotations())
	}
	for _, p := range []*Pod{pa, pb} {
		if p.Label("team") != "blue" || p.Label("added") != "" {
			t.Errorf("%s: a copy's change reached it: %v", p.Name, p.GetLabels())
		}
	}
	if pb.Annotation(workspace.AnnOwner) != "bob" || pa.Annotation(workspace.AnnOwner) != a.Annotations[workspace.AnnOwner] {
		t.Error("a copy's annotation change reached the pods it shared keys with")
	}
	d := pb.DeepCopy()
	d.vals[0] = "changed"
	if pb.vals[0] == "changed" {
		t.Error("DeepCopy shares the values")
	}

	// An update: the informer hands over a new object.
	b2 := b.DeepCopy()
	b2.Labels["team"] = "red"
	b2.Labels["new-key"] = "v"
	pb2 := transformed(t, b2)
	if pb2.Label("team") != "red" || pb2.Label("new-key") != "v" || pb.Label("team") != "blue" || pb.Label("new-key") != "" {
		t.Errorf("update: new %v, old %v", pb2.GetLabels(), pb.GetLabels())
	}
	if !labels.SelectorFromSet(labels.Set{"team": "red"}).Matches(pb2.Labels()) || labels.SelectorFromSet(labels.Set{"team": "red"}).Matches(pb.Labels()) {
		t.Error("a selector on the changed label does not tell the old object from the new one")
	}
}

// TestKeySetsAreCollected: the key sets of pods nobody holds any more are freed (the interning is
// weak), so a stream of pods with ever new label keys does not grow the table for good.
func TestKeySetsAreCollected(t *testing.T) {
	ours := func() int { // the key sets of this test's pods still interned
		keySets.Lock()
		defer keySets.Unlock()
		n := 0
		for id := range keySets.m {
			if strings.Contains(id, "collect-test-") {
				n++
			}
		}
		return n
	}
	var pods []*Pod
	for i := range 50 {
		p := podcachetest.Ready()
		p.Labels[fmt.Sprintf("collect-test-%d", i)] = "x"
		pods = append(pods, transformed(t, p))
	}
	if got := ours(); got != 50 {
		t.Fatalf("%d key sets interned for 50 pods of distinct keys, want 50", got)
	}
	runtime.KeepAlive(pods)
	pods = nil
	deadline := time.Now().Add(10 * time.Second)
	for ours() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 50 key sets still interned 10 s after their pods were dropped", ours())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkPodLabelReads compares reading one label of a cached pod (no map: a binary search over
// the shared keys), a selector's match and materialising the pod (two maps built) with the same
// reads of the stripped pod's map.
//
//	go test -run '^$' -bench PodLabelReads ./pkg/podcache/
func BenchmarkPodLabelReads(b *testing.B) {
	full := podcachetest.Ready()
	stripped, err := Strip(full.DeepCopy())
	if err != nil {
		b.Fatal(err)
	}
	p := transformed(b, full)
	sel := labels.SelectorFromSet(labels.Set{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelTemplate: "python"})
	var sink string
	b.Run("IDOf/pod", func(b *testing.B) {
		for b.Loop() {
			sink = workspace.IDOf(p)
		}
	})
	b.Run("IDOf/map", func(b *testing.B) {
		for b.Loop() {
			sink = workspace.IDOf(stripped)
		}
	})
	b.Run("selector/pod", func(b *testing.B) {
		for b.Loop() {
			if !sel.Matches(p.Labels()) {
				b.Fatal("no match")
			}
		}
	})
	b.Run("selector/map", func(b *testing.B) {
		for b.Loop() {
			if !sel.Matches(labels.Set(stripped.Labels)) {
				b.Fatal("no match")
			}
		}
	})
	b.Run("Materialize", func(b *testing.B) {
		var out corev1.Pod
		for b.Loop() {
			p.MaterializeInto(&out)
		}
	})
	b.Run("deep copy and Materialize", func(b *testing.B) { // a Get or List without UnsafeDisableDeepCopy
		var out corev1.Pod
		for b.Loop() {
			if err := into(p, &out, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	_ = sink
}
