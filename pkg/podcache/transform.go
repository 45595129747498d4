package podcache

import (
	"unique"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Transform is the informer transform for workspace pods: the one copy of a workspace's facts
// that the controllers, the front end's views and the proxy's routes all read, stored as a *Pod
// (a *corev1.Pod in, a *Pod out; Materialize gives back the *corev1.Pod it stands for). It keeps exactly
// the fields some component reads (docs/performance.md, "What the pod cache keeps"; the list is
// TestTransformKeepsWhatEveryReaderReads) and interns the strings many pods share, so 10,000
// workspaces of a few templates and owners hold one copy of each label key, template name,
// version, node name and condition reason.
//
// Kept: metadata (name, namespace, UID, resourceVersion, creation and deletion time and grace,
// labels, annotations except the rollback spec and kubectl's last-applied copy, finalizers,
// owner references); spec: node name, PVC volumes, readiness gates, scheduling gates (a
// Recreate's volume-release gate, a stopped workspace's gate); status: phase, reason, message,
// pod IP, conditions other than the kubelet's Initialized, ContainersReady and
// PodReadyToStartContainers and a bound pod's PodScheduled=True (type, status, reason, message,
// transition time; DisruptionTarget among them: the lifecycle planner copies a pod Kubernetes
// deletes for a disruption, TestTransformKeepsTheDisruptionTarget) and container and
// init-container statuses (name, ready, started, restart count, state, last termination state).
//
// Kept only while a workspace pod that mounts a claim carries the upgrade intent: its whole spec
// (KeepsSpec), for a Recreate start's rollback record.
//
// Dropped: managed fields, the generation (since the tenth round: nothing reads a pod's), every
// other spec field, containers included (the controller and the front end read a pod's full
// spec from the API server when they need it: a rollback, a stop, an upgrade's diff, and the
// upgrade's rollback copy when the kept spec is not of the version planned from), image IDs,
// container IDs, resources, QoS class, volume mounts, probe times, host IPs, start time, pod IPs
// beyond the first.
func Transform(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	var spec *corev1.PodSpec
	if KeepsSpec(pod) {
		s := pod.Spec // strip replaces the spec and leaves this one's slices alone
		spec = &s
	}
	if err := strip(pod, false); err != nil {
		return nil, err
	}
	p := compact(pod) // interns the labels and annotations into the Pod's own form
	if spec != nil {
		p.ownRare().Spec = spec
	}
	return p, nil
}

// KeepsSpec reports whether Transform keeps pod's whole spec (Rare.Spec, read by Cache.FullPod):
// a workspace pod that carries the upgrade intent and mounts a claim, which may be about to start
// a Recreate upgrade. That start records the pod's spec on the new pod for a rollback
// (upgrade.RollbackSpec); kept here, it needs no read of the old pod from the API server, a round
// trip on the way to the volume's release. Only such pods keep it, and only until the intent goes
// (the upgrade deletes the old pod, or clears the intent): a bulk upgrade of N such workspaces
// holds up to N specs for its duration, a cluster at rest none.
func KeepsSpec(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Annotations[workspace.AnnUpgradeRequested] == "" {
		return false
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}

// Strip reduces pod in place to what Transform keeps and returns it: Transform and Materialize in
// one step, for tests and callers that hold a full pod.
func Strip(pod *corev1.Pod) (*corev1.Pod, error) {
	if err := strip(pod, true); err != nil {
		return nil, err
	}
	return pod, nil
}

// strip reduces pod in place; with maps, it interns its labels and annotations into maps of
// their exact size too (Transform leaves them to compact).
func strip(pod *corev1.Pod, maps bool) error {
	if _, err := workspace.StripPod(pod); err != nil {
		return err
	}
	pod.GenerateName = ""
	pod.Generation = 0 // read by nothing (a pod's spec barely changes)
	pod.Namespace = intern(pod.Namespace)
	for i, f := range pod.Finalizers {
		pod.Finalizers[i] = intern(f)
	}
	if maps {
		pod.Labels = internMap(pod.Labels, internedLabelValues)
		pod.Annotations = internMap(pod.Annotations, internedAnnotationValues)
	}
	pod.Spec.NodeName = intern(pod.Spec.NodeName)
	for i := range pod.Spec.Volumes {
		pod.Spec.Volumes[i].Name = intern(pod.Spec.Volumes[i].Name)
	}
	pod.Status = stripStatus(pod.Status, pod.Spec.NodeName != "")
	return nil
}

// stripStatus keeps the status fields workspace.Phase, workspace.IsReady, the upgrade deadline's
// failure diagnosis and the proxy's routes read. bound says the pod has a node: its PodScheduled
// condition, when True, is then read by nothing (workspace.Phase reads it only of a pod without a
// node, the upgrade deadline only when False), and costs the pod 120 bytes of conditions.
func stripStatus(s corev1.PodStatus, bound bool) corev1.PodStatus {
	out := corev1.PodStatus{
		Phase:   corev1.PodPhase(intern(string(s.Phase))),
		Reason:  intern(s.Reason),
		Message: s.Message,
		PodIP:   s.PodIP,
	}
	read := func(c *corev1.PodCondition) bool {
		return !unreadConditions[c.Type] && !(bound && c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue)
	}
	n := 0
	for i := range s.Conditions {
		if read(&s.Conditions[i]) {
			n++
		}
	}
	if n > 0 {
		// At its exact size: a slice as long as the decoded one (four or five conditions from a
		// kubelet, one or two kept) took 512 or 640 bytes where one kept condition needs 128.
		out.Conditions = make([]corev1.PodCondition, 0, n)
		for i := range s.Conditions {
			c := &s.Conditions[i]
			if !read(c) {
				continue
			}
			out.Conditions = append(out.Conditions, corev1.PodCondition{
				Type:               corev1.PodConditionType(intern(string(c.Type))),
				Status:             corev1.ConditionStatus(intern(string(c.Status))),
				Reason:             intern(c.Reason),
				Message:            c.Message,
				LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	out.ContainerStatuses = stripContainerStatuses(s.ContainerStatuses)
	out.InitContainerStatuses = stripContainerStatuses(s.InitContainerStatuses)
	return out
}

func stripContainerStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, c := range in {
		out[i] = corev1.ContainerStatus{
			Name: intern(c.Name), Ready: c.Ready, Started: sharedBool(c.Started), RestartCount: c.RestartCount,
			State: stripState(c.State), LastTerminationState: stripState(c.LastTerminationState),
		}
	}
	return out
}

func stripState(s corev1.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	if w := s.Waiting; w != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: intern(w.Reason), Message: w.Message}
	}
	if r := s.Running; r != nil {
		out.Running = &corev1.ContainerStateRunning{StartedAt: r.StartedAt}
	}
	if t := s.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: t.ExitCode, Signal: t.Signal, Reason: intern(t.Reason), Message: t.Message,
			StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
		}
	}
	return out
}

// sharedBool is b as one of two pointers every cached pod shares (cached pods are read only):
// the decoded one is a separate allocation per container status.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &sharedTrue
	}
	return &sharedFalse
}

