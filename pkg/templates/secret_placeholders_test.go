package templates

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestPolicyRefusesCallerChosenCodeBesideASecret: a container that gets a Secret the policy
// allows (envFrom, env valueFrom, a secret or projected-secret volume it mounts) must run what
// the template says. Before, "image": "${context.img}" beside an allowed Secret's envFrom passed
// the default policy: whoever spawned chose the image that ran with the Secret. Now a caller
// placeholder in such a container's image, command, args, exec probes and hooks, or a $(VAR)
// there that the kubelet fills with a caller's value, is refused, naming the container, the field
// and the Secret, and saying what to do; so is one in any init container's image. A container
// without a Secret keeps its placeholders, as do env values (data the program reads).
func TestPolicyRefusesCallerChosenCodeBesideASecret(t *testing.T) {
	p := DefaultPolicy()
	p.Secrets = []string{"git-token"}
	envFrom := []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "git-token"}}}}
	initC := func(name, image string) corev1.Container {
		return corev1.Container{Name: name, Image: image, SecurityContext: InitContainerSecurityContext()}
	}
	secretVolume := corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "git-token"}}}
	projected := corev1.Volume{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "git-token"}}}}}}}
	tests := []struct {
		name   string
		spec   string // data.spec as JSON; restrictedSpec when empty
		mutate func(t *Template)
		// want: one group of substrings per expected violation; empty: allowed.
		want [][]string
	}{
		{name: "the review's template: an init container with the caller's image and an allowed Secret's envFrom",
			spec: `{"automountServiceAccountToken": false,
  "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
  "initContainers": [{"name": "fetch", "image": "${context.img}", "envFrom": [{"secretRef": {"name": "git-token"}}],
    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
  "containers": [{"name": "ide", "image": "ide:1", "ports": [{"containerPort": 8080}],
    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}`,
			want: [][]string{{"data.spec.initContainers[fetch].image", `"${context.img}"`, `Secret "git-token" (envFrom[0])`, "write the image in the template"}}},
		{name: "the workspace container's image beside an env valueFrom secretKeyRef",
			mutate: func(t *Template) {
				ide(t).Image = "ide:${context.tag}"
				ide(t).Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "git-token"}, Key: "t"}}}}
			},
			want: [][]string{{"data.spec.containers[ide].image", `"ide:${context.tag}"`, `"git-token" (env TOKEN)`}}},
		{name: "command and args of a container that mounts a secret volume",
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, secretVolume)
				ide(t).VolumeMounts = append(ide(t).VolumeMounts, corev1.VolumeMount{Name: "creds", MountPath: "/creds"})
				ide(t).Command = []string{"sh", "-c", "git clone ${context.repo}"}
				ide(t).Args = []string{"--user", "${user}"}
			},
			want: [][]string{
				{"data.spec.containers[ide].command[2]", "${context.repo}", `"git-token" (volume creds)`, "environment variable"},
				{"data.spec.containers[ide].args[1]", "${user}"}}},
		{name: "exec probes and lifecycle hooks of a container that mounts a projected Secret",
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, projected)
				ide(t).VolumeMounts = append(ide(t).VolumeMounts, corev1.VolumeMount{Name: "bundle", MountPath: "/b"})
				ide(t).StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-d", "/h/${id}"}}}}
				ide(t).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo ${name}"}}}}
			},
			want: [][]string{
				{"data.spec.containers[ide].startupProbe.exec.command[2]", "${id}", `"git-token" (projected in volume bundle)`},
				{"data.spec.containers[ide].lifecycle.postStart.exec.command[2]", "${name}"}}},
		{name: "a $(VAR) in args the kubelet fills with a caller's value, through another variable too",
			mutate: func(t *Template) {
				ide(t).EnvFrom = envFrom
				ide(t).Env = []corev1.EnvVar{{Name: "REPO", Value: "${context.repo}"}, {Name: "URL", Value: "https://git/$(REPO)"}}
				ide(t).Args = []string{"clone", "$(URL)", "$$(REPO)"}
			},
			want: [][]string{{"data.spec.containers[ide].args[1]", "$(URL)", "${context.repo}", "the kubelet puts that value in here"}}},
		{name: "an init container without a Secret: its image, not its args",
			mutate: func(t *Template) {
				t.Spec.InitContainers = []corev1.Container{initC("seed", "seed:${context.tag}")}
				t.Spec.InitContainers[0].Args = []string{"${context.repo}"}
			},
			want: [][]string{{"data.spec.initContainers[seed].image", `"seed:${context.tag}"`, "prepares them", "write the value in the template"}}},
		{name: "allowed: the template's own placeholders beside a Secret, caller values as env data, and a container without a Secret",
			mutate: func(t *Template) {
				ide(t).Image = "registry/${template}:${version}"
				ide(t).EnvFrom = envFrom
				ide(t).Env = []corev1.EnvVar{{Name: "REPO", Value: "${context.repo}"}}
				ide(t).Command = []string{"sh", "-c", `git clone "$REPO"`}
				t.Spec.InitContainers = []corev1.Container{initC("seed", "seed:${version}")}
				t.Spec.InitContainers[0].Args = []string{"${context.repo}"}
				side := initC("side", "side:${context.tag}")
				side.Args = []string{"${id}"}
				t.Spec.Containers = append(t.Spec.Containers, side)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			if spec == "" {
				spec = restrictedSpec
			}
			tmpl, err := Decode("node", "test", ann(), map[string]string{workspace.DataSpec: spec})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if tc.mutate != nil {
				tc.mutate(tmpl)
			}
			err = p.Check(tmpl)
			wantViolations(t, err, tc.want)
		})
	}
}

