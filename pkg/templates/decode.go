package templates

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// FromConfigMap decodes a template ConfigMap strictly. source is recorded in the result (e.g.
// "configmap:default/node"). The error names the key, field and position that is wrong.
func FromConfigMap(cm *corev1.ConfigMap, source string) (*Template, error) {
	return Decode(cm.Name, source, cm.Annotations, cm.Data)
}

// ValidateName refuses a name no template can have: a template's name is a DNS-1123 label (its
// ConfigMap's name, or its file's). A caller's template name must pass it before a registry
// lookup: a key with a namespace ("team-b/node") would otherwise address another namespace's
// template.
func ValidateName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("template name %s is not valid (%s)", workspace.Quote(name), strings.Join(errs, "; "))
	}
	return nil
}

// Decode builds a Template from a template's name, annotations and data keys. It fails on an
// invalid name, a missing version, a data key it does not know, bad JSON (with line and column),
// an unknown field (with its path), a spec without containers, and annotations the expansion
// helpers cannot use.
func Decode(name, source string, annotations, data map[string]string) (*Template, error) {
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("%w: use a DNS-1123 label such as \"node\"", err)
	}
	t := &Template{
		Name:        name,
		Source:      source,
		Version:     strings.TrimSpace(annotations[workspace.AnnTemplateVersion]),
		Description: annotations[workspace.AnnDescription],
		Annotations: copyMap(annotations),
	}
	t.derived = newDerived(t)
	if t.Version == "" {
		return nil, fmt.Errorf("annotation %s is missing or empty: set it (e.g. \"1\") and raise it on every change", workspace.AnnTemplateVersion)
	}
	for k := range data {
		if k != workspace.DataSpec && k != workspace.DataVolumeClaims {
			return nil, fmt.Errorf("data key %q is not known: a template has only data.%s (a PodSpec as JSON) and data.%s (a JSON list of PersistentVolumeClaims)", k, workspace.DataSpec, workspace.DataVolumeClaims)
		}
	}
	raw, ok := data[workspace.DataSpec]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("data.%s is missing: put the workspace PodSpec there as JSON, e.g. {\"containers\":[{\"name\":\"ide\",\"image\":\"...\"}]}", workspace.DataSpec)
	}
	if err := decodeStrict("data."+workspace.DataSpec, raw, &t.Spec); err != nil {
		return nil, err
	}
	if rawClaims, ok := data[workspace.DataVolumeClaims]; ok && strings.TrimSpace(rawClaims) != "" {
		if err := decodeStrict("data."+workspace.DataVolumeClaims, rawClaims, &t.VolumeClaims); err != nil {
			return nil, err
		}
	}
	if err := validate(t); err != nil {
		return nil, err
	}
	return t, nil
}

// decodeStrict unmarshals JSON into v, refusing unknown and duplicate fields, and turns every
// failure into a message with the key, the field path and the line and column.
func decodeStrict(key, raw string, v any) error {
	data := []byte(raw)
	strict, err := sigsjson.UnmarshalStrict(data, v)
	if err != nil {
		if ok, off := sigsjson.SyntaxErrorOffset(err); ok {
			line, col := position(data, off)
			return fmt.Errorf("%s: invalid JSON at line %d, column %d (offset %d): %v", key, line, col, off, err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			line, col := position(data, te.Offset)
			return fmt.Errorf("%s: field %q at line %d, column %d (offset %d): a JSON %s cannot be a %s", key, te.Field, line, col, te.Offset, te.Value, te.Type)
		}
		return fmt.Errorf("%s: %v", key, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("%s: %s: fix the spelling or remove the field (see kubectl explain pod.spec)", key, strings.Join(msgs, "; "))
	}
	return nil
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	if col < 1 {
		col = 1
	}
	return line, col
}

// validate checks what the API server would only refuse at spawn time, so a broken template is
// reported when it is written, not when a user spawns it.
func validate(t *Template) error {
	spec := "data." + workspace.DataSpec
	if len(t.Spec.Containers) == 0 {
		return fmt.Errorf("%s: no containers: a template needs at least one entry in \"containers\" with a name and an image", spec)
	}
	names := map[string]bool{}
	all := append(append([]corev1.Container{}, t.Spec.InitContainers...), t.Spec.Containers...)
	for i, c := range all {
		if c.Name == "" {
			return fmt.Errorf("%s: container #%d has no name: give every container and init container a name", spec, i+1)
		}
		if names[c.Name] {
			return fmt.Errorf("%s: container name %q is used twice: container names must be unique", spec, c.Name)
		}
		names[c.Name] = true
		if c.Image == "" {
			return fmt.Errorf("%s: container %q has no image: set \"image\"", spec, c.Name)
		}
	}
	volumes := map[string]bool{}
	for _, v := range t.Spec.Volumes {
		volumes[v.Name] = true
	}
	claims := map[string]bool{}
	for i, pvc := range t.VolumeClaims {
		key := "data." + workspace.DataVolumeClaims
		if pvc.Name == "" {
			return fmt.Errorf("%s: claim #%d has no metadata.name: give every claim a name (a DNS-1123 label such as home), which containers mount it by", key, i+1)
		}
		if errs := validation.IsDNS1123Label(pvc.Name); len(errs) > 0 {
			return fmt.Errorf("%s: claim name %q is not valid: %s", key, pvc.Name, strings.Join(errs, "; "))
		}
		if claims[pvc.Name] {
			return fmt.Errorf("%s: claim name %q is used twice: give each claim a name of its own", key, pvc.Name)
		}
		claims[pvc.Name] = true
		if len(pvc.Spec.AccessModes) == 0 {
			return fmt.Errorf("%s: claim %q has no spec.accessModes: set e.g. [\"ReadWriteOnce\"]", key, pvc.Name)
		}
		if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			return fmt.Errorf("%s: claim %q has no spec.resources.requests.storage: set a size such as \"1Gi\"", key, pvc.Name)
		}
	}
	for _, c := range all {
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] && !claims[m.Name] {
				return fmt.Errorf("%s: container %q mounts volume %q, which is neither in spec.volumes nor in %s: add it, or fix the mount (volumes: %s; claims: %s)",
					spec, c.Name, m.Name, "data."+workspace.DataVolumeClaims, nameList(slices.Sorted(maps.Keys(volumes))), nameList(slices.Sorted(maps.Keys(claims))))
			}
		}
	}
	if _, err := t.Expansion(); err != nil {
		return err
	}
	return checkContextPlaceholders(t)
}

