package workspace

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// Pod shapes below are copied from what the scheduler and kubelet write (kubectl get pod -o yaml).

// pendingPod is a pod the scheduler has not bound yet (no PodScheduled condition either).
func pendingPod(name string, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{
				LabelType: TypeWorkspace, LabelWorkspaceID: "demo", LabelUserSub: "jane",
				LabelTemplate: "node", LabelTemplateVersion: "1.0.0",
			},
			Annotations: map[string]string{
				AnnOwner: "jane", AnnTemplateVersion: "1.0.0", AnnWorkspaceName: "Demo",
				AnnWorkspacePath: "/ws/jane/demo/", AnnPreviewPath: "/preview/jane/demo/",
			},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "ghcr.io/nogoo9/node:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable},
	}
}

func cond(t corev1.PodConditionType, s corev1.ConditionStatus, reason, msg string) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t0)}
}

// unschedulable: the RWOP claim is held by another pod.
func unschedulable(name string, created time.Time) *corev1.Pod {
	p := pendingPod(name, created)
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "Unschedulable",
		"0/1 nodes are available: 1 node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")}
	return p
}

// scheduled is bound to a node, containers not started yet.
func scheduled(name string, created time.Time, waiting ...corev1.ContainerStateWaiting) *corev1.Pod {
	p := pendingPod(name, created)
	p.Spec.NodeName = "node-1"
	p.Status.HostIP = "10.0.0.5"
	p.Status.StartTime = &metav1.Time{Time: created.Add(time.Second)}
	p.Status.Conditions = []corev1.PodCondition{
		cond("PodReadyToStartContainers", corev1.ConditionTrue, "", ""),
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", ""),
		cond(corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [ide]"),
		cond(corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [ide]"),
		cond(corev1.PodScheduled, corev1.ConditionTrue, "", ""),
	}
	w := corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	if len(waiting) > 0 {
		w = waiting[0]
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Image: "ghcr.io/nogoo9/node:1", State: corev1.ContainerState{Waiting: &w}}}
	return p
}

var (
	errImagePull = corev1.ContainerStateWaiting{Reason: "ErrImagePull",
		Message: `failed to pull and unpack image "ghcr.io/nogoo9/node:9": failed to resolve reference "ghcr.io/nogoo9/node:9": ghcr.io/nogoo9/node:9: not found`}
	imagePullBackOff = corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
		Message: `Back-off pulling image "ghcr.io/nogoo9/node:9": ErrImagePull: not found`}
	crashLoop = corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: "back-off 5m0s restarting failed container=ide pod=ws-jane-demo-abcdef_default(0b3c)"}
	invalidImage = corev1.ContainerStateWaiting{Reason: "InvalidImageName",
		Message: `failed to apply default image tag "Node:LATEST": couldn't parse image name "Node:LATEST": invalid reference format: repository name must be lowercase`}
	configError = corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `configmap "ide-settings" not found`}
)

// running is Running and Ready, with an IP.
func running(name string, created time.Time) *corev1.Pod {
	p := scheduled(name, created)
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = "10.244.0.12"
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.12"}}
	p.Status.Conditions[2] = cond(corev1.PodReady, corev1.ConditionTrue, "", "")
	p.Status.Conditions[3] = cond(corev1.ContainersReady, corev1.ConditionTrue, "", "")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "ide", Ready: true, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(created.Add(5 * time.Second))}}}}
	return p
}

func ptr[T any](v T) *T { return &v }

func with(p *corev1.Pod, f func(p *corev1.Pod)) *corev1.Pod { f(p); return p }

func annotate(p *corev1.Pod, kv ...string) *corev1.Pod {
	for i := 0; i+1 < len(kv); i += 2 {
		p.Annotations[kv[i]] = kv[i+1]
	}
	return p
}

func deleting(p *corev1.Pod, at time.Time) *corev1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: at}
	p.DeletionGracePeriodSeconds = ptr(int64(30))
	return p
}

// upgraded makes p the upgrade of from.
func upgraded(p *corev1.Pod, from string) *corev1.Pod {
	p.Annotations[AnnTemplateVersion] = "2.0.0"
	p.Labels[LabelTemplateVersion] = "2.0.0"
	return annotate(p, AnnUpgradeFrom, from, AnnUpgradeFromVersion, "1.0.0", AnnUpgradeStrategy, "SideBySide")
}

