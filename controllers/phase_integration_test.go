package controllers

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestPhaseControllerOnAPIServer is the user story of an operator on a real kube-apiserver: a
// workspace pod goes Scheduling -> Ready, is put in maintenance with kubectl annotate and taken
// out again, loses its storage condition and gets it back, and is deleted. Each transition shows
// as exactly one Event on the pod (kubectl describe pod), and the gauge follows.
func TestPhaseControllerOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	g := gomega.NewWithT(t)
	cfg, _ := startAPIServer(t)
	mgr := newTestManager(t, cfg)
	if err := SetupPhaseReconciler(mgr); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runManager(t, ctx, mgr)

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ws-jane-demo", Namespace: "default",
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo"}},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "ide", Image: "ghcr.io/nogoo9/node:1"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "WorkspaceStorageMounted"}},
		},
	}
	g.Expect(c.Create(ctx, pod)).To(gomega.Succeed())

	// events counts this pod's Events by reason, summing repeated occurrences.
	events := func(g gomega.Gomega) map[string]int32 {
		var list corev1.EventList
		g.Expect(c.List(ctx, &list, client.InNamespace("default"))).To(gomega.Succeed())
		out := map[string]int32{}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == pod.Name && e.Source.Component == PhaseControllerName {
				out[e.Reason] += max(e.Count, 1)
			}
		}
		return out
	}
	expectEvents := func(want map[string]int32) {
		t.Helper()
		g.Eventually(events).WithTimeout(30 * time.Second).Should(gomega.Equal(want))
		// No extra Event trails in from repeated reconciles.
		g.Consistently(events).WithTimeout(time.Second).Should(gomega.Equal(want))
	}
	setStatus := func(mut func(s *corev1.PodStatus)) {
		t.Helper()
		g.Eventually(func() error {
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
				return err
			}
			mut(&p.Status)
			return c.Status().Update(ctx, &p)
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	}
	annotate := func(value *string) {
		t.Helper()
		v := "null"
		if value != nil {
			v = fmt.Sprintf("%q", *value)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, workspace.AnnMaintenance, v)
		g.Expect(c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch)))).To(gomega.Succeed())
	}
	cond := func(s *corev1.PodStatus, t corev1.PodConditionType, v corev1.ConditionStatus, reason, msg string) {
		for i := range s.Conditions {
			if s.Conditions[i].Type == t {
				s.Conditions[i].Status, s.Conditions[i].Reason, s.Conditions[i].Message = v, reason, msg
				return
			}
		}
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: v, Reason: reason, Message: msg})
	}
	gauge := func(p workspace.PhaseName) func() float64 {
		return func() float64 { return testutil.ToFloat64(workspacesGauge.WithLabelValues(string(p))) }
	}

	// The scheduler would write this: the RWOP claim is held elsewhere.
	setStatus(func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		cond(s, corev1.PodScheduled, corev1.ConditionFalse, "Unschedulable", "0/1 nodes are available: 1 node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode.")
	})
	expectEvents(map[string]int32{"PhaseScheduling": 1})
	g.Expect(gauge(workspace.PhaseScheduling)()).To(gomega.Equal(1.0))

	// Bound (Initializing until the kubelet reports), then running with storage mounted.
	g.Expect(c.SubResource("binding").Create(ctx, pod, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}})).To(gomega.Succeed())
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1})
	setStatus(func(s *corev1.PodStatus) {
		s.Phase, s.PodIP = corev1.PodRunning, "10.244.0.7"
		cond(s, corev1.PodScheduled, corev1.ConditionTrue, "", "")
		cond(s, "WorkspaceStorageMounted", corev1.ConditionTrue, "", "")
		cond(s, corev1.PodReady, corev1.ConditionTrue, "", "")
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Ready: true, Image: "ghcr.io/nogoo9/node:1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	})
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1, "PhaseReady": 1})
	g.Eventually(gauge(workspace.PhaseReady)).WithTimeout(30 * time.Second).Should(gomega.Equal(1.0))
	g.Expect(gauge(workspace.PhaseScheduling)()).To(gomega.Equal(0.0))

	// kubectl annotate pod ws-jane-demo nogoo9/maintenance="disk move" ; then remove it.
	reason := "disk move"
	annotate(&reason)
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1, "PhaseReady": 1, "PhaseUnavailable": 1})
	annotate(nil)
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1, "PhaseReady": 2, "PhaseUnavailable": 1})

	// A storage controller reports the mount gone, then back.
	setStatus(func(s *corev1.PodStatus) {
		cond(s, "WorkspaceStorageMounted", corev1.ConditionFalse, "NFSServerUnreachable", "nfs.example:/home is not responding")
		cond(s, corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady", "")
	})
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1, "PhaseReady": 2, "PhaseUnavailable": 2})
	setStatus(func(s *corev1.PodStatus) {
		cond(s, "WorkspaceStorageMounted", corev1.ConditionTrue, "", "")
		cond(s, corev1.PodReady, corev1.ConditionTrue, "", "")
	})
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1, "PhaseReady": 3, "PhaseUnavailable": 2})

	// Deleted: a bound pod waits for its (absent) kubelet, so it is Terminating until forced.
	g.Expect(c.Delete(ctx, pod)).To(gomega.Succeed())
	expectEvents(map[string]int32{"PhaseScheduling": 1, "PhaseInitializing": 1, "PhaseReady": 3, "PhaseUnavailable": 2, "PhaseTerminating": 1})
	g.Expect(c.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(gomega.Succeed())
	g.Eventually(func() float64 {
		return gauge(workspace.PhaseTerminating)() + gauge(workspace.PhaseReady)()
	}).WithTimeout(30 * time.Second).Should(gomega.Equal(0.0))
}

// syncBuffer is a bytes.Buffer safe for the manager's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testWriter routes logs to t.Log. Use it only for a logger that dies with t (a manager's
// Options.Logger): a global logger set to it panics when a later test's goroutines log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
