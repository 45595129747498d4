package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A request a person withdrew by removing only nogoo9/upgrade-requested leaves its target version
// behind (admission keeps a person from removing it). The runner's request names every companion
// of the intent, so the controller does not take the withdrawn rollback's version for this
// request's: the policy's upgrade goes to the template's latest.
func TestPolicyRunnersRequestClearsAWithdrawnRequestsTargetVersion(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	pod := idleJanePod("stale", now, workspace.AnnTargetVersion, "0.9")
	c, r := idleRunner(pod, now)
	if n, err := r.Tick(ctx); err != nil || n != 1 {
		t.Fatalf("tick requested %d (%v), want 1", n, err)
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[workspace.AnnUpgradeRequested] == "" || got.Annotations[workspace.AnnAutoUpgrade] != "when-idle" {
		t.Fatalf("no automatic request written: %v", got.Annotations)
	}
	if v, ok := got.Annotations[workspace.AnnTargetVersion]; ok {
		t.Errorf("the request kept the withdrawn request's %s=%q: the upgrade would go to it, not to version 2", workspace.AnnTargetVersion, v)
	}
}

// Maintenance is present or not, whatever its value: `kubectl annotate pod P nogoo9/maintenance=`
// takes the workspace out of service (the phase is Unavailable, the API refuses the owner's
// upgrade), so the update policy does not request an upgrade of it either. Before, the runner
// tested for a non-empty value and requested one in the owner's window.
func TestPolicyRunnerRequestsNoUpgradeInMaintenanceWhateverItsValue(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	for _, value := range []string{"disk migration", ""} {
		t.Run("nogoo9/maintenance="+value, func(t *testing.T) {
			pod := idleJanePod("kept", now, workspace.AnnMaintenance, value)
			c, r := idleRunner(pod, now)
			if n, err := r.Tick(ctx); err != nil || n != 0 {
				t.Errorf("tick requested %d upgrades (%v), want none of a workspace in maintenance", n, err)
			}
			var got corev1.Pod
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
				t.Fatal(err)
			}
			if v, ok := got.Annotations[workspace.AnnUpgradeRequested]; ok {
				t.Errorf("the runner wrote %s=%q on a pod in maintenance", workspace.AnnUpgradeRequested, v)
			}
		})
	}
}

// idleJanePod is jane's workspace id on template ide version 1, Ready for an hour before now (idle
// under the when-idle policy), with the annotations kv (key, value, ...) besides its own.
func idleJanePod(id string, now time.Time, kv ...string) *corev1.Pod {
	ann := map[string]string{workspace.AnnOwner: "jane", workspace.AnnTemplateVersion: "1"}
	for i := 0; i+1 < len(kv); i += 2 {
		ann[kv[i]] = kv[i+1]
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws-" + id, Namespace: "default", UID: types.UID("uid-ws-" + id),
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelTemplate: "ide", workspace.LabelTemplateVersion: "1"},
			Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}},
	}
}

// idleRunner is a policy runner at now over a fake API server holding pod, with the when-idle
// templates and a one-minute idle threshold.
func idleRunner(pod *corev1.Pod, now time.Time) (client.Client, *PolicyRunner) {
	c := fake.NewClientBuilder().WithObjects(pod).Build()
	return c, &PolicyRunner{Client: c, Reader: c, Templates: whenIdleTemplates(), Recorder: record.NewFakeRecorder(10),
		Opts: PolicyOptions{IdleAfter: time.Minute, Now: func() time.Time { return now }}}
}
