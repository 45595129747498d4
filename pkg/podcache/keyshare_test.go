package podcache

import (
	"runtime"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKeySetsShareTheirKeysAcrossCollections: a key set made after a collection shares its key
// strings with a live key set made before it, because each key set holds its keys' unique handles
// (without them the interned keys are collected with the pods that brought them, and every later
// key set keeps a copy of its own).
func TestKeySetsShareTheirKeysAcrossCollections(t *testing.T) {
	transform := func(labels map[string]string) *Pod {
		t.Helper()
		o, err := Transform(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return Of(o)
	}
	const key = "keyshare.test.example/shared"
	a := transform(map[string]string{key: "1", "keyshare.test.example/other": "x"})
	runtime.GC()
	runtime.GC()
	b := transform(map[string]string{key: "2"})
	var ka string
	for _, k := range a.keys.labels {
		if k == key {
			ka = k
		}
	}
	if kb := b.keys.labels[0]; kb != key || unsafe.StringData(ka) != unsafe.StringData(kb) {
		t.Errorf("key %q of a key set made after a collection is a copy of its own, not the live key set's", key)
	}
	runtime.KeepAlive(a)
}
