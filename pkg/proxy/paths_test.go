package proxy

import (
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A workspace created before paths named the namespace keeps routing on the path stamped on its
// pod (/ws/<user-label>/<id>/), next to a new workspace on /ws/<namespace>/<id>/: the proxy
// matches whatever the annotation says, so old bookmarks keep working.
func TestOldAndNewPathShapesRouteSideBySide(t *testing.T) {
	owner := "system:serviceaccount:default:demo-user"
	oldWS := "/ws/" + workspace.UserLabel(owner) + "/old/"
	oldPreview := "/preview/" + workspace.UserLabel(owner) + "/old/"
	old := wsPod("ws-old", time.Hour, "127.1.0.1", true, map[string]string{
		workspace.AnnOwner: owner, workspace.AnnWorkspacePath: oldWS, workspace.AnnPreviewPath: oldPreview,
	})
	old.Labels[workspace.LabelWorkspaceID] = "old"
	fresh := wsPod("ws-new", time.Minute, "127.1.0.2", true, map[string]string{
		workspace.AnnOwner:         owner,
		workspace.AnnWorkspacePath: workspace.WorkspacePath("default", "new"),
		workspace.AnnPreviewPath:   workspace.PreviewPath("default", "new"),
	})
	fresh.Labels[workspace.LabelWorkspaceID] = "new"

	r := newRouter(time.Minute, newConnRegistry(logr.Discard()), nil, logr.Discard())
	r.upsert(old)
	r.upsert(fresh)
	for _, tc := range []struct {
		path, wantPod string
		wantKind      routeKind
	}{
		{oldWS + "index.html", "ws-old", kindWorkspace},
		{oldPreview, "ws-old", kindPreview},
		{"/ws/default/new/", "ws-new", kindWorkspace},
		{"/ws/default/new/term", "ws-new", kindWorkspace},
		{"/preview/default/new/app.js", "ws-new", kindPreview},
	} {
		got := r.lookup(cleanPath(tc.path))
		if got == nil {
			t.Errorf("%s: no route", tc.path)
			continue
		}
		if got.podName != tc.wantPod || got.kind != tc.wantKind || got.owner != owner {
			t.Errorf("%s: routed to pod %s (%s, owner %s), want %s (%s, owner %s)", tc.path, got.podName, got.kind, got.owner, tc.wantPod, tc.wantKind, owner)
		}
	}
	if got := r.lookup(cleanPath("/ws/default/old/")); got != nil {
		t.Errorf("/ws/default/old/ routes to %s: an existing workspace must keep only its stamped path", got.podName)
	}
}