func TestPhase(t *testing.T) {
	now := t0.Add(3 * time.Minute)
	old, young := t0, t0.Add(time.Minute)
	tests := []struct {
		name        string
		pods        []*corev1.Pod
		phase       PhaseName
		reason      string
		msgContains string
	}{
		{name: "no pods at all is reported as terminating, never a panic", pods: nil,
			phase: PhaseTerminating, reason: ReasonNoPods},
		{name: "new pod not seen by the scheduler yet is Scheduling/Pending", pods: []*corev1.Pod{pendingPod("a", old)},
			phase: PhaseScheduling, reason: ReasonPending, msgContains: "pending for 3m0s"},
		{name: "pod whose ReadWriteOncePod claim is held by another pod is Scheduling/Unschedulable with the scheduler's message",
			pods:  []*corev1.Pod{unschedulable("a", old)},
			phase: PhaseScheduling, reason: "Unschedulable", msgContains: "ReadWriteOncePod access mode"},
		{name: "scheduled pod creating its container is Initializing/ContainerCreating", pods: []*corev1.Pod{scheduled("a", old)},
			phase: PhaseInitializing, reason: "ContainerCreating", msgContains: "container ide: ContainerCreating"},
		{name: "image pull error is Initializing with the kubelet's message, since a registry blip heals",
			pods:  []*corev1.Pod{scheduled("a", old, errImagePull)},
			phase: PhaseInitializing, reason: "ErrImagePull", msgContains: `ghcr.io/nogoo9/node:9: not found`},
		{name: "image pull back-off is Initializing/ImagePullBackOff", pods: []*corev1.Pod{scheduled("a", old, imagePullBackOff)},
			phase: PhaseInitializing, reason: "ImagePullBackOff", msgContains: "Back-off pulling image"},
		{name: "init container running while the main container waits is Initializing/PodInitializing",
			pods: []*corev1.Pod{with(scheduled("a", old, corev1.ContainerStateWaiting{Reason: "PodInitializing"}), func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "clone-repo", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			})},
			phase: PhaseInitializing, reason: "PodInitializing", msgContains: "init container clone-repo is running"},
		{name: "init container failing to pull is Initializing with that container named",
			pods: []*corev1.Pod{with(scheduled("a", old, corev1.ContainerStateWaiting{Reason: "PodInitializing"}), func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "clone-repo", State: corev1.ContainerState{Waiting: &errImagePull}}}
			})},
			phase: PhaseInitializing, reason: "ErrImagePull", msgContains: "container clone-repo:"},
		{name: "running but readiness probe not passing yet is Initializing/ContainersNotReady",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Status.ContainerStatuses[0].Ready = false
				p.Status.Conditions[2] = cond(corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [ide]")
			})},
			phase: PhaseInitializing, reason: ReasonContainersNotRdy, msgContains: "containers not ready: ide"},
		{name: "containers ready but a readiness gate not reported yet is Initializing/ReadinessGatesPending",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "WorkspaceStorageMounted"}}
				p.Status.Conditions[2] = cond(corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady", `corresponding condition of pod readiness gate "WorkspaceStorageMounted" does not exist.`)
			})},
			phase: PhaseInitializing, reason: ReasonReadinessGates, msgContains: "WorkspaceStorageMounted"},
		{name: "running and ready is Ready", pods: []*corev1.Pod{running("a", old)},
			phase: PhaseReady, reason: ReasonRunning},
		{name: "running and ready with its readiness gate True is Ready",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "WorkspaceStorageMounted"}}
				p.Status.Conditions = append(p.Status.Conditions, cond("WorkspaceStorageMounted", corev1.ConditionTrue, "", ""))
			})},
			phase: PhaseReady},
		{name: "crash looping container with no upgrade in flight is Failed/CrashLoopBackOff",
			pods:  []*corev1.Pod{with(scheduled("a", old, crashLoop), func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning; p.Status.PodIP = "10.244.0.12" })},
			phase: PhaseFailed, reason: "CrashLoopBackOff", msgContains: "back-off 5m0s restarting failed container=ide"},
		{name: "invalid image name is Failed/InvalidImageName", pods: []*corev1.Pod{scheduled("a", old, invalidImage)},
			phase: PhaseFailed, reason: "InvalidImageName", msgContains: "repository name must be lowercase"},
		{name: "missing configmap for env is Failed/CreateContainerConfigError", pods: []*corev1.Pod{scheduled("a", old, configError)},
			phase: PhaseFailed, reason: "CreateContainerConfigError", msgContains: `configmap "ide-settings" not found`},
		{name: "evicted pod is Failed with the kubelet's reason and message",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: ephemeral-storage."
			})},
			phase: PhaseFailed, reason: "Evicted", msgContains: "low on resource"},
		{name: "pod whose containers exited is Failed/PodCompleted",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodSucceeded
				p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
			})},
			phase: PhaseFailed, reason: ReasonPodCompleted, msgContains: "exited with code 0"},
		{name: "maintenance annotation on a ready pod is Unavailable/Maintenance with the annotation as message",
			pods:  []*corev1.Pod{annotate(running("a", old), AnnMaintenance, "disk migration until 14:00 UTC")},
			phase: PhaseUnavailable, reason: ReasonMaintenance, msgContains: "disk migration until 14:00 UTC"},
		{name: "maintenance annotation with value true gets a generic message",
			pods:  []*corev1.Pod{annotate(running("a", old), AnnMaintenance, "true")},
			phase: PhaseUnavailable, reason: ReasonMaintenance, msgContains: "in maintenance"},
		{name: "maintenance beats a crash loop: the operator's word is what the user needs",
			pods:  []*corev1.Pod{annotate(scheduled("a", old, crashLoop), AnnMaintenance, "node drain")},
			phase: PhaseUnavailable, reason: ReasonMaintenance},
		{name: "maintenance on the old pod of a running upgrade still takes the workspace out",
			pods:  []*corev1.Pod{upgraded(scheduled("b", young), "a"), annotate(running("a", old), AnnMaintenance, "storage move")},
			phase: PhaseUnavailable, reason: ReasonMaintenance, msgContains: "storage move"},
		{name: "False Workspace condition (readiness gate) is Unavailable with the condition's reason and message",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "WorkspaceStorageMounted"}}
				p.Status.Conditions[2] = cond(corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady", `the status of pod readiness gate "WorkspaceStorageMounted" is not "True", but False`)
				p.Status.Conditions = append(p.Status.Conditions, cond("WorkspaceStorageMounted", corev1.ConditionFalse, "NFSServerUnreachable", "nfs.example:/home is not responding"))
			})},
			phase: PhaseUnavailable, reason: "NFSServerUnreachable", msgContains: "nfs.example:/home is not responding"},
		{name: "False Workspace condition without reason uses the condition type",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "WorkspaceQuotaOK", Status: corev1.ConditionFalse})
			})},
			phase: PhaseUnavailable, reason: "WorkspaceQuotaOK", msgContains: "condition WorkspaceQuotaOK is False"},
		{name: "False condition of another prefix is ignored",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Status.Conditions = append(p.Status.Conditions, cond("DisruptionTarget", corev1.ConditionFalse, "x", "y"))
			})},
			phase: PhaseReady},
		{name: "Workspace condition back to True returns the workspace to Ready",
			pods: []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) {
				p.Status.Conditions = append(p.Status.Conditions, cond("WorkspaceStorageMounted", corev1.ConditionTrue, "", ""))
			})},
			phase: PhaseReady},
		{name: "upgrade intent on the ready pod is Upgrading/UpgradeRequested naming the target",
			pods:  []*corev1.Pod{annotate(running("a", old), AnnUpgradeRequested, "true", AnnUpgradePod, "a-up-xyz12")},
			phase: PhaseUpgrading, reason: ReasonUpgradeRequested, msgContains: "the new pod will be a-up-xyz12"},
		{name: "empty upgrade intent is no intent",
			pods:  []*corev1.Pod{annotate(running("a", old), AnnUpgradeRequested, "")},
			phase: PhaseReady},
		{name: "side-by-side upgrade with the new pod pulling is Upgrading with the new pod's progress",
			pods:  []*corev1.Pod{running("a", old), upgraded(scheduled("b", young, errImagePull), "a")},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: "pod b (version 2.0.0) is replacing a: Initializing: ErrImagePull"},
		{name: "side-by-side upgrade whose new pod crash loops is Upgrading, not Failed: the old pod still serves",
			pods:  []*corev1.Pod{upgraded(scheduled("b", young, crashLoop), "a"), running("a", old)},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: "Failed: CrashLoopBackOff"},
		{name: "recreate upgrade: old pod being deleted, new pod unschedulable until the claim is free",
			pods:  []*corev1.Pod{deleting(running("a", old), now.Add(20*time.Second)), annotate(upgraded(unschedulable("b", young), "a"), AnnUpgradeStrategy, StrategyRecreate, AnnUpgradeStartedAt, now.Add(-time.Minute).Format(time.RFC3339))},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: "Scheduling: Unschedulable"},
		{name: "finished upgrade: new pod ready, old one going away is Ready",
			pods:  []*corev1.Pod{deleting(running("a", old), now.Add(20*time.Second)), upgraded(running("b", young), "a")},
			phase: PhaseReady},
		{name: "an old upgraded pod left behind next to a newer ready pod is not an upgrade in flight",
			pods:  []*corev1.Pod{upgraded(scheduled("a", old), "x"), running("b", young)},
			phase: PhaseReady},
		{name: "maintenance beats upgrading", pods: []*corev1.Pod{annotate(running("a", old), AnnUpgradeRequested, "true", AnnMaintenance, "backup")},
			phase: PhaseUnavailable, reason: ReasonMaintenance},
		{name: "all pods being deleted is Terminating even in maintenance",
			pods:  []*corev1.Pod{annotate(deleting(running("a", old), now.Add(25*time.Second)), AnnMaintenance, "x")},
			phase: PhaseTerminating, reason: ReasonDeleting, msgContains: "pod a is being deleted"},
		{name: "deletion stuck past its grace period says the node may be unreachable",
			pods:  []*corev1.Pod{deleting(running("a", old), now.Add(-2*time.Minute))},
			phase: PhaseTerminating, reason: ReasonDeleting, msgContains: "ended 2m0s ago"},
		{name: "a failed pod replaced by a new scheduling one follows the newest pod",
			pods:  []*corev1.Pod{with(running("a", old), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), unschedulable("b", young)},
			phase: PhaseScheduling, reason: "Unschedulable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Phase(tt.pods, now)
			if got.Phase != tt.phase || (tt.reason != "" && got.Reason != tt.reason) || !strings.Contains(got.Message, tt.msgContains) {
				t.Errorf("Phase() = %+v\nwant phase %s, reason %q, message containing %q", got, tt.phase, tt.reason, tt.msgContains)
			}
			if got.Reason == "" || got.Message == "" {
				t.Errorf("Phase() = %+v: every status needs a reason and a message", got)
			}
		})
	}
}

