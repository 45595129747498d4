package podcache

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// The informer's events that a live watch rarely hands over, applied to Every directly: an
// update whose old and new objects are different pods under one name (a relist after the pod was
// deleted and made again while the watch was down), and a delete that comes as a tombstone.
func TestEveryFollowsRelistsAndTombstones(t *testing.T) {
	pod := func(name, uid string) *Pod {
		return &Pod{Namespace: "ns", Name: name, UID: types.UID(uid)}
	}
	uids := func(e *Every) []string {
		var out []string
		for uid := range e.pods {
			out = append(out, string(uid))
		}
		slices.Sort(out)
		return out
	}
	e := &Every{pods: map[types.UID]*Pod{}}
	a1, b := pod("a", "uid-a1"), pod("b", "uid-b")
	e.replace(nil, a1)
	e.replace(nil, b)
	a2 := pod("a", "uid-a2")
	e.replace(a1, a2)
	if got := uids(e); !slices.Equal(got, []string{"uid-a2", "uid-b"}) {
		t.Fatalf("after an update to another pod of the same name: %v, want [uid-a2 uid-b]", got)
	}
	if e.pods["uid-a2"] != a2 {
		t.Fatal("the entry does not hold the object the informer handed over")
	}
	e.replace(toolscache.DeletedFinalStateUnknown{Key: "ns/b", Obj: b}, nil)
	if got := uids(e); !slices.Equal(got, []string{"uid-a2"}) {
		t.Fatalf("after a tombstone for b: %v, want [uid-a2]", got)
	}
	e.replace(a2, nil)
	if len(e.pods) != 0 {
		t.Fatalf("after deleting a: %v, want none", uids(e))
	}
	e.replace(nil, nil) // nothing handed over: nothing changes
	e.replace(toolscache.DeletedFinalStateUnknown{Key: "ns/c"}, nil)
	if len(e.pods) != 0 {
		t.Fatalf("after empty events: %v, want none", uids(e))
	}
}
