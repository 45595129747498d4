package podcache

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pod is what the pod informer stores of a workspace pod: the facts Transform keeps, in a struct
// of their own instead of a *corev1.Pod (whose struct is 1,240 bytes, most of them fields nobody
// reads, and whose container statuses are 208 bytes each). Its metadata is the pod's, so it is a
// client.Object for store keys, label selectors, indexes and controller-runtime's event handlers.
// Its labels and annotations are not maps: their keys are shared by the pods of a template
// (keySet) and a pod holds its values; Label, Annotation and Labels (a labels.Labels for
// selectors) read them without building a map, GetLabels and GetAnnotations build one per call
// (for generic code only: nogoo9's readers use workspace.LabelOf and AnnotationOf, which call Label
// and Annotation).
//
// Readers that want a *corev1.Pod get one from Materialize (shared, read only) or, through the
// manager's client, from Cache, which materialises every Get and List (docs/performance.md, "One
// workspace model and its memory"). A Pod in the store is read only: write to one and the cache
// is wrong.
type Pod struct {
	Name, Namespace   string
	UID               types.UID
	ResourceVersion   string
	CreationTimestamp metav1.Time
	DeletionTimestamp *metav1.Time
	keys              *keySet  // the label and annotation keys, shared (meta.go)
	vals              []string // their values: the labels', then the annotations'
	// Rare is what few pods have (nil for none): a pointer instead of 160 bytes of empty
	// fields in every pod.
	Rare *Rare

	NodeName          string
	Claims            []Claim // the pod's PersistentVolumeClaim volumes
	Phase             corev1.PodPhase
	PodIP             string
	Conditions        []corev1.PodCondition
	ContainerStatuses []ContainerStatus
}

// Rare is the part of a cached Pod that few pods have: a terminating pod's grace, owner
// references, finalizers, readiness and scheduling gates, init containers, a status reason and
// message (a failed or evicted pod's), the whole spec of a pod about to be upgraded (KeepsSpec).
type Rare struct {
	DeletionGracePeriodSeconds *int64
	OwnerReferences            []metav1.OwnerReference
	Finalizers                 []string
	ReadinessGates             []corev1.PodReadinessGate
	SchedulingGates            []corev1.PodSchedulingGate
	InitContainerStatuses      []ContainerStatus
	Reason, Message            string
	// Spec is the pod's whole spec as its watch event brought it, kept only while KeepsSpec (nil
	// otherwise): read only, shared by DeepCopy's copies, never materialised (Cache.FullPod).
	Spec *corev1.PodSpec
}

// rare is p's Rare, or an empty one (read only).
func (p *Pod) rare() *Rare {
	if p.Rare == nil {
		return &noRare
	}
	return p.Rare
}

var noRare Rare

// Claim is a PersistentVolumeClaim volume of a pod.
type Claim struct {
	Volume, ClaimName string
	ReadOnly          bool
}

// ContainerStatus is what the cache keeps of a container's status (80 bytes instead of 208).
type ContainerStatus struct {
	Name                        string
	Ready                       bool
	RestartCount                int32
	Started                     *bool // one of two shared pointers
	State, LastTerminationState corev1.ContainerState
}

var (
	_           client.Object = &Pod{}
	podGVK                    = corev1.SchemeGroupVersion.WithKind("Pod")
	podTypeMeta               = metav1.TypeMeta{Kind: podGVK.Kind, APIVersion: podGVK.GroupVersion().String()}
)