// TestPhaseTransitions walks one workspace through its life and checks the phase at every step,
// including leaving maintenance without any pod being replaced.
func TestPhaseTransitions(t *testing.T) {
	now := t0.Add(time.Hour)
	a := pendingPod("a", t0)
	steps := []struct {
		name  string
		pods  func() []*corev1.Pod
		phase PhaseName
	}{
		{"created", func() []*corev1.Pod { return []*corev1.Pod{a} }, PhaseScheduling},
		{"bound", func() []*corev1.Pod { a = scheduled("a", t0); return []*corev1.Pod{a} }, PhaseInitializing},
		{"ready", func() []*corev1.Pod { a = running("a", t0); return []*corev1.Pod{a} }, PhaseReady},
		{"maintenance on", func() []*corev1.Pod { annotate(a, AnnMaintenance, "move"); return []*corev1.Pod{a} }, PhaseUnavailable},
		{"maintenance off", func() []*corev1.Pod { delete(a.Annotations, AnnMaintenance); return []*corev1.Pod{a} }, PhaseReady},
		{"upgrade requested", func() []*corev1.Pod { annotate(a, AnnUpgradeRequested, "true"); return []*corev1.Pod{a} }, PhaseUpgrading},
		{"new pod starting", func() []*corev1.Pod {
			return []*corev1.Pod{a, upgraded(scheduled("b", t0.Add(time.Minute)), "a")}
		}, PhaseUpgrading},
		{"new pod ready, old deleting", func() []*corev1.Pod {
			return []*corev1.Pod{deleting(a, now), upgraded(running("b", t0.Add(time.Minute)), "a")}
		}, PhaseReady},
		{"workspace deleted", func() []*corev1.Pod {
			return []*corev1.Pod{a, deleting(upgraded(running("b", t0.Add(time.Minute)), "a"), now)}
		}, PhaseTerminating},
	}
	for _, s := range steps {
		if got := Phase(s.pods(), now); got.Phase != s.phase {
			t.Fatalf("step %q: Phase() = %+v, want %s", s.name, got, s.phase)
		}
	}
}

