package podcache

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// BenchmarkCompactLayout measures, exactly (heap allocated after two collections), what a cached
// workspace pod would cost as the compact model issue 16 asks for (docs/performance.md, "Eighth
// round"): the facts Transform keeps today, in a struct of their own (layoutPod: ObjectMeta, then
// only the spec and status fields some reader reads, container statuses as 40-byte records with
// their state behind one pointer) instead of a *corev1.Pod, and, second, the same with labels and
// annotations as slices of pairs at their exact size instead of maps. The compact values share
// every string and map with the transformed pod they are made from, as a transform producing them
// would. layoutPod is a measurement, not the model: nothing in nogoo9 uses it. It asserts nothing.
//
//	go test -run '^$' -bench CompactLayout -benchtime 1x -v ./pkg/podcache/
func BenchmarkCompactLayout(b *testing.B) {
	const n = 10000
	var base *corev1.Pod
	for _, w := range podcachetest.Workspaces() {
		if w.Name == "ready" {
			base = w.Pods[0]
		}
	}
	raw := make([][]byte, n)
	for i := range raw {
		p := base.DeepCopy()
		id, owner := fmt.Sprintf("ws-%d", i), fmt.Sprintf("user-%d", i%100)
		p.Name = workspace.PodName(owner, id)
		p.Labels[workspace.LabelWorkspaceID] = id
		p.Annotations[workspace.AnnOwner] = owner
		p.Annotations[workspace.AnnWorkspacePath] = "/ws/" + owner + "/" + id + "/"
		p.Status.PodIP = fmt.Sprintf("127.1.%d.%d", i/256, i%256)
		var err error
		if raw[i], err = p.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	heap := func() float64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc)
	}
	b.Logf("struct sizes: corev1.Pod %d, layoutPod %d (ObjectMeta %d), corev1.ContainerStatus %d, layoutContainer %d",
		unsafe.Sizeof(corev1.Pod{}), unsafe.Sizeof(layoutPod{}), unsafe.Sizeof(metav1.ObjectMeta{}),
		unsafe.Sizeof(corev1.ContainerStatus{}), unsafe.Sizeof(layoutContainer{}))
	for b.Loop() {
		h0 := heap()
		pods := make([]*corev1.Pod, n)
		for i := range pods {
			p := &corev1.Pod{}
			if err := p.Unmarshal(raw[i]); err != nil {
				b.Fatal(err)
			}
			o, err := Transform(p)
			if err != nil {
				b.Fatal(err)
			}
			pods[i] = o.(*corev1.Pod)
		}
		h1 := heap()
		compact := make([]*layoutPod, n)
		for i, p := range pods {
			compact[i] = layoutOf(p)
		}
		pods = nil // the compact values keep the strings and maps they share
		h2 := heap()
		paired := make([]*layoutPairs, n)
		for i, c := range compact {
			paired[i] = &layoutPairs{layoutPod: *c, labels: pairsOf(c.Labels), annotations: pairsOf(c.Annotations)}
			paired[i].Labels, paired[i].Annotations = nil, nil
		}
		compact = nil
		h3 := heap()
		b.ReportMetric((h1-h0)/n, "pod-B/workspace")
		b.ReportMetric((h2-h0)/n, "compact-B/workspace")
		b.ReportMetric((h3-h0)/n, "compact-pairs-B/workspace")
		runtime.KeepAlive(pods)
		runtime.KeepAlive(compact)
		runtime.KeepAlive(paired)
	}
}

// layoutPod is the compact model's candidate layout (BenchmarkCompactLayout).
type layoutPod struct {
	metav1.ObjectMeta
	NodeName               string
	Claims                 []string
	ReadinessGates         []corev1.PodConditionType
	SchedulingGates        []string
	Phase                  corev1.PodPhase
	Reason, Message, PodIP string
	Conditions             []corev1.PodCondition
	Containers, Init       []layoutContainer
}

type layoutContainer struct {
	Name                       string
	Ready, Started, StartedSet bool
	RestartCount               int32
	State, LastTerminated      *layoutState
}

type layoutState struct {
	Kind                uint8 // waiting, running, terminated
	ExitCode, Signal    int32
	Reason, Message     string
	StartedAt, Finished metav1.Time
}

type layoutPairs struct {
	layoutPod
	labels, annotations []struct{ k, v string }
}

func pairsOf(m map[string]string) []struct{ k, v string } {
	out := make([]struct{ k, v string }, 0, len(m))
	for k, v := range m {
		out = append(out, struct{ k, v string }{k, v})
	}
	return out
}

func layoutStateOf(s corev1.ContainerState) *layoutState {
	switch {
	case s.Waiting != nil:
		return &layoutState{Kind: 1, Reason: s.Waiting.Reason, Message: s.Waiting.Message}
	case s.Running != nil:
		return &layoutState{Kind: 2, StartedAt: s.Running.StartedAt}
	case s.Terminated != nil:
		t := s.Terminated
		return &layoutState{Kind: 3, ExitCode: t.ExitCode, Signal: t.Signal, Reason: t.Reason, Message: t.Message,
			StartedAt: t.StartedAt, Finished: t.FinishedAt}
	}
	return nil
}

func layoutContainersOf(in []corev1.ContainerStatus) []layoutContainer {
	if len(in) == 0 {
		return nil
	}
	out := make([]layoutContainer, len(in))
	for i, c := range in {
		out[i] = layoutContainer{Name: c.Name, Ready: c.Ready, RestartCount: c.RestartCount,
			Started: c.Started != nil && *c.Started, StartedSet: c.Started != nil,
			State: layoutStateOf(c.State), LastTerminated: layoutStateOf(c.LastTerminationState)}
	}
	return out
}

func layoutOf(p *corev1.Pod) *layoutPod {
	out := &layoutPod{ObjectMeta: p.ObjectMeta, NodeName: p.Spec.NodeName, Phase: p.Status.Phase,
		Reason: p.Status.Reason, Message: p.Status.Message, PodIP: p.Status.PodIP, Conditions: p.Status.Conditions,
		Containers: layoutContainersOf(p.Status.ContainerStatuses), Init: layoutContainersOf(p.Status.InitContainerStatuses)}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out.Claims = append(out.Claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, g := range p.Spec.ReadinessGates {
		out.ReadinessGates = append(out.ReadinessGates, g.ConditionType)
	}
	for _, g := range p.Spec.SchedulingGates {
		out.SchedulingGates = append(out.SchedulingGates, g.Name)
	}
	return out
}
