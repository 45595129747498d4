package spawner

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Names of what injectInitContainer adds to the pod.
const (
	InitContainerName = "nogoo9-init"
	initSourceVolume  = "nogoo9-init-source"
	initTarget        = "/nogoo9/target"
	initSource        = "/nogoo9/source"
	// InitMarker is the file the init container leaves in the volume; while it exists the volume
	// is never filled again (upgrades keep the user's changes).
	InitMarker = ".nogoo9-initialized"
)

// validateRequiredContext fails, listing every missing key, when ctx lacks a required key.
func validateRequiredContext(t *templates.Template, exp *templates.Expansion, ctx map[string]string) error {
	var missing []string
	for _, k := range exp.RequiredContext {
		if _, ok := ctx[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return fmt.Errorf("template %s requires context %s: pass %s in the spawn's context", t.Name, plural(len(missing), "key", "keys"), strings.Join(missing, ", "))
}

const s3Script = `set -eu
if [ -e "$NOGOO9_INIT_TARGET/` + InitMarker + `" ]; then echo "nogoo9-init: volume already initialised"; exit 0; fi
echo "nogoo9-init: copying $NOGOO9_INIT_SOURCE"
aws s3 sync --only-show-errors "$NOGOO9_INIT_SOURCE" "$NOGOO9_INIT_TARGET"
touch "$NOGOO9_INIT_TARGET/` + InitMarker + `"
`

const configMapScript = `set -eu
if [ -e "$NOGOO9_INIT_TARGET/` + InitMarker + `" ]; then echo "nogoo9-init: volume already initialised"; exit 0; fi
cd "$NOGOO9_INIT_SOURCE"
for f in *; do
  [ -e "$f" ] || continue
  cp -L "$f" "$NOGOO9_INIT_TARGET/$f"
done
touch "$NOGOO9_INIT_TARGET/` + InitMarker + `"
`

// injectInitContainer puts an init container first in spec that fills volume (the pod volume
// name) from an s3:// location or a ConfigMap, once.
func injectInitContainer(spec *corev1.PodSpec, in *templates.Init, volume string) error {
	if in == nil {
		return nil
	}
	for _, c := range spec.InitContainers {
		if c.Name == InitContainerName {
			return fmt.Errorf("annotation %s adds init container %q, which the spec already has: rename it", workspace.AnnInitFrom, InitContainerName)
		}
	}
	c := corev1.Container{
		Name:  InitContainerName,
		Image: in.Image,
		Env: []corev1.EnvVar{
			{Name: "NOGOO9_INIT_SOURCE", Value: in.Location},
			{Name: "NOGOO9_INIT_TARGET", Value: initTarget},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: initTarget}},
		// With the pod's own securityContext, which it inherits, this fits the restricted Pod
		// Security Standard the template policy requires by default.
		SecurityContext: templates.InitContainerSecurityContext(),
	}
	switch in.Kind {
	case "s3":
		c.Command = []string{"/bin/sh", "-c", s3Script}
		// The AWS CLI needs a writable home for its cache when the pod runs as a non-root user.
		c.Env = append(c.Env, corev1.EnvVar{Name: "HOME", Value: "/tmp"})
		if in.Endpoint != "" {
			c.Env = append(c.Env, corev1.EnvVar{Name: "AWS_ENDPOINT_URL", Value: in.Endpoint})
		}
		if in.Secret != "" {
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: in.Secret}}}}
		}
	case "configmap":
		for _, v := range spec.Volumes {
			if v.Name == initSourceVolume {
				return fmt.Errorf("annotation %s adds volume %q, which the spec already has: rename it", workspace.AnnInitFrom, initSourceVolume)
			}
		}
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: initSourceVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: in.Location}},
		}})
		c.Env[0].Value = initSource
		c.Env = append(c.Env, corev1.EnvVar{Name: "NOGOO9_INIT_CONFIGMAP", Value: in.Location})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: initSourceVolume, MountPath: initSource, ReadOnly: true})
		c.Command = []string{"/bin/sh", "-c", configMapScript}
	default:
		return fmt.Errorf("init source kind %q is not known", in.Kind)
	}
	spec.InitContainers = append([]corev1.Container{c}, spec.InitContainers...)
	return nil
}

// injectPreStopHook gives the chosen container a lifecycle.preStop exec hook running the
// template's script, and the pod a termination grace period long enough for it.
func injectPreStopHook(spec *corev1.PodSpec, p *templates.PreStop) error {
	if p == nil {
		return nil
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != p.Container {
			continue
		}
		if c.Lifecycle == nil {
			c.Lifecycle = &corev1.Lifecycle{}
		}
		if c.Lifecycle.PreStop != nil {
			return fmt.Errorf("container %q already has a lifecycle.preStop hook and annotation %s adds another: keep one", c.Name, workspace.AnnPreStop)
		}
		c.Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", p.Script}}}
		grace := p.GracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &grace
		return nil
	}
	return fmt.Errorf("annotation %s names container %q, which the spec does not have", workspace.AnnPreStopContainer, p.Container)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
