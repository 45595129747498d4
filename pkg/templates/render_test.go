package templates_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The policy checks a template's spec plus what the spawner adds (the nogoo9-init container of
// nogoo9/init-from, the preStop hook). This renders every sample with the real spawner and holds
// the rendered pod against the Kubernetes Pod Security evaluator, so the two cannot drift apart:
// a pod the policy let through is a pod the API server admits in a restricted namespace.
func TestRenderedSamplesFitRestricted(t *testing.T) {
	loaded, err := templates.LoadDir("../../config/samples")
	if err != nil {
		t.Fatal(err)
	}
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var withInit bool
	for _, l := range loaded {
		if l.Err != nil {
			t.Fatalf("sample %s: %v", l.Name, l.Err)
		}
		if err := templates.DefaultPolicy().Check(l.Template); err != nil {
			t.Fatalf("sample %s: %v", l.Name, err)
		}
		id := spawner.Identity{Owner: "jane", ID: "demo", Context: map[string]string{"repo": "https://example.com/r.git"}}
		pod, _, err := spawner.BuildPod(l.Template, id, workspace.PodName(id.Owner, id.ID))
		if err != nil {
			t.Fatalf("render %s: %v", l.Name, err)
		}
		for _, c := range pod.Spec.InitContainers {
			withInit = withInit || c.Name == spawner.InitContainerName
		}
		res := psapolicy.AggregateCheckResults(eval.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &metav1.ObjectMeta{}, &pod.Spec))
		if !res.Allowed {
			t.Errorf("the pod rendered from sample %s violates Pod Security restricted: %s", l.Name, res.ForbiddenDetail())
		}
		if err := templates.DefaultPolicy().CheckPod(pod); err != nil {
			t.Errorf("the pod rendered from sample %s fails the default policy: %v", l.Name, err)
		}
	}
	if !withInit {
		t.Errorf("no sample uses nogoo9/init-from, so the injected init container went unchecked: keep one that does")
	}
}
