package templates

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Template is one decoded, valid version of a workspace template.
//
// The fields below are a contract the spawner, the upgrade controller and the front end rely on;
// add fields, do not rename these.
type Template struct {
	// Name is the ConfigMap's (or YAML file's) name.
	Name string
	// Version is the nogoo9/template-version annotation; a change makes workspaces outdated.
	Version string
	// Description is the nogoo9/description annotation.
	Description string
	// Source says where it came from: "configmap:<namespace>/<name>" or "file:<path>".
	Source string
	// Namespace is the team namespace of a template found outside nogoo9's namespace (a
	// ConfigMap in a watched namespace, or a kept version of one); empty for nogoo9's own
	// templates and --template-dir files. The spawner stamps it on the pod
	// (workspace.AnnTemplateNamespace), so the workspace keeps following this template.
	Namespace string
	// Spec is the pod spec, with ${...} placeholders not yet expanded.
	Spec corev1.PodSpec
	// VolumeClaims are PVC templates; the spawner creates one PVC per claim per workspace.
	VolumeClaims []corev1.PersistentVolumeClaim
	// Annotations are the template object's annotations (expansion helpers, routing options).
	Annotations map[string]string

	// derived keeps what Derived computed from this value; nil for a Template not made by Decode
	// or DeepCopy (computed per call then).
	derived *derived
}

// derived is the slot of the template value owner. A copy made by assignment (c := *t) shares
// it but is not its owner: Derived computes the copy's per call, so a change to the copy never
// meets what was derived from the original.
type derived struct {
	owner *Template
	once  sync.Once
	v     any
}

// newDerived is a fresh slot for t, set before t is handed to anyone (owner is never written
// again, so Derived reads it without a lock).
func newDerived(t *Template) *derived { return &derived{owner: t} }

// Derived returns build(t), computed once per template value made by Decode or DeepCopy and kept
// with it, for a renderer that would otherwise compute the same thing from the template on every
// call (spawner.BuildPod's placeholder program). It relies on what makes Registry.Shared safe: a
// template is not written into once it is read, so what is derived from it stays true (a
// caller that changes its own copy does so before rendering it, or copies it again). A copy by
// assignment, or a Template literal, gets build(t) per call. One slot: build must always be the
// same function. Safe for concurrent use.
func (t *Template) Derived(build func(*Template) any) any {
	if t.derived == nil || t.derived.owner != t {
		return build(t)
	}
	t.derived.once.Do(func() { t.derived.v = build(t) })
	return t.derived.v
}

// Info describes one template as List reports it, valid or not.
type Info struct {
	Name string `json:"name"`
	// Namespace is where the template lives: nogoo9's namespace for its ConfigMaps and the
	// --template-dir files, a watched namespace for a team template.
	Namespace   string `json:"namespace,omitempty"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
	Source      string `json:"source"`
	// Valid is false when the current content of the source does not decode; Error says why.
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
	// ServingVersion is the version Get returns: Version when valid, the last valid version while
	// a broken edit is in place, empty when there never was a valid one.
	ServingVersion string `json:"servingVersion,omitempty"`
}
