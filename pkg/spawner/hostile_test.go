package spawner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// hostileValues are context values that would mean something to JSON, to the placeholder
// expansion or to a shell.
var hostileValues = []string{
	`"quoted"`, `'single'`, `{"a":1}`, `}{`, "line1\nline2", "${id}", "$${id}", "${context.x}",
	"$(touch /tmp/pwned)", "`id`", "a; rm -rf ~", "x && y", "a|b", "<script>", `\`, "\x00", "ü\u202e",
	`","image":"evil"`, `"}],"hostNetwork":true,"x":[{"a":"`,
}

// TestContextValuesStayLiteralInTheirField: a context value reaches the container byte for byte
// through the field whose placeholder names it (an env value: after the kubelet's $(VAR)
// expansion, kubeletExpand), is never expanded again, and cannot add or change another field.
func TestContextValuesStayLiteralInTheirField(t *testing.T) {
	for _, val := range hostileValues {
		t.Run(val, func(t *testing.T) {
			pod, _, err := BuildPod(mustTemplate(t, nil, nodeSpec, homeClaim), Identity{Owner: "jane", ID: "demo", Context: map[string]string{"repo": val}}, "p")
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers
			if len(c) != 1 || c[0].Image != "node:22" || pod.Spec.HostNetwork {
				t.Fatalf("the value changed the spec: %+v", pod.Spec)
			}
			got := map[string]string{}
			for _, e := range c[0].Env {
				got[e.Name] = kubeletExpand(e.Value, nil)
			}
			if got["REPO"] != val || got["OWNER"] != "jane" || got["SHELL_VAR"] != "${HOME}" || len(got) != 4 {
				t.Fatalf("env = %q, want REPO=%q and the others unchanged", got, val)
			}
		})
	}
}

const homeClaim = `[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]`

// shellSafeValues values may be placed in a shell script as they are.
var shellSafeValues = []string{"demo", "jane", "v1.2", "s3://bucket/a-b_c", "user@example.com", "a=b,c+d:e"}

// TestInjectedShellNeverRunsAContextValue: the preStop script nogoo9 injects runs with /bin/sh -c,
// so a placeholder there may only be replaced by a value no shell reads as code; any other value is
// refused with an error naming the annotation. The init container's script is a constant that reads
// its location from an environment variable, so a hostile location stays data; and a caller never
// chooses the init container's image.
func TestInjectedShellNeverRunsAContextValue(t *testing.T) {
	spec := `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"home","mountPath":"/h"}]}]}`
	claims := `[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]`
	preStop := func(t *testing.T, script, val string) (*corev1.Pod, error) {
		pod, _, err := BuildPod(mustTemplate(t, map[string]string{workspace.AnnPreStop: script}, spec, claims), Identity{Owner: "jane", ID: "demo", Context: map[string]string{"msg": val}}, "p")
		return pod, err
	}
	for _, val := range hostileValues {
		t.Run("preStop refuses "+val, func(t *testing.T) {
			_, err := preStop(t, "echo ${context.msg} > /tmp/last", val)
			if err == nil || !strings.Contains(err.Error(), workspace.AnnPreStop) {
				t.Fatalf("context value %q in the preStop script: err = %v, want a refusal naming %s", val, err, workspace.AnnPreStop)
			}
		})
	}
	for _, val := range shellSafeValues {
		t.Run("preStop takes "+val, func(t *testing.T) {
			pod, err := preStop(t, "echo ${context.msg} $${HOME} ${id}", val)
			if err != nil {
				t.Fatal(err)
			}
			cmd := pod.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
			if want := "echo " + val + " ${HOME} demo"; len(cmd) != 3 || cmd[2] != want {
				t.Fatalf("preStop = %q, want sh -c %q", cmd, want)
			}
		})
	}
	t.Run("an owner a shell would read is refused in the preStop script", func(t *testing.T) {
		_, _, err := BuildPod(mustTemplate(t, map[string]string{workspace.AnnPreStop: "echo ${owner}"}, spec, claims), Identity{Owner: "auth0|$(id)", ID: "demo"}, "p")
		if err == nil || !strings.Contains(err.Error(), workspace.AnnPreStop) {
			t.Fatalf("err = %v", err)
		}
	})
	for _, val := range hostileValues {
		t.Run("init location stays data "+val, func(t *testing.T) {
			pod, _, err := BuildPod(mustTemplate(t, map[string]string{workspace.AnnInitFrom: "s3://seeds/${context.msg}/"}, spec, claims), Identity{Owner: "jane", ID: "demo", Context: map[string]string{"msg": val}}, "p")
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.InitContainers[0]
			if c.Command[2] != s3Script || c.Image != "amazon/aws-cli:2.17.0" {
				t.Fatalf("init container changed: %q %q", c.Image, c.Command)
			}
			if c.Env[0].Name != "NOGOO9_INIT_SOURCE" || kubeletExpand(c.Env[0].Value, nil) != "s3://seeds/"+val+"/" {
				t.Fatalf("init source = %q", c.Env[0].Value)
			}
		})
	}
	t.Run("a caller never chooses the init image", func(t *testing.T) {
		_, _, err := BuildPod(mustTemplate(t, map[string]string{workspace.AnnInitFrom: "s3://seeds/x/", workspace.AnnInitImage: "${context.msg}"}, spec, claims), Identity{Owner: "jane", ID: "demo", Context: map[string]string{"msg": "evil.example/steal:latest"}}, "p")
		if err == nil || !strings.Contains(err.Error(), workspace.AnnInitImage) {
			t.Fatalf("err = %v, want a refusal naming %s", err, workspace.AnnInitImage)
		}
	})
}

// FuzzBuildPodContext: any context value reaches the container literally through its env field
// (after the kubelet's expansion), and the injected preStop script either holds it as a
// shell-safe word or the spawn is refused.
func FuzzBuildPodContext(f *testing.F) {
	for _, v := range append(append([]string{}, hostileValues...), shellSafeValues...) {
		f.Add(v, "echo ${context.repo}")
	}
	f.Add("x", "echo $${context.repo} ${id")
	f.Add("x", "${context.repo}${context.repo}$$${id}")
	f.Fuzz(func(t *testing.T, val, script string) {
		tmpl, err := templatesDecodeForFuzz(script)
		if err != nil {
			return
		}
		pod, _, err := BuildPod(tmpl, Identity{Owner: "jane", ID: "demo", Context: map[string]string{"repo": val}}, "p")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		for _, e := range pod.Spec.Containers[0].Env {
			if e.Name == "REPO" && kubeletExpand(e.Value, nil) != val {
				t.Fatalf("REPO = %q (the kubelet reads %q), want %q", e.Value, kubeletExpand(e.Value, nil), val)
			}
		}
		if strings.Contains(script, "${context.repo}") && !strings.Contains(script, "$${context.repo}") && !shellSafe(val) {
			t.Fatalf("script %q took the shell-unsafe value %q: %q", script, val, pod.Spec.Containers[0].Lifecycle.PreStop.Exec.Command)
		}
	})
}

func templatesDecodeForFuzz(script string) (*templates.Template, error) {
	a := map[string]string{workspace.AnnTemplateVersion: "1"}
	if script != "" {
		a[workspace.AnnPreStop] = script
	}
	return templates.Decode("node", "fuzz", a, map[string]string{"spec": nodeSpec, "volumeClaims": homeClaim})
}