var sharedTrue, sharedFalse = true, false

// unreadConditions are the kubelet's conditions no component reads: workspace.Phase and the
// upgrade deadline read PodScheduled and PodReady, the phase and routes nogoo9's own Workspace*
// conditions, IsReady the readiness gates' conditions, the lifecycle planner DisruptionTarget
// (lifecycle.Disrupted): never add that one here.
var unreadConditions = map[corev1.PodConditionType]bool{
	corev1.PodInitialized: true, corev1.ContainersReady: true, corev1.PodReadyToStartContainers: true,
}

// internedLabelValues and internedAnnotationValues are the keys whose values many pods share
// (a type, a template, a version, an owner, a port): those values are interned. Values unique to
// one pod (workspace id, path, pod name) are not: interning them would only add a table entry.
var (
	internedLabelValues = map[string]bool{
		workspace.LabelType: true, workspace.LabelTemplate: true, workspace.LabelTemplateVersion: true,
		workspace.LabelUserSub: true,
	}
	internedAnnotationValues = map[string]bool{
		workspace.AnnOwner: true, workspace.AnnTemplateVersion: true, workspace.AnnWorkspacePort: true,
		workspace.AnnPreviewPort: true, workspace.AnnStripPrefix: true, workspace.AnnPublicPreview: true,
	}
)

// internMap interns every key of m and the values of the keys in shared. The map is rebuilt at
// its exact size: a decoded map has room to grow that a cached pod never uses.
func internMap(m map[string]string, shared map[string]bool) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if shared[k] {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}

// intern returns the canonical copy of s: equal strings of many pods share one backing array.
// The unique package holds its entries weakly, so strings no pod uses any more are freed.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
