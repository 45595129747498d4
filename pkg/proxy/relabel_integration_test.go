package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestARelabelledPodLeavesItsWorkspacesRoute relabels a served workspace's pod through the API
// server, as an operator does with kubectl (its nogoo9/workspace-id label removed, as nogoo9's
// Warning advises for a pod relabelled into another workspace; its nogoo9/type label removed,
// which takes it out of the informer's selection; or moved to another workspace), then deletes it:
// from the relabel on, the workspace's route must not reach the pod, and the WebSocket opened
// through it must be closed.
func TestARelabelledPodLeavesItsWorkspacesRoute(t *testing.T) {
	for i, how := range []string{"id removed", "type removed", "moved"} {
		t.Run(how, func(t *testing.T) {
			g := integration(t)
			ip := fmt.Sprintf("127.1.7.%d", i+1)
			startBackend(t, ip, "x", 8080)
			id := uniq("relabel")
			pod := createPod(t, g, id, id, "jane", ip, nil)
			c := dialJanes(g, id)
			defer c.Close()
			g.Expect(echo(c, "a")).To(Equal("x:a"))

			var patch string
			other := uniq("moved")
			switch how {
			case "id removed":
				patch = `{"metadata":{"labels":{"` + workspace.LabelWorkspaceID + `":null}}}`
			case "type removed":
				patch = `{"metadata":{"labels":{"` + workspace.LabelType + `":null}}}`
			case "moved":
				patch = `{"metadata":{"labels":{"` + workspace.LabelWorkspaceID + `":"` + other + `"},"annotations":{"` +
					workspace.AnnWorkspacePath + `":"/ws/jane/` + other + `/","` + workspace.AnnPreviewPath + `":"/preview/jane/` + other + `/"}}}`
			}
			g.Expect(k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
			waitClosed(t, c, "its pod was relabelled out of the workspace")
			unrouted := func() string { code, b, _ := get("/ws/jane/"+id+"/", "jane-token"); return fmt.Sprint(code, " ", b) }
			g.Eventually(unrouted, 30*time.Second, 20*time.Millisecond).ShouldNot(ContainSubstring("pod=x"))
			if how == "moved" {
				g.Eventually(func() string { _, b, _ := get("/ws/jane/"+other+"/", "jane-token"); return b }, 30*time.Second, 20*time.Millisecond).
					Should(ContainSubstring("pod=x"), "the moved pod serves its new workspace")
			}

			deletePod(g, pod)
			g.Consistently(unrouted, time.Second, 50*time.Millisecond).ShouldNot(ContainSubstring("pod=x"),
				"the old workspace's route must not reach the pod's address after its delete (another pod may get the IP)")
			if how == "moved" {
				g.Eventually(func() string { _, b, _ := get("/ws/jane/"+other+"/", "jane-token"); return b }, 30*time.Second, 20*time.Millisecond).
					ShouldNot(ContainSubstring("pod=x"))
			}
		})
	}
}
