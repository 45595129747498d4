package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"k8s.io/apimachinery/pkg/util/validation"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// DefaultHistoryLimit is how many versions of a template are kept (--template-history-limit).
const DefaultHistoryLimit = 10

// HistoryName is the name of the ConfigMap that keeps version of template name: deterministic, so
// recording the same version twice is an AlreadyExists, and a ConfigMap whose name does not match
// its own label and version is not one nogoo9 made.
func HistoryName(name, version string) string {
	sum := sha256.Sum256([]byte(version))
	return "nogoo9-history-" + name + "-" + hex.EncodeToString(sum[:5])
}

// HistoryConfigMap is the ConfigMap in namespace that keeps t: the template's annotations and
// data, labelled nogoo9/template-history=<name> (and not nogoo9/pod-template: it is no template).
func HistoryConfigMap(namespace string, t *Template) (*corev1.ConfigMap, error) {
	spec, err := json.Marshal(t.Spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec of template %s version %s: %w", t.Name, t.Version, err)
	}
	cm := &corev1.ConfigMap{Data: map[string]string{workspace.DataSpec: string(spec)}}
	if len(t.VolumeClaims) > 0 {
		claims, err := json.Marshal(t.VolumeClaims)
		if err != nil {
			return nil, fmt.Errorf("encode volume claims of template %s version %s: %w", t.Name, t.Version, err)
		}
		cm.Data[workspace.DataVolumeClaims] = string(claims)
	}
	cm.Name, cm.Namespace = HistoryName(t.Name, t.Version), namespace
	cm.Labels = map[string]string{workspace.LabelTemplateHistory: t.Name}
	cm.Annotations = copyMap(t.Annotations)
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[workspace.AnnTemplateVersion] = t.Version
	return cm, nil
}

// FromHistory decodes a history ConfigMap into the version it keeps and holds it to policy, the
// same template policy every current version meets: a kept version is input like a template
// (anyone who may write ConfigMaps could have written it), never trusted because of its label.
// A ConfigMap whose name is not HistoryName of its label and version is refused.
func FromHistory(cm *corev1.ConfigMap, policy Policy) (*Template, error) {
	name := cm.Labels[workspace.LabelTemplateHistory]
	version := cm.Annotations[workspace.AnnTemplateVersion]
	if name == "" || version == "" || cm.Name != HistoryName(name, version) {
		return nil, &HistoryError{fmt.Errorf("ConfigMap %s is not a template history entry nogoo9 wrote (its name does not match its %s label and version): delete it", cm.Name, workspace.LabelTemplateHistory)}
	}
	t, err := Decode(name, "history:"+cm.Namespace+"/"+cm.Name, cm.Annotations, cm.Data)
	if err != nil {
		return nil, &HistoryError{fmt.Errorf("kept version %s of template %s does not decode: %w", version, name, err)}
	}
	if err := policy.Check(t); err != nil {
		return nil, &HistoryError{fmt.Errorf("kept version %s of template %s violates the template policy: %w", version, name, err)}
	}
	return t, nil
}

// HistoryError is FromHistory's refusal of a kept version: permanent, nothing is built from it.
type HistoryError struct{ Err error }

func (e *HistoryError) Error() string { return e.Err.Error() }
func (e *HistoryError) Unwrap() error { return e.Err }

// VersionInfo describes one kept version of a template, as list_templates shows it.
type VersionInfo struct {
	Version     string    `json:"version"`
	Description string    `json:"description,omitempty"`
	RecordedAt  time.Time `json:"recordedAt"`
	// Valid is false when the kept version no longer decodes or violates the template policy
	// (e.g. the policy was tightened since); Error says why. Nothing rolls back to it.
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
}

// newestFirst sorts history ConfigMaps newest first (creation time, then name).
func newestFirst(cms []corev1.ConfigMap) {
	sort.SliceStable(cms, func(i, j int) bool {
		a, b := cms[i].CreationTimestamp, cms[j].CreationTimestamp
		if !a.Equal(&b) {
			return b.Before(&a)
		}
		return cms[i].Name > cms[j].Name
	})
}

// Prune returns the history ConfigMaps of template name to delete so that at most keep versions
// stay: the newest, and always the one of version current (the version served now), whatever its
// age. Only ConfigMaps nogoo9 made count and go (named HistoryName of their version, as
// FromHistory requires to serve one): anyone who may create ConfigMaps could label junk as
// history, which used to take the kept places and push the genuine versions, the rollback
// targets, out.
func Prune(cms []corev1.ConfigMap, name string, keep int, current string) []*corev1.ConfigMap {
	sorted := append([]corev1.ConfigMap(nil), cms...)
	newestFirst(sorted)
	var out []*corev1.ConfigMap
	kept := 0
	for i := range sorted {
		cm := &sorted[i]
		v := cm.Annotations[workspace.AnnTemplateVersion]
		if cm.Name != HistoryName(name, v) || v == current {
			continue // not nogoo9's, or the version served now
		}
		// The current version takes one of the keep places.
		if kept < keep-1 {
			kept++
			continue
		}
		out = append(out, cm)
	}
	return out
}

