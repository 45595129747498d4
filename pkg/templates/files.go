package templates

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Loaded is one template read from a source, valid (Template set) or not (Err set).
type Loaded struct {
	Name     string
	Source   string
	Template *Template
	Err      error
}

// LoadDir reads every *.yaml, *.yml and *.json file of dir (not recursively). A file holds one or
// more ConfigMap documents of the same shape as a template ConfigMap; Kustomization documents are
// skipped, and so are ConfigMaps with neither the nogoo9/pod-template label nor data.spec (seed
// files next to the templates), so config/samples can be used as it is. A broken document is returned with its error
// and never stops the others.
func LoadDir(dir string) ([]Loaded, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read --template-dir %s: %w", dir, err)
	}
	var out []Loaded
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		out = append(out, loadFile(filepath.Join(dir, e.Name()))...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func loadFile(path string) []Loaded {
	fallback := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	data, err := os.ReadFile(path)
	if err != nil {
		return []Loaded{{Name: fallback, Source: "file:" + path, Err: err}}
	}
	var out []Loaded
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		source := fmt.Sprintf("file:%s#%d", path, doc)
		if doc == 1 {
			source = "file:" + path
		}
		if err != nil {
			out = append(out, Loaded{Name: fallback, Source: source, Err: fmt.Errorf("%s: document %d: %w", path, doc, err)})
			break
		}
		if len(bytes.TrimSpace(raw)) == 0 || isComment(raw) {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		_ = yaml.Unmarshal(raw, &head)
		if head.Kind == "Kustomization" {
			continue
		}
		var cm corev1.ConfigMap
		if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
			out = append(out, Loaded{Name: fallback, Source: source, Err: fmt.Errorf("%s: document %d is not a ConfigMap: %w", path, doc, err)})
			continue
		}
		name := cm.Name
		if name == "" {
			name = fallback
		}
		if cm.Kind != "ConfigMap" {
			out = append(out, Loaded{Name: name, Source: source, Err: fmt.Errorf("%s: document %d has kind %q: a template file holds ConfigMaps", path, doc, cm.Kind)})
			continue
		}
		if cm.Labels[workspace.LabelPodTemplate] != "true" && cm.Data[workspace.DataSpec] == "" {
			continue // a plain ConfigMap next to the templates (e.g. seed files): not a template
		}
		cm.Name = name // a file's template without metadata.name is named after the file
		t, err := FromConfigMap(&cm, source)
		out = append(out, Loaded{Name: name, Source: source, Template: t, Err: err})
	}
	return out
}

func isComment(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}
