package podcache_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/nogoo9/no-crd/pkg/podcache"
)

// countingMapper is a DefaultRESTMapper that counts the RESTMapping calls it answers.
type countingMapper struct {
	*meta.DefaultRESTMapper
	calls int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls++
	return c.DefaultRESTMapper.RESTMapping(gk, versions...)
}

func newCounting() *countingMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion})
	m.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("PodList"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeNamespace)
	return &countingMapper{DefaultRESTMapper: m}
}

func TestBuiltinMemoAsksOncePerBuiltinKind(t *testing.T) {
	c := newCounting()
	m := podcache.BuiltinMemo(c)
	// What the cache does on every List: is a PodList namespaced?
	for i := 0; i < 100; i++ {
		ns, err := apiutil.IsObjectNamespaced(&corev1.PodList{}, scheme.Scheme, m)
		if err != nil || !ns {
			t.Fatalf("PodList: namespaced %v, err %v; want true, nil", ns, err)
		}
		ns, err = apiutil.IsObjectNamespaced(&corev1.Node{}, scheme.Scheme, m)
		if err != nil || ns {
			t.Fatalf("Node: namespaced %v, err %v; want false, nil", ns, err)
		}
	}
	if c.calls != 2 {
		t.Fatalf("the wrapped mapper answered %d times for 200 lookups of two built-in kinds; want 2", c.calls)
	}
	// Each caller gets its own copy: changing one does not change what the next caller gets.
	a, _ := m.RESTMapping(schema.GroupKind{Kind: "Pod"}, "v1")
	a.Scope = meta.RESTScopeRoot
	if b, _ := m.RESTMapping(schema.GroupKind{Kind: "Pod"}, "v1"); b.Scope.Name() != meta.RESTScopeNameNamespace || b.Resource.Resource != "pods" {
		t.Fatalf("the remembered mapping changed with a caller's copy: %+v", b)
	}
}

func TestBuiltinMemoPassesOtherLookupsThrough(t *testing.T) {
	c := newCounting()
	m := podcache.BuiltinMemo(c)
	widget := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	for i := 0; i < 3; i++ {
		if _, err := m.RESTMapping(widget, "v1"); err != nil {
			t.Fatal(err)
		}
		// Unknown kinds fail each time, and are asked each time (a CRD may appear).
		if _, err := m.RESTMapping(schema.GroupKind{Kind: "Gadget"}, "v1"); !meta.IsNoMatchError(err) {
			t.Fatalf("unknown kind: err %v, want a no-match error", err)
		}
		// No version or several: passed through.
		if _, err := m.RESTMapping(schema.GroupKind{Kind: "Pod"}); err != nil {
			t.Fatal(err)
		}
	}
	if c.calls != 9 {
		t.Fatalf("the wrapped mapper answered %d of 9 lookups that are not remembered", c.calls)
	}
}
