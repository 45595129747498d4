package templates

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Default images of the init container; a template overrides them with nogoo9/init-image.
const (
	DefaultS3InitImage        = "amazon/aws-cli:2.17.0"
	DefaultConfigMapInitImage = "busybox:1.36"
	// DefaultTerminationGrace is the terminationGracePeriodSeconds given to a pod with a preStop
	// hook when neither the spec nor nogoo9/termination-grace-period says otherwise.
	DefaultTerminationGrace int64 = 60
)

// Expansion is what a template's annotations ask the spawner to do, parsed and checked.
type Expansion struct {
	// RequiredContext are the context keys a spawn must provide, sorted.
	RequiredContext []string
	// WorkspacePort and PreviewPort are the ports the proxy routes to.
	WorkspacePort int32
	PreviewPort   int32
	// StripPrefix and PublicPreview are copied to the pod when set on the template.
	StripPrefix   *string
	PublicPreview *string
	// Init is nil when the template has no nogoo9/init-from.
	Init *Init
	// PreStop is nil when the template has no nogoo9/pre-stop.
	PreStop *PreStop
}

// Init describes the init container that fills a volume before the workspace starts.
type Init struct {
	// Kind is "s3" or "configmap".
	Kind string
	// Location is the s3:// URL or the ConfigMap name.
	Location string
	// Volume is the name of the volume (or volume claim) to fill.
	Volume   string
	Image    string
	Secret   string
	Endpoint string
}

// PreStop describes the lifecycle.preStop hook.
type PreStop struct {
	Script             string
	Container          string
	GracePeriodSeconds int64
}

// Expansion parses and checks the template's annotations against its spec. Decode calls it, so a
// template in the registry always parses; BuildPod calls it again on whatever template it gets.
func (t *Template) Expansion() (*Expansion, error) {
	a := t.Annotations
	e := &Expansion{}
	if v := a[workspace.AnnRequiredContext]; v != "" {
		seen := map[string]bool{}
		for _, k := range strings.Split(v, ",") {
			k = strings.TrimSpace(k)
			if k == "" || seen[k] {
				continue
			}
			if !validContextKey(k) {
				return nil, fmt.Errorf("annotation %s: key %q is not valid: use letters, digits, '_', '-' and '.'", workspace.AnnRequiredContext, k)
			}
			seen[k] = true
			e.RequiredContext = append(e.RequiredContext, k)
		}
		sort.Strings(e.RequiredContext)
	}

	var first int32
	if len(t.Spec.Containers) > 0 && len(t.Spec.Containers[0].Ports) > 0 {
		first = t.Spec.Containers[0].Ports[0].ContainerPort
	}
	var err error
	if e.WorkspacePort, err = portAnnotation(a, workspace.AnnWorkspacePort, first); err != nil {
		return nil, err
	}
	if e.WorkspacePort == 0 {
		return nil, fmt.Errorf("template has no workspace port: declare a containerPort on the first container or set annotation %s", workspace.AnnWorkspacePort)
	}
	if e.PreviewPort, err = portAnnotation(a, workspace.AnnPreviewPort, e.WorkspacePort); err != nil {
		return nil, err
	}
	for _, k := range []struct {
		key string
		dst **string
	}{{workspace.AnnStripPrefix, &e.StripPrefix}, {workspace.AnnPublicPreview, &e.PublicPreview}} {
		if v, ok := a[k.key]; ok {
			if v != "true" && v != "false" {
				return nil, fmt.Errorf("annotation %s is %q: use \"true\" or \"false\"", k.key, v)
			}
			v := v
			*k.dst = &v
		}
	}

	if e.Init, err = t.parseInit(); err != nil {
		return nil, err
	}
	if e.PreStop, err = t.parsePreStop(); err != nil {
		return nil, err
	}
	return e, nil
}

func portAnnotation(a map[string]string, key string, def int32) (int32, error) {
	v, ok := a[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("annotation %s is %q: use a port number between 1 and 65535", key, v)
	}
	return int32(n), nil
}