func TestPhaseDoesNotReorderInput(t *testing.T) {
	pods := []*corev1.Pod{running("a", t0), running("b", t0.Add(time.Minute))}
	Phase(pods, t0)
	if pods[0].Name != "a" || pods[1].Name != "b" {
		t.Fatalf("Phase reordered its input: %s, %s", pods[0].Name, pods[1].Name)
	}
}

// An upgraded pod keeps nogoo9/upgrade-from as history after its upgrade succeeded; when it later
// stops being ready (a crash) the workspace is not "Upgrading" but plainly not ready.
func TestPhaseUpgradeFromIsHistoryAfterSuccess(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "ws-jane-demo-abc123-up-aaaaa", UID: "new", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)),
		Labels:      map[string]string{LabelType: TypeWorkspace, LabelWorkspaceID: "demo"},
		Annotations: map[string]string{AnnUpgradeFrom: "ws-jane-demo-abc123", AnnUpgradeFromUID: "old", AnnUpgradeStrategy: "SideBySide"},
	}, Spec: corev1.PodSpec{NodeName: "kwok-node-0"}, Status: corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "127.1.0.3",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "ide", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}}}},
	}}
	got := Phase([]*corev1.Pod{p}, now)
	if got.Phase == PhaseUpgrading {
		t.Fatalf("Phase = %+v; a finished upgrade's history must not read as Upgrading", got)
	}
}

