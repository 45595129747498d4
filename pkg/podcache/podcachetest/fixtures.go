// Package podcachetest builds workspaces of full pods, as the API server sends them, in the states
// the components distinguish (scheduling, pulling, crash-looping, ready, upgrading, rolling back,
// terminating, failed). Tests run a component's reader over these pods and over the same pods
// passed through podcache.Transform, and expect the same answer: a field the transform drops that
// a reader needs shows up as a difference.
package podcachetest

import (
	"fmt"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// T0 is the fixtures' clock: every timestamp is relative to it.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Workspace is one workspace's pods in a named state.
type Workspace struct {
	Name string
	Pods []*corev1.Pod
}

// HeapAllocated is the heap allocated after two collections (the memory benchmarks' exact bytes,
// not a sampled profile).
func HeapAllocated() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// ReadyWorkspaces returns n ready workspaces of one pod each (Ready's pod under its own id, owner
// user-<i mod 100>, path and pod IP), in namespace ns ("": the fixture's): the memory benchmarks'
// population.
func ReadyWorkspaces(n int, ns string) []*corev1.Pod {
	base := Ready()
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		p := base.DeepCopy()
		id, owner := fmt.Sprintf("ws-%d", i), fmt.Sprintf("user-%d", i%100)
		if ns != "" {
			p.Namespace = ns
		}
		p.Name = workspace.PodName(owner, id)
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		p.Labels[workspace.LabelWorkspaceID] = id
		p.Annotations[workspace.AnnOwner] = owner
		p.Annotations[workspace.AnnWorkspacePath] = "/ws/" + owner + "/" + id + "/"
		p.Status.PodIP = fmt.Sprintf("127.1.%d.%d", i/256, i%256)
		pods[i] = p
	}
	return pods
}

// Ready returns a fresh full pod of the "ready" workspace: the common case the memory
// benchmarks copy.
func Ready() *corev1.Pod {
	for _, w := range Workspaces() {
		if w.Name == "ready" {
			return w.Pods[0]
		}
	}
	panic("podcachetest: no ready workspace among the fixtures")
}

// Workspaces returns fresh full pods for every state (callers may transform them in place).
func Workspaces() []Workspace {
	return []Workspace{
		{"pending unschedulable", []*corev1.Pod{full("a", "1", 0, func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/3 nodes are available: 3 Insufficient memory.", LastTransitionTime: metav1.NewTime(T0.Add(time.Second)),
			}}}
		})}},
		{"image pull back-off", []*corev1.Pod{full("b", "1", 0, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = conditions(false)
			p.Status.ContainerStatuses[0].Ready = false
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ImagePullBackOff", Message: "Back-off pulling image \"registry.local/ide:v9\""}}
		})}},
		{"init container running", []*corev1.Pod{full("c", "1", 0, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = conditions(false)
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "clone", Image: "git:1", ImageID: "sha256:1",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(T0.Add(2 * time.Second))}}}}
			p.Status.ContainerStatuses[0].Ready = false
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
		})}},
		{"crash loop", []*corev1.Pod{full("d", "1", 0, func(p *corev1.Pod) {
			p.Status.Conditions = conditions(false)
			p.Status.ContainerStatuses[0].Ready = false
			p.Status.ContainerStatuses[0].RestartCount = 4
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}}
			p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 2, Reason: "Error", Message: "boom", ContainerID: "containerd://abc",
				StartedAt: metav1.NewTime(T0), FinishedAt: metav1.NewTime(T0.Add(time.Second))}}
		})}},
		{"exited", []*corev1.Pod{full("e", "1", 0, func(p *corev1.Pod) {
			p.Status.Conditions = conditions(false)
			p.Status.ContainerStatuses[0].Ready = false
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.NewTime(T0.Add(time.Minute))}}
		})}},
		{"ready", []*corev1.Pod{full("f", "1", 0, nil)}},
		{"ready with a preview", []*corev1.Pod{full("g", "1", 0, func(p *corev1.Pod) {
			p.Annotations[workspace.AnnPreviewPath] = "/preview/g/"
			p.Annotations[workspace.AnnPreviewPort] = "3000"
			p.Annotations[workspace.AnnPublicPreview] = "true"
			p.Annotations[workspace.AnnStripPrefix] = "false"
		})}},
		{"not ready with a readiness gate", []*corev1.Pod{full("h", "1", 0, func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/warm"}}
			p.Status.Conditions = append(conditions(false), corev1.PodCondition{Type: "example.com/warm", Status: corev1.ConditionFalse})
			p.Status.Conditions[3].Reason, p.Status.Conditions[3].Message = "ReadinessGatesNotReady", "the status of pod readiness gate \"example.com/warm\" is not \"True\""
		})}},
		{"ready through a readiness gate", []*corev1.Pod{full("n", "1", 0, func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/warm"}}
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "example.com/warm", Status: corev1.ConditionTrue})
		})}},
		{"out of service through a False Workspace condition", []*corev1.Pod{full("o", "1", 0, func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: workspace.ConditionPrefix + "Healthy",
				Status: corev1.ConditionFalse, Reason: "DiskFull", Message: "the home volume is full"})
		})}},
		{"upgrading side by side", upgrading("i")},
		{"terminating past its grace period", []*corev1.Pod{full("j", "1", 0, func(p *corev1.Pod) {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(T0.Add(time.Minute)))
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			p.Finalizers = []string{"example.com/hold"}
		})}},
		{"failed", []*corev1.Pod{full("k", "1", 0, func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
			p.Status.Conditions = conditions(false)
			p.Status.ContainerStatuses[0].Ready = false
		})}},
		{"in maintenance with a last upgrade error", []*corev1.Pod{full("l", "1", 0, func(p *corev1.Pod) {
			p.Annotations[workspace.AnnMaintenance] = "disk migration until 14:00"
			p.Annotations[workspace.AnnLastUpgradeError] = "2026-03-01T11:00:00Z: ImagePullBackOff: image not found"
		})}},
		{"bad port annotation", []*corev1.Pod{full("m", "1", 0, func(p *corev1.Pod) {
			p.Annotations[workspace.AnnWorkspacePort] = "http"
		})}},
	}
}