func (t *Template) parseInit() (*Init, error) {
	a := t.Annotations
	from := strings.TrimSpace(a[workspace.AnnInitFrom])
	if from == "" {
		for _, k := range []string{workspace.AnnInitVolume, workspace.AnnInitImage, workspace.AnnInitSecret, workspace.AnnInitS3Endpoint} {
			if _, ok := a[k]; ok {
				return nil, fmt.Errorf("annotation %s is set but %s is not: set the source or remove it", k, workspace.AnnInitFrom)
			}
		}
		return nil, nil
	}
	in := &Init{Volume: a[workspace.AnnInitVolume], Image: a[workspace.AnnInitImage], Secret: a[workspace.AnnInitSecret], Endpoint: a[workspace.AnnInitS3Endpoint]}
	switch {
	case strings.HasPrefix(from, "s3://"):
		in.Kind, in.Location = "s3", from
		if bucket, _, _ := strings.Cut(strings.TrimPrefix(from, "s3://"), "/"); bucket == "" {
			return nil, fmt.Errorf("annotation %s is %q: name a bucket, as in s3://bucket/prefix", workspace.AnnInitFrom, from)
		}
		if in.Image == "" {
			in.Image = DefaultS3InitImage
		}
	case strings.HasPrefix(from, "configmap:"):
		in.Kind, in.Location = "configmap", strings.TrimPrefix(from, "configmap:")
		if errs := validation.IsDNS1123Subdomain(in.Location); len(errs) > 0 {
			return nil, fmt.Errorf("annotation %s is %q: the ConfigMap name is not valid: %s", workspace.AnnInitFrom, from, strings.Join(errs, "; "))
		}
		var s3Only []string
		if in.Secret != "" {
			s3Only = append(s3Only, workspace.AnnInitSecret)
		}
		if in.Endpoint != "" {
			s3Only = append(s3Only, workspace.AnnInitS3Endpoint)
		}
		if len(s3Only) > 0 {
			return nil, fmt.Errorf("annotation %s applies to s3:// sources only, and %s is %q, a ConfigMap: remove it, or fill the volume from s3://bucket/prefix",
				strings.Join(s3Only, " and "), workspace.AnnInitFrom, from)
		}
		if in.Image == "" {
			in.Image = DefaultConfigMapInitImage
		}
	default:
		return nil, fmt.Errorf("annotation %s is %q: use s3://bucket/prefix or configmap:<name>", workspace.AnnInitFrom, from)
	}
	if in.Secret != "" {
		if errs := validation.IsDNS1123Subdomain(in.Secret); len(errs) > 0 {
			return nil, fmt.Errorf("annotation %s is %q: not a valid Secret name: %s", workspace.AnnInitSecret, in.Secret, strings.Join(errs, "; "))
		}
	}
	if in.Volume == "" {
		if len(t.VolumeClaims) == 0 {
			return nil, fmt.Errorf("annotation %s needs a volume to fill: declare a volume claim or set %s to one of the spec's volumes", workspace.AnnInitFrom, workspace.AnnInitVolume)
		}
		in.Volume = t.VolumeClaims[0].Name
	}
	var names []string
	for _, v := range t.Spec.Volumes {
		names = append(names, v.Name)
	}
	for _, c := range t.VolumeClaims {
		names = append(names, c.Name)
	}
	if !slices.Contains(names, in.Volume) {
		return nil, fmt.Errorf("annotation %s is %q, which is neither a volume of the spec nor a volume claim: use one of %s", workspace.AnnInitVolume, in.Volume, nameList(names))
	}
	return in, nil
}

func (t *Template) parsePreStop() (*PreStop, error) {
	a := t.Annotations
	script := a[workspace.AnnPreStop]
	if strings.TrimSpace(script) == "" {
		for _, k := range []string{workspace.AnnPreStopContainer, workspace.AnnTerminationGrace} {
			if _, ok := a[k]; ok {
				return nil, fmt.Errorf("annotation %s is set but %s is not: set the script or remove it", k, workspace.AnnPreStop)
			}
		}
		return nil, nil
	}
	p := &PreStop{Script: script, Container: a[workspace.AnnPreStopContainer], GracePeriodSeconds: DefaultTerminationGrace}
	if t.Spec.TerminationGracePeriodSeconds != nil {
		p.GracePeriodSeconds = *t.Spec.TerminationGracePeriodSeconds
	}
	if v, ok := a[workspace.AnnTerminationGrace]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 || n > 3600 {
			return nil, fmt.Errorf("annotation %s is %q: use a number of seconds between 1 and 3600", workspace.AnnTerminationGrace, v)
		}
		p.GracePeriodSeconds = n
	}
	if p.Container == "" && len(t.Spec.Containers) > 0 {
		p.Container = t.Spec.Containers[0].Name
	}
	var containers []string
	for _, c := range t.Spec.Containers {
		containers = append(containers, c.Name)
		if c.Name != p.Container {
			continue
		}
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
			return nil, fmt.Errorf("container %q already has a lifecycle.preStop hook and annotation %s adds another: keep one", c.Name, workspace.AnnPreStop)
		}
		return p, nil
	}
	return nil, fmt.Errorf("annotation %s is %q, which is not a container of the spec: use one of %s", workspace.AnnPreStopContainer, p.Container, nameList(containers))
}

// validContextKey: the keys become ${context.KEY} placeholders and JSON keys.
func validContextKey(k string) bool {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return k != ""
}
