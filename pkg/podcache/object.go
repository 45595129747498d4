package podcache

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pod implements metav1.Object over its own fields (client.Object with GetObjectKind and
// DeepCopyObject): store keys, the namespace index, label selectors and controller-runtime's event
// handlers read a cached pod through it. A Pod in the store is read only; the setters are for a
// caller's copy (DeepCopy).

func (p *Pod) GetNamespace() string                { return p.Namespace }
func (p *Pod) SetNamespace(namespace string)       { p.Namespace = namespace }
func (p *Pod) GetName() string                     { return p.Name }
func (p *Pod) SetName(name string)                 { p.Name = name }
func (p *Pod) GetGenerateName() string             { return "" } // not kept (Transform clears it)
func (p *Pod) SetGenerateName(string)              {}
func (p *Pod) GetUID() types.UID                   { return p.UID }
func (p *Pod) SetUID(uid types.UID)                { p.UID = uid }
func (p *Pod) GetResourceVersion() string          { return p.ResourceVersion }
func (p *Pod) SetResourceVersion(version string)   { p.ResourceVersion = version }
func (p *Pod) GetGeneration() int64                { return 0 } // not kept: nothing reads a pod's
func (p *Pod) SetGeneration(int64)                 {}
func (p *Pod) GetSelfLink() string                 { return "" } // not kept (the API server sets none)
func (p *Pod) SetSelfLink(string)                  {}
func (p *Pod) GetCreationTimestamp() metav1.Time   { return p.CreationTimestamp }
func (p *Pod) SetCreationTimestamp(t metav1.Time)  { p.CreationTimestamp = t }
func (p *Pod) GetDeletionTimestamp() *metav1.Time  { return p.DeletionTimestamp }
func (p *Pod) SetDeletionTimestamp(t *metav1.Time) { p.DeletionTimestamp = t }
func (p *Pod) GetDeletionGracePeriodSeconds() *int64 {
	return p.rare().DeletionGracePeriodSeconds
}
func (p *Pod) SetDeletionGracePeriodSeconds(s *int64) { p.ownRare().DeletionGracePeriodSeconds = s }
func (p *Pod) GetFinalizers() []string                { return p.rare().Finalizers }
func (p *Pod) SetFinalizers(f []string)               { p.ownRare().Finalizers = f }
func (p *Pod) GetOwnerReferences() []metav1.OwnerReference {
	return p.rare().OwnerReferences
}
func (p *Pod) SetOwnerReferences(r []metav1.OwnerReference)  { p.ownRare().OwnerReferences = r }
func (p *Pod) GetManagedFields() []metav1.ManagedFieldsEntry { return nil } // not kept
func (p *Pod) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// GetLabels builds the pod's labels as a map, a new one per call (metav1.Object, for generic
// code): read one label with Label, or select with Labels.
func (p *Pod) GetLabels() map[string]string { return p.labelMap(nil) }

// SetLabels replaces the pod's labels (interned as Transform interns them).
func (p *Pod) SetLabels(labels map[string]string) { p.setMeta(labels, p.GetAnnotations()) }

// GetAnnotations builds the pod's annotations as a map, a new one per call (metav1.Object, for
// generic code): read one annotation with Annotation.
func (p *Pod) GetAnnotations() map[string]string { return p.annotationMap(nil) }

// SetAnnotations replaces the pod's annotations (interned as Transform interns them).
func (p *Pod) SetAnnotations(annotations map[string]string) {
	p.setMeta(p.GetLabels(), annotations)
}

// ownRare is p's Rare, made if p has none (for the setters).
func (p *Pod) ownRare() *Rare {
	if p.Rare == nil {
		p.Rare = &Rare{}
	}
	return p.Rare
}
