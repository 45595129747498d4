package localcluster

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type stageDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ResourceRef struct {
			Kind string `json:"kind"`
		} `json:"resourceRef"`
		Selector struct {
			MatchExpressions []struct {
				Key      string   `json:"key"`
				Operator string   `json:"operator"`
				Values   []string `json:"values"`
			} `json:"matchExpressions"`
		} `json:"selector"`
	} `json:"spec"`
}

func parseStages(t *testing.T) map[string]stageDoc {
	t.Helper()
	out := map[string]stageDoc{}
	for _, doc := range bytes.Split(Stages(), []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var s stageDoc
		if err := yaml.Unmarshal(doc, &s); err != nil {
			t.Fatalf("stage document does not parse: %v\n%s", err, doc)
		}
		if s.Kind != "Stage" || s.APIVersion != "kwok.x-k8s.io/v1alpha1" {
			t.Fatalf("document %q is %s %s, want kwok.x-k8s.io/v1alpha1 Stage", s.Metadata.Name, s.APIVersion, s.Kind)
		}
		if _, dup := out[s.Metadata.Name]; dup {
			t.Fatalf("stage %q defined twice", s.Metadata.Name)
		}
		out[s.Metadata.Name] = s
	}
	return out
}

func TestStagesCoverTheLifecycle(t *testing.T) {
	stages := parseStages(t)
	want := map[string]string{
		"nogoo9-node-initialize":      "Node",
		"nogoo9-node-heartbeat":       "Node",
		"nogoo9-pod-ready":            "Pod",
		"nogoo9-pod-image-pull-error": "Pod",
		"nogoo9-pod-complete":         "Pod",
		"nogoo9-pod-delete":           "Pod",
	}
	for name, kind := range want {
		s, ok := stages[name]
		if !ok {
			t.Errorf("stage %s missing", name)
			continue
		}
		if s.Spec.ResourceRef.Kind != kind {
			t.Errorf("stage %s acts on %s, want %s", name, s.Spec.ResourceRef.Kind, kind)
		}
	}
	if len(stages) != len(want) {
		t.Errorf("got %d stages, want %d", len(stages), len(want))
	}
}

// The ready stage and the image-pull-error stage must select disjoint pods: the same image test
// with opposite operators.
func TestReadyAndImagePullErrorStagesAreExclusive(t *testing.T) {
	stages := parseStages(t)
	imageOp := func(stage string) string {
		for _, e := range stages[stage].Spec.Selector.MatchExpressions {
			if strings.Contains(e.Key, `startswith("`+FailingImageRegistry+`")`) {
				if len(e.Values) != 1 || e.Values[0] != "true" {
					t.Errorf("stage %s: image expression values %v, want [true]", stage, e.Values)
				}
				return e.Operator
			}
		}
		return ""
	}
	if got := imageOp("nogoo9-pod-ready"); got != "NotIn" {
		t.Errorf("pod-ready image expression operator = %q, want NotIn", got)
	}
	if got := imageOp("nogoo9-pod-image-pull-error"); got != "In" {
		t.Errorf("pod-image-pull-error image expression operator = %q, want In", got)
	}
}

// kwok takes no defaults from a KwokConfiguration it is given: every parallelism must be set, as
// a zero one stops it at start.
func TestKwokConfigSetsWorkersAndKeepsTheStages(t *testing.T) {
	docs := bytes.SplitN(KwokConfig(7), []byte("\n---\n"), 2)
	if len(docs) != 2 || !bytes.Equal(docs[1], Stages()) {
		t.Fatalf("KwokConfig is not one KwokConfiguration followed by the Stages:\n%s", KwokConfig(7))
	}
	var conf struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Options    map[string]any `json:"options"`
	}
	if err := yaml.UnmarshalStrict(docs[0], &conf); err != nil {
		t.Fatalf("KwokConfiguration does not parse: %v\n%s", err, docs[0])
	}
	if conf.APIVersion != "config.kwok.x-k8s.io/v1alpha1" || conf.Kind != "KwokConfiguration" {
		t.Errorf("first document is %s %s, want config.kwok.x-k8s.io/v1alpha1 KwokConfiguration", conf.APIVersion, conf.Kind)
	}
	if got := conf.Options["podPlayStageParallelism"]; got != float64(7) {
		t.Errorf("podPlayStageParallelism = %v, want 7", got)
	}
	for _, k := range []string{"nodePlayStageParallelism", "nodeLeaseParallelism", "podsOnNodeSyncParallelism"} {
		if v, _ := conf.Options[k].(float64); v < 1 {
			t.Errorf("%s = %v, want at least 1 (kwok exits on 0)", k, conf.Options[k])
		}
	}
}