// contextPlaceholderPrefix begins a ${context.KEY} placeholder.
const contextPlaceholderPrefix = "${context."

// expandedAnnotations are the annotations the spawner expands placeholders in.
var expandedAnnotations = []string{workspace.AnnInitFrom, workspace.AnnInitImage, workspace.AnnInitS3Endpoint, workspace.AnnInitSecret, workspace.AnnPreStop}

// checkContextPlaceholders refuses a ${context.KEY} placeholder whose KEY no spawn can give: a
// spawn's context keys are letters, digits, '_', '-' and '.' (spawner.ValidateContext), so a
// template asking for ${context.git/repo} would load and refuse every spawn. It reads every
// string the spawner expands: the spec's and the volume claims' values (map keys are never
// expanded) and the annotations of expandedAnnotations.
func checkContextPlaceholders(t *Template) error {
	check := func(field, s string) error {
		for _, name := range placeholderNames(s) {
			key, ok := strings.CutPrefix(name, "context.")
			if !ok || validContextKey(key) {
				continue
			}
			return fmt.Errorf("%s: placeholder ${%s} names context key %s, which no spawn can give: a context key has only letters, digits, '_', '-' and '.'; rename it, e.g. ${context.%s} (and in %s if it lists it)",
				field, name, workspace.Quote(key), contextKeyLike(key), workspace.AnnRequiredContext)
		}
		return nil
	}
	for _, k := range expandedAnnotations {
		if err := check("annotation "+k, t.Annotations[k]); err != nil {
			return err
		}
	}
	type node struct {
		at   string
		node any
	}
	nodes := []node{{"data." + workspace.DataSpec, &t.Spec}}
	for i := range t.VolumeClaims {
		c := &t.VolumeClaims[i]
		nodes = append(nodes, node{fmt.Sprintf("data.%s[%s].spec", workspace.DataVolumeClaims, c.Name), &c.Spec})
	}
	for _, n := range nodes {
		raw, err := json.Marshal(n.node)
		if err != nil || !bytes.Contains(raw, []byte(contextPlaceholderPrefix)) {
			continue
		}
		var tree any
		if err := json.Unmarshal(raw, &tree); err != nil {
			continue
		}
		if err := walkStrings(n.at, tree, check); err != nil {
			return err
		}
	}
	return nil
}

// walkStrings calls fn with every string value of the JSON tree n and its field path below at,
// in a stable order, and stops at its first error.
func walkStrings(at string, n any, fn func(field, s string) error) error {
	switch n := n.(type) {
	case string:
		return fn(at, n)
	case []any:
		for i, e := range n {
			if err := walkStrings(fmt.Sprintf("%s[%d]", at, i), e, fn); err != nil {
				return err
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := walkStrings(at+"."+k, n[k], fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeholderNames are the names of the placeholders in s, read as the spawner expands them
// ("$${" is a literal "${"; an unclosed one is the spawn's error).
func placeholderNames(s string) []string {
	var names []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return names
		}
		if i > 0 && s[i-1] == '$' {
			s = s[i+2:]
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return names
		}
		names = append(names, s[i+2:i+2+end])
		s = s[i+2+end+1:]
	}
}

// contextKeyLike is key with every character a context key cannot have replaced by '-'.
func contextKeyLike(key string) string {
	out := []rune(key)
	for i, r := range out {
		if !validContextKey(string(r)) {
			out[i] = '-'
		}
	}
	if len(out) == 0 {
		return "key"
	}
	return string(out)
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// nameList is names as a template author writes a YAML list: [a, b], or [] for none.
func nameList(names []string) string {
	return "[" + strings.Join(names, ", ") + "]"
}
