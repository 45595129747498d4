package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// A deleted node whose last state the informer lost comes as a tombstone that may carry no
// object: the set still forgets the node (by the tombstone's key, a Node's name) and wakes its
// workspaces, or the node would look present to every later pass and its loss go unnoticed.
func TestTheNodeSetForgetsANodeFromABareTombstone(t *testing.T) {
	var woken []string
	s := &nodeNames{names: map[string]struct{}{}, gone: func(name string) { woken = append(woken, name) }}
	s.set(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, true)
	if !s.has("n1") {
		t.Fatal("the set does not hold the node it was told about")
	}
	s.set(toolscache.DeletedFinalStateUnknown{Key: "n1"}, false)
	if s.has("n1") {
		t.Error("a node deleted through a tombstone without its object is still in the set")
	}
	if len(woken) != 1 || woken[0] != "n1" {
		t.Errorf("woken %v, want the workspaces of n1", woken)
	}
}