func conditions(ready bool) []corev1.PodCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	at := metav1.NewTime(T0.Add(3 * time.Second))
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at, LastProbeTime: at},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: at},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: at, ObservedGeneration: 1},
	}
}

// upgrading is a workspace whose version-1 pod is being replaced by a version-2 pod that is not
// ready yet.
func upgrading(id string) []*corev1.Pod {
	old := full(id, "1", 0, func(p *corev1.Pod) {
		p.Annotations[workspace.AnnUpgradeRequested] = "true"
		p.Annotations[workspace.AnnUpgradePod] = p.Name + "-v2"
		p.Annotations[workspace.AnnUpgradeStartedAt] = T0.Add(time.Minute).Format(time.RFC3339)
	})
	up := full(id, "2", time.Minute, func(p *corev1.Pod) {
		p.Name = old.Name + "-v2"
		p.UID = types.UID("uid-" + p.Name)
		p.Annotations[workspace.AnnUpgradeFrom] = old.Name
		p.Annotations[workspace.AnnUpgradeFromUID] = string(old.UID)
		p.Annotations[workspace.AnnUpgradeFromVersion] = "1"
		p.Annotations[workspace.AnnUpgradeStrategy] = "SideBySide"
		p.Annotations[workspace.AnnUpgradeStartedAt] = T0.Add(time.Minute).Format(time.RFC3339)
		p.Status.Conditions = conditions(false)
		p.Status.ContainerStatuses[0].Ready = false
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	})
	return []*corev1.Pod{old, up}
}

// full is a ready, running workspace pod with every field the API server fills in, then edit.
func full(id, version string, age time.Duration, edit func(*corev1.Pod)) *corev1.Pod {
	owner := "user-" + id
	name := workspace.PodName(owner, id)
	created := metav1.NewTime(T0.Add(age))
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, GenerateName: "", Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "4711",
			Generation: 1, CreationTimestamp: created,
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
				workspace.LabelUserSub: workspace.UserLabel(owner), workspace.LabelTemplate: "python",
				workspace.LabelTemplateVersion: workspace.VersionLabel(version), "team": "blue",
			},
			Annotations: map[string]string{
				workspace.AnnOwner: owner, workspace.AnnTemplateVersion: version, workspace.AnnWorkspaceName: "Workspace " + id,
				workspace.AnnWorkspacePath: "/ws/" + workspace.UserLabel(owner) + "/" + id + "/", workspace.AnnWorkspacePort: "8080",
				workspace.AnnContext:                               `{"repo":"https://example.com/r.git"}`,
				workspace.AnnRollbackSpec:                          `{"containers":[{"name":"ide","image":"registry.local/ide:v0"}]}`,
				"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Pod"}`,
				"example.com/note":                                 "kept",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "nogoo9", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1", ServiceAccountName: "default", SchedulerName: "default-scheduler",
			TerminationGracePeriodSeconds: ptr.To[int64](30), RestartPolicy: corev1.RestartPolicyAlways,
			InitContainers: []corev1.Container{{Name: "clone", Image: "git:1", Args: []string{"clone"}}},
			Containers: []corev1.Container{{
				Name: "ide", Image: "registry.local/ide:v" + version,
				Env:            []corev1.EnvVar{{Name: "HOME", Value: "/home/user"}},
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "home", MountPath: "/home/user"}, {Name: "kube-api-access", MountPath: "/var/run/secrets"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home-" + name}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable,
			PodIP: "127.1.0." + fmt.Sprint(len(id)+len(version)), PodIPs: []corev1.PodIP{{IP: "127.1.0.9"}},
			HostIP: "10.0.0.1", HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}}, StartTime: ptr.To(metav1.NewTime(T0.Add(age + time.Second))),
			Conditions: conditions(true),
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "ide", Ready: true, Started: ptr.To(true), Image: "registry.local/ide:v" + version, ImageID: "sha256:abc",
				ContainerID: "containerd://" + name,
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(T0.Add(age + 2*time.Second))}},
			}},
		},
	}
	if edit != nil {
		edit(p)
	}
	return p
}