// gatedBy gives p the scheduling gates names and the PodScheduled condition the scheduler writes
// for a gated pod.
func gatedBy(p *corev1.Pod, names ...string) *corev1.Pod {
	for _, n := range names {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
	}
	p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")}
	return p
}

// recreateHead makes p the new pod of a Recreate upgrade of from that is not confirmed yet.
func recreateHead(p *corev1.Pod, from string, started time.Time) *corev1.Pod {
	return annotate(upgraded(p, from), AnnUpgradeStrategy, StrategyRecreate, AnnUpgradeStartedAt, started.Format(time.RFC3339))
}

// rollbackPod makes p the pod that restores the spec stored on the failed pod from.
func rollbackPod(p *corev1.Pod, from string) *corev1.Pod {
	return annotate(p, AnnUpgradeFrom, from, AnnUpgradeFromVersion, "2.0.0", AnnUpgradeStrategy, StrategyRollback)
}

func withClaim(p *corev1.Pod, claim string) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "home", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	return p
}

// storageMounting gives p (not Ready) the readiness gate WorkspaceStorageMounted, which a storage
// checker has set to False while it mounts.
func storageMounting(p *corev1.Pod) *corev1.Pod {
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "WorkspaceStorageMounted"}}
	p.Status.Conditions = append(p.Status.Conditions, cond("WorkspaceStorageMounted", corev1.ConditionFalse, "Mounting", "mounting nfs.example:/home"))
	return p
}