// History reads the kept versions of templates straight from the API server (they are read
// rarely: a rollback, list_templates), labelled nogoo9/template-history. The versions of a
// template live beside it: in Namespace (nogoo9's) for its templates, in the team namespace for a
// team template. Templates are named by registry key (Registry.Get).
type History struct {
	Reader    client.Reader
	Namespace string
	Policy    Policy
	// NoTeamTemplates is --namespace-templates=false: a team template's kept versions are not
	// offered either (Version answers ErrVersionNotKept), as its current version is not.
	NoTeamTemplates bool
}

// where is the namespace that keeps the versions of the template at key, its name, and its team
// namespace ("" for nogoo9's).
func (h *History) where(key string) (in, name, team string) {
	team, name = keyNamespace(key, h.Namespace)
	if in = team; in == "" {
		in = h.Namespace
	}
	return in, name, team
}

func (h *History) list(ctx context.Context, key string) ([]corev1.ConfigMap, error) {
	in, name, _ := h.where(key)
	var list corev1.ConfigMapList
	if err := h.Reader.List(ctx, &list, client.InNamespace(in), client.MatchingLabels{workspace.LabelTemplateHistory: name}); err != nil {
		return nil, fmt.Errorf("list kept versions of template %s: %w", key, err)
	}
	newestFirst(list.Items)
	return list.Items, nil
}

// Versions lists the kept versions of the template at key, newest first.
func (h *History) Versions(ctx context.Context, key string) ([]VersionInfo, error) {
	cms, err := h.list(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([]VersionInfo, 0, len(cms))
	for i := range cms {
		out = append(out, h.info(&cms[i]))
	}
	return out, nil
}

// AllVersions lists the kept versions of every template of namespace ns ("" for nogoo9's) with
// one request, newest first per template name (list_templates).
func (h *History) AllVersions(ctx context.Context, ns string) (map[string][]VersionInfo, error) {
	if ns == "" {
		ns = h.Namespace
	}
	var list corev1.ConfigMapList
	if err := h.Reader.List(ctx, &list, client.InNamespace(ns), client.HasLabels{workspace.LabelTemplateHistory}); err != nil {
		return nil, fmt.Errorf("list kept template versions: %w", err)
	}
	newestFirst(list.Items)
	out := map[string][]VersionInfo{}
	for i := range list.Items {
		cm := &list.Items[i]
		name := cm.Labels[workspace.LabelTemplateHistory]
		out[name] = append(out[name], h.info(cm))
	}
	return out, nil
}

func (h *History) info(cm *corev1.ConfigMap) VersionInfo {
	v := VersionInfo{Version: cm.Annotations[workspace.AnnTemplateVersion], Description: cm.Annotations[workspace.AnnDescription], RecordedAt: cm.CreationTimestamp.UTC()}
	if _, err := FromHistory(cm, h.Policy); err != nil {
		v.Error = err.Error()
	} else {
		v.Valid = true
	}
	return v
}

// ErrVersionNotKept is returned by Version for a version that is not (or no longer) kept.
type ErrVersionNotKept struct{ Name, Version string }

func (e *ErrVersionNotKept) Error() string {
	return fmt.Sprintf("version %s of template %s is not kept: list_templates shows the kept versions", workspace.Quote(e.Version), e.Name)
}

// Version returns kept version of the template at key, decoded and checked (FromHistory). A kept
// version of a team template is that team's (Template.Namespace), so a pod built from it keeps
// following the team template.
func (h *History) Version(ctx context.Context, key, version string) (*Template, error) {
	in, name, team := h.where(key)
	// A team template's versions while team templates are off, or a key that names no ConfigMap
	// (the key of a pod stamped for another namespace, workspace.TemplateKey), are not kept.
	if team != "" && h.NoTeamTemplates || len(validation.IsDNS1123Subdomain(HistoryName(name, version))) > 0 {
		return nil, &ErrVersionNotKept{Name: key, Version: version}
	}
	var cm corev1.ConfigMap
	err := h.Reader.Get(ctx, client.ObjectKey{Namespace: in, Name: HistoryName(name, version)}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("read kept version %s of template %s: %w", workspace.Quote(version), key, err)
	}
	if err != nil || cm.Labels[workspace.LabelTemplateHistory] != name || cm.Annotations[workspace.AnnTemplateVersion] != version {
		return nil, &ErrVersionNotKept{Name: key, Version: version}
	}
	t, err := FromHistory(&cm, h.Policy)
	if err != nil {
		return nil, err
	}
	t.Namespace = team
	return t, nil
}