// TestDecodeRefusesContextKeysNoSpawnCanGive: a spawn's context keys are letters, digits, '_',
// '-' and '.' (spawner.ValidateContext), so ${context.git/repo} can never be filled. Before, such
// a template loaded and every spawn from it was refused; now Decode refuses it, naming the field,
// the placeholder and the characters a key may have.
func TestDecodeRefusesContextKeysNoSpawnCanGive(t *testing.T) {
	spec := func(image string) string {
		return `{"containers":[{"name":"ide","image":"` + image + `","ports":[{"containerPort":8080}]}]}`
	}
	claims := `[{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"${context.class:fast}","resources":{"requests":{"storage":"1Gi"}}}}]`
	tests := []struct {
		name string
		ann  []string
		data map[string]string
		want []string // substrings of the error; empty: decodes
	}{
		{"a slash in the image's context key", nil, map[string]string{workspace.DataSpec: spec("ide:${context.git/repo}")},
			[]string{"data.spec.containers[0].image", "${context.git/repo}", `"git/repo"`, "letters, digits, '_', '-' and '.'", "${context.git-repo}"}},
		{"a blank in an env value's", nil, map[string]string{workspace.DataSpec: `{"containers":[{"name":"ide","image":"ide","ports":[{"containerPort":8080}],"env":[{"name":"R","value":"${context.my repo}"}]}]}`},
			[]string{"data.spec.containers[0].env[0].value", "${context.my repo}"}},
		{"an empty key", nil, map[string]string{workspace.DataSpec: spec("ide:${context.}")},
			[]string{"data.spec.containers[0].image", "${context.}", `""`}},
		{"a volume claim's", nil, map[string]string{workspace.DataSpec: spec("ide"), workspace.DataVolumeClaims: claims},
			[]string{"data.volumeClaims[data].spec.storageClassName", "${context.class:fast}"}},
		{"an annotation the spawner expands", []string{workspace.AnnInitFrom, "s3://seeds/${context.team/x}/", workspace.AnnInitVolume, "home"},
			map[string]string{workspace.DataSpec: `{"containers":[{"name":"ide","image":"ide","ports":[{"containerPort":8080}]}],"volumes":[{"name":"home","emptyDir":{}}]}`},
			[]string{"annotation " + workspace.AnnInitFrom, "${context.team/x}"}},
		{"keys a spawn can give, an escaped $${, a map key (never expanded), an annotation nogoo9 does not expand", []string{workspace.AnnDescription, "${context.a/b}"},
			map[string]string{workspace.DataSpec: `{"containers":[{"name":"ide","image":"ide:${context.git-repo.v_1}","ports":[{"containerPort":8080}],"args":["$${context.a/b}"]}],"nodeSelector":{"${context.x/y}":"1"}}`},
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("node", "test", ann(tc.ann...), tc.data)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode took it, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Decode error %q does not say %q", err, w)
				}
			}
		})
	}
}