// TestPhaseOfPodsOnTheirWayIn: the new pod of an upgrade or a rollback that is not serving yet
// shows as Upgrading with its own progress, whatever gates or conditions it carries meanwhile.
func TestPhaseOfPodsOnTheirWayIn(t *testing.T) {
	now := t0.Add(3 * time.Minute)
	old, young := t0, t0.Add(time.Minute)
	for _, tc := range []struct {
		name          string
		pods          []*corev1.Pod
		phase         PhaseName
		reason        string
		msgContains   []string
		msgNotContain string
	}{
		// Finding 2: the rollback pod waits behind nogoo9/volume-release for the failed pod's
		// grace period; the failed pod being deleted, its upgrade is not "in flight" any more.
		{name: "a rollback pod behind the volume-release gate while the failed pod terminates is Upgrading, waiting for that pod",
			pods: []*corev1.Pod{
				deleting(withClaim(scheduled("b", old, crashLoop), "home-demo"), now.Add(20*time.Second)),
				withClaim(gatedBy(rollbackPod(pendingPod("c", young), "b"), GateVolumeRelease), "home-demo"),
			},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress,
			msgContains: []string{"pod c", "waiting for pod b to release its volume"}, msgNotContain: "non-empty scheduling gates"},
		{name: "a rollback pod behind the gate, the failed pod still live, is Upgrading, waiting for that pod",
			pods: []*corev1.Pod{
				withClaim(scheduled("b", old, crashLoop), "home-demo"),
				withClaim(gatedBy(rollbackPod(pendingPod("c", young), "b"), GateVolumeRelease), "home-demo"),
			},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: []string{"waiting for pod b to release its volume"}},
		{name: "a Recreate pod behind the gate while the old pod terminates says which pod holds the volume",
			pods: []*corev1.Pod{
				deleting(withClaim(running("a", old), "home-demo"), now.Add(20*time.Second)),
				withClaim(gatedBy(recreateHead(pendingPod("b", young), "a", young), GateVolumeRelease), "home-demo"),
			},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress,
			msgContains: []string{"pod b (version 2.0.0) is replacing a", ReasonVolumeRelease, "waiting for pod a to release its volume"}, msgNotContain: "non-empty scheduling gates"},
		{name: "a rollback pod behind the gate, the failed pod gone, is Upgrading until nogoo9 removes the gate",
			pods:  []*corev1.Pod{withClaim(gatedBy(rollbackPod(pendingPod("c", young), "b"), GateVolumeRelease), "home-demo")},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: []string{"replacing failed pod b", "waiting for nogoo9 to remove the scheduling gate " + GateVolumeRelease}},
		{name: "a rollback pod whose gate is gone and whose failed pod is gone is a pod coming up, not an upgrade",
			pods:  []*corev1.Pod{rollbackPod(pendingPod("c", young), "b")},
			phase: PhaseScheduling, reason: ReasonPending},
		// Finding 2: the scheduler's SchedulingGated outlives the gate until it looks again.
		{name: "a stale SchedulingGated condition on a pod without gates is plain Scheduling/Pending",
			pods: []*corev1.Pod{with(pendingPod("a", old), func(p *corev1.Pod) {
				p.Status.Conditions = []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")}
			})},
			phase: PhaseScheduling, reason: ReasonPending, msgContains: []string{"waiting for the scheduler"}, msgNotContain: "non-empty scheduling gates"},
		{name: "a pod still behind someone else's gate keeps the scheduler's SchedulingGated",
			pods:  []*corev1.Pod{gatedBy(pendingPod("a", old), "example.com/quota")},
			phase: PhaseScheduling, reason: "SchedulingGated", msgContains: []string{"non-empty scheduling gates"}},
		// Finding 3: the incoming head of a Recreate is the active pod.
		{name: "a Recreate's new pod mounting its storage (Workspace* condition False) is Upgrading, not Unavailable",
			pods: []*corev1.Pod{
				deleting(running("a", old), now.Add(-time.Second)),
				storageMounting(recreateHead(scheduled("b", young), "a", young)),
			},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: []string{"pod b (version 2.0.0) is replacing a", "WorkspaceStorageMounted", "mounting nfs.example:/home"}},
		{name: "the same with the old pod gone: Upgrading",
			pods:  []*corev1.Pod{storageMounting(recreateHead(scheduled("b", young), "a", young))},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress, msgContains: []string{"WorkspaceStorageMounted"}},
		{name: "a side-by-side new pod with a False Workspace* condition, neither pod Ready, is Upgrading",
			pods:  []*corev1.Pod{scheduled("a", old), storageMounting(upgraded(scheduled("b", young), "a"))},
			phase: PhaseUpgrading, reason: ReasonUpgradeInProgress},
		{name: "a Recreate's new pod that is Ready but not confirmed yet counts: its False Workspace* condition is Unavailable",
			pods: []*corev1.Pod{with(recreateHead(running("b", young), "a", young), func(p *corev1.Pod) {
				p.Status.Conditions = append(p.Status.Conditions, cond("WorkspaceQuarantine", corev1.ConditionFalse, "Quarantined", "security scan"))
			})},
			phase: PhaseUnavailable, reason: "Quarantined"},
		{name: "a pod with no upgrade in flight that is mounting its storage is Unavailable",
			pods:  []*corev1.Pod{storageMounting(upgraded(scheduled("b", young), "a"))},
			phase: PhaseUnavailable, reason: "Mounting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Phase(tc.pods, now)
			if got.Phase != tc.phase || (tc.reason != "" && got.Reason != tc.reason) {
				t.Fatalf("Phase() = %+v\nwant phase %s, reason %q", got, tc.phase, tc.reason)
			}
			for _, s := range tc.msgContains {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not contain %q", got.Message, s)
				}
			}
			if tc.msgNotContain != "" && strings.Contains(got.Message, tc.msgNotContain) {
				t.Errorf("message %q contains %q", got.Message, tc.msgNotContain)
			}
			// Input order never matters.
			rev := append([]*corev1.Pod(nil), tc.pods...)
			slices.Reverse(rev)
			if again := Phase(rev, now); again != got {
				t.Errorf("Phase(reversed) = %+v, want %+v", again, got)
			}
		})
	}
}