// GetObjectKind implements runtime.Object: the stored object carries no type meta.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (p *Pod) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// DeepCopy returns a copy of p that shares nothing writable with it.
func (p *Pod) DeepCopy() *Pod {
	if p == nil {
		return nil
	}
	out := *p
	if p.DeletionTimestamp != nil {
		t := *p.DeletionTimestamp
		out.DeletionTimestamp = &t
	}
	out.vals = slices.Clone(p.vals) // the keys are shared and never written
	out.Claims = slices.Clone(p.Claims)
	if p.Conditions != nil {
		out.Conditions = make([]corev1.PodCondition, len(p.Conditions))
		for i := range p.Conditions {
			p.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	out.ContainerStatuses = deepContainers(p.ContainerStatuses)
	if r := p.Rare; r != nil {
		c := *r
		if r.DeletionGracePeriodSeconds != nil {
			g := *r.DeletionGracePeriodSeconds
			c.DeletionGracePeriodSeconds = &g
		}
		if r.OwnerReferences != nil {
			c.OwnerReferences = make([]metav1.OwnerReference, len(r.OwnerReferences))
			for i := range r.OwnerReferences {
				r.OwnerReferences[i].DeepCopyInto(&c.OwnerReferences[i])
			}
		}
		c.Finalizers = slices.Clone(r.Finalizers)
		c.ReadinessGates = slices.Clone(r.ReadinessGates)
		c.SchedulingGates = slices.Clone(r.SchedulingGates)
		c.InitContainerStatuses = deepContainers(r.InitContainerStatuses)
		out.Rare = &c
	}
	return &out
}

func deepContainers(in []ContainerStatus) []ContainerStatus {
	if in == nil {
		return nil
	}
	out := make([]ContainerStatus, len(in))
	for i, c := range in {
		out[i] = c
		c.State.DeepCopyInto(&out[i].State)
		c.LastTerminationState.DeepCopyInto(&out[i].LastTerminationState)
		if c.Started != nil {
			b := *c.Started
			out[i].Started = &b
		}
	}
	return out
}

// Materialize returns p as the *corev1.Pod Transform used to store: exactly the kept fields.
// Its labels and annotations are maps of its own; its other slices and pointers are p's own:
// read only, like the cache's pods always were.
func (p *Pod) Materialize() *corev1.Pod {
	out := &corev1.Pod{}
	p.MaterializeInto(out)
	return out
}

// MaterializeInto fills out as Materialize does (for the items of a PodList).
func (p *Pod) MaterializeInto(out *corev1.Pod) { p.materializeInto(out, nil, nil) }

// materializeInto is MaterializeInto with the label and annotation maps built into labels and
// annotations when they are not nil (reused from an earlier call: Every.Workspaces).
func (p *Pod) materializeInto(out *corev1.Pod, labels, annotations map[string]string) {
	p.materializeReusing(out, &reused{labels: labels, annotations: annotations})
}

// reused is the memory of an earlier materialised pod that materializeReusing writes into
// (Scratch): its maps, its container statuses and its claim volumes, each used when it has room.
type reused struct {
	labels, annotations map[string]string
	containers          []corev1.ContainerStatus
	volumes             []corev1.Volume
	claims              []corev1.PersistentVolumeClaimVolumeSource
}

// materializeReusing is materializeInto writing into the memory of use.
func (p *Pod) materializeReusing(out *corev1.Pod, use *reused) {
	r := p.rare()
	*out = corev1.Pod{TypeMeta: podTypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		DeletionGracePeriodSeconds: r.DeletionGracePeriodSeconds, OwnerReferences: r.OwnerReferences,
		Finalizers: r.Finalizers, Labels: p.labelMap(use.labels), Annotations: p.annotationMap(use.annotations),
	}}
	out.Spec.NodeName = p.NodeName
	if n := len(p.Claims); n > 0 {
		volumes, claims := use.volumes, use.claims
		if cap(volumes) < n || cap(claims) < n {
			volumes, claims = make([]corev1.Volume, n), make([]corev1.PersistentVolumeClaimVolumeSource, n)
		}
		volumes, claims = volumes[:n], claims[:n]
		for i, c := range p.Claims {
			claims[i] = corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName, ReadOnly: c.ReadOnly}
			volumes[i] = corev1.Volume{Name: c.Volume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &claims[i]}}
		}
		out.Spec.Volumes = volumes
		use.volumes, use.claims = volumes, claims
	}
	out.Spec.ReadinessGates = r.ReadinessGates
	out.Spec.SchedulingGates = r.SchedulingGates
	out.Status = corev1.PodStatus{Phase: p.Phase, Reason: r.Reason, Message: r.Message, PodIP: p.PodIP, Conditions: p.Conditions,
		ContainerStatuses: materializeContainers(p.ContainerStatuses, use.containers), InitContainerStatuses: materializeContainers(r.InitContainerStatuses, nil)}
	if out.Labels != nil {
		use.labels = out.Labels
	}
	if out.Annotations != nil {
		use.annotations = out.Annotations
	}
	if cap(out.Status.ContainerStatuses) > cap(use.containers) {
		use.containers = out.Status.ContainerStatuses
	}
}

