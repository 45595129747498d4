package proxy

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// BenchmarkRouterBytesPerWorkspace reports what the router holds per ready workspace, exactly
// (heap allocated after two collections, not a sampled profile): its map entry, the pod list, the
// route and the table's entry, for 10,000 workspaces of one ready pod each, the cache's compact
// pods handed over as the informer hands them (the pods themselves are the cache's and not
// counted). docs/performance.md ("Ninth round") quotes it; it asserts nothing.
//
//	go test -run '^$' -bench RouterBytesPerWorkspace -benchtime 1x ./pkg/proxy/
func BenchmarkRouterBytesPerWorkspace(b *testing.B) {
	const n = 10000
	base := podcachetest.Ready()
	pods := make([]*podcache.Pod, n)
	for i := range pods {
		p := base.DeepCopy()
		id, owner := fmt.Sprintf("ws-%d", i), fmt.Sprintf("user-%d", i%100)
		p.Name = workspace.PodName(owner, id)
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		p.Labels[workspace.LabelWorkspaceID] = id
		p.Annotations[workspace.AnnOwner] = owner
		p.Annotations[workspace.AnnWorkspacePath] = "/ws/" + owner + "/" + id + "/"
		p.Status.PodIP = fmt.Sprintf("127.1.%d.%d", i/256, i%256)
		pods[i] = podcache.Of(p)
	}
	heap := podcachetest.HeapAllocated
	for b.Loop() {
		h := heap()
		r := newRouter(time.Minute, newConnRegistry(logr.Discard()), nil, logr.Discard())
		for _, p := range pods {
			r.upsert(p)
		}
		b.ReportMetric((heap()-h)/n, "router-B/workspace")
		if r.lookup("/ws/user-1/ws-1/") == nil {
			b.Fatal("no route for /ws/user-1/ws-1/")
		}
		runtime.KeepAlive(r)
	}
}