// TestPhaseOfAnUpgradePairCreatedInOneSecond: creation times have one-second resolution, so an
// upgraded pod and the pod it replaces often tie; the upgrade-from link orders them, as in
// NewestFirst, whatever their names and the input order.
func TestPhaseOfAnUpgradePairCreatedInOneSecond(t *testing.T) {
	now := t0.Add(time.Minute)
	mk := func() (oldPod, newPod *corev1.Pod) {
		// The new pod's name sorts before the old one's: the name alone says the opposite.
		return scheduled("ws-x", t0), upgraded(pendingPod("ws-a", t0), "ws-x")
	}
	o1, n1 := mk()
	o2, n2 := mk()
	a := Phase([]*corev1.Pod{o1, n1}, now)
	b := Phase([]*corev1.Pod{n2, o2}, now)
	if a != b {
		t.Fatalf("Phase depends on input order:\n[old, new] = %+v\n[new, old] = %+v", a, b)
	}
	if a.Phase != PhaseUpgrading {
		t.Errorf("Phase = %+v, want Upgrading: pod ws-a replaces ws-x and is on its way in", a)
	}
	da := Describe([]*corev1.Pod{o1, n1}, "2.0.0", now)
	db := Describe([]*corev1.Pod{n2, o2}, "2.0.0", now)
	if da.ActivePod != db.ActivePod || da.Status != db.Status || da.UpgradePod != db.UpgradePod {
		t.Errorf("Describe depends on input order:\n[old, new] = %+v\n[new, old] = %+v", da, db)
	}
}

// TestNewerThanMirrorsNewestFirst: sortedCopy trusts an input newerThan calls sorted, and
// incomingPod compares with it, so it must be exactly NewestFirst's order.
func TestNewerThanMirrorsNewestFirst(t *testing.T) {
	pods := []*corev1.Pod{
		pendingPod("ws-x", t0),
		upgraded(pendingPod("ws-a", t0), "ws-x"),
		upgraded(pendingPod("ws-m", t0), "ws-a"),
		pendingPod("ws-b", t0.Add(time.Second)),
		upgraded(pendingPod("ws-0", t0.Add(-time.Second)), "ws-z"),
	}
	for _, a := range pods {
		for _, b := range pods {
			if a == b {
				continue
			}
			sorted := NewestFirst([]*corev1.Pod{b, a})
			if want := sorted[0] == a; newerThan(a, b) != want {
				t.Errorf("newerThan(%s, %s) = %v, NewestFirst puts %s first", a.Name, b.Name, !want, sorted[0].Name)
			}
		}
	}
}