// materializeContainers is in as the API's type, written into buf when it has room for them.
func materializeContainers(in []ContainerStatus, buf []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := buf[:0:cap(buf)]
	if cap(out) < len(in) {
		out = make([]corev1.ContainerStatus, len(in))
	}
	out = out[:len(in)]
	for i, c := range in {
		out[i] = corev1.ContainerStatus{Name: c.Name, Ready: c.Ready, RestartCount: c.RestartCount, Started: c.Started,
			State: c.State, LastTerminationState: c.LastTerminationState}
	}
	return out
}

// compact is the Pod of a pod Transform has stripped (all but its labels and annotations, which
// compact interns); it shares p's strings and slices.
func compact(p *corev1.Pod) *Pod {
	out := &Pod{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		NodeName: p.Spec.NodeName, Phase: p.Status.Phase, PodIP: p.Status.PodIP,
		Conditions:        p.Status.Conditions,
		ContainerStatuses: compactContainers(p.Status.ContainerStatuses),
	}
	r := Rare{
		DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds, OwnerReferences: p.OwnerReferences, Finalizers: p.Finalizers,
		ReadinessGates: p.Spec.ReadinessGates, SchedulingGates: p.Spec.SchedulingGates,
		InitContainerStatuses: compactContainers(p.Status.InitContainerStatuses),
		Reason:                p.Status.Reason, Message: p.Status.Message,
	}
	if r.DeletionGracePeriodSeconds != nil || len(r.OwnerReferences)+len(r.Finalizers)+len(r.ReadinessGates)+len(r.SchedulingGates)+
		len(r.InitContainerStatuses) > 0 || r.Reason != "" || r.Message != "" {
		rare := r // a copy, so that r stays on the stack: a pod without a Rare part allocates none
		out.Rare = &rare
	}
	out.setMeta(p.Labels, p.Annotations)
	n := 0
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			n++
		}
	}
	if n > 0 { // at their exact number: a pod's other volumes (the token's) are not kept
		out.Claims = make([]Claim, 0, n)
		for _, v := range p.Spec.Volumes {
			if c := v.PersistentVolumeClaim; c != nil {
				out.Claims = append(out.Claims, Claim{Volume: v.Name, ClaimName: c.ClaimName, ReadOnly: c.ReadOnly})
			}
		}
	}
	return out
}

func compactContainers(in []corev1.ContainerStatus) []ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]ContainerStatus, len(in))
	for i, c := range in {
		out[i] = ContainerStatus{Name: c.Name, Ready: c.Ready, RestartCount: c.RestartCount, Started: c.Started,
			State: c.State, LastTerminationState: c.LastTerminationState}
	}
	return out
}

// Of is the cached Pod an informer event, a store or a test hands over: a *Pod as it is (a
// tombstone's object included), a *corev1.Pod transformed from a copy (fake informers, tests),
// nil for anything else (ofPod says why).
func Of(obj any) *Pod {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch p := obj.(type) {
	case *Pod:
		return p
	case *corev1.Pod:
		if p == nil {
			return nil
		}
		o, err := Transform(p.DeepCopy())
		if err != nil {
			return nil
		}
		return o.(*Pod)
	}
	return nil
}

// ofPod is Of with the reason it found no Pod, for a reader to return (Of, on every informer
// event, builds no error).
func ofPod(obj any) (*Pod, error) {
	if p := Of(obj); p != nil {
		return p, nil
	}
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok && p != nil {
		_, err := Transform(p.DeepCopy())
		return nil, fmt.Errorf("cached pod %s/%s, a full pod (the store's informer has no podcache.Transform), cannot be "+
			"reduced to the cache's form, so ReadWorkspace cannot serve it; read it with Get or List, or from the API server: %w", p.Namespace, p.Name, err)
	}
	return nil, fmt.Errorf("the pod store holds a %T, not a pod: build the cache with podcache.NewCache and podcache.Options", obj)
}

// NodeName is the node of a cached pod (either type), "" for none.
func NodeName(obj any) string {
	switch p := obj.(type) {
	case *corev1.Pod:
		return p.Spec.NodeName
	case *Pod:
		return p.NodeName
	}
	return ""
}
