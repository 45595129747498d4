package upgrade

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Change is one difference between a workspace's pod and the pod an upgrade would create, as a
// dry run reports it: Field names what changes (e.g. "container ide image"), From and To are
// the readable values ("" for absent).
type Change struct {
	Field string `json:"field"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
}

// Diff lists what changes from pod cur to pod next (the pod an upgrade would create): the
// template version, per container (init containers too) its image, command, args, environment,
// ports, resources and volume mounts, the pod's volumes and the routed ports. Fields nogoo9 sets
// per pod (names, upgrade bookkeeping) are not compared. The order is stable.
func Diff(cur, next *corev1.Pod) []Change {
	var out []Change
	add := func(field, from, to string) {
		if from != to {
			out = append(out, Change{Field: field, From: from, To: to})
		}
	}
	add("template version", workspace.TemplateVersion(cur), workspace.TemplateVersion(next))
	add("workspace port", cur.Annotations[workspace.AnnWorkspacePort], next.Annotations[workspace.AnnWorkspacePort])
	add("preview port", cur.Annotations[workspace.AnnPreviewPort], next.Annotations[workspace.AnnPreviewPort])
	diffContainers := func(kind string, a, b []corev1.Container) {
		byName := map[string]*corev1.Container{}
		var names []string
		for i := range a {
			byName[a[i].Name] = &a[i]
			names = append(names, a[i].Name)
		}
		nextByName := map[string]*corev1.Container{}
		for i := range b {
			nextByName[b[i].Name] = &b[i]
			if byName[b[i].Name] == nil {
				names = append(names, b[i].Name)
			}
		}
		for _, n := range names {
			x, y := byName[n], nextByName[n]
			f := kind + " " + n
			switch {
			case x == nil:
				add(f, "", "added (image "+y.Image+")")
				continue
			case y == nil:
				add(f, "removed (image "+x.Image+")", "")
				continue
			}
			add(f+" image", x.Image, y.Image)
			add(f+" command", strings.Join(x.Command, " "), strings.Join(y.Command, " "))
			add(f+" args", strings.Join(x.Args, " "), strings.Join(y.Args, " "))
			diffMap(f+" env ", envMap(x.Env), envMap(y.Env), add)
			add(f+" ports", ports(x.Ports), ports(y.Ports))
			add(f+" resources", resources(x.Resources), resources(y.Resources))
			add(f+" volume mounts", mounts(x.VolumeMounts), mounts(y.VolumeMounts))
		}
	}
	diffContainers("init container", cur.Spec.InitContainers, next.Spec.InitContainers)
	diffContainers("container", cur.Spec.Containers, next.Spec.Containers)
	diffMap("volume ", volumeMap(cur.Spec.Volumes), volumeMap(next.Spec.Volumes), add)
	return out
}

func diffMap(prefix string, a, b map[string]string, add func(field, from, to string)) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		add(prefix+k, a[k], b[k])
	}
}

func envMap(env []corev1.EnvVar) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		if e.ValueFrom != nil {
			b, _ := json.Marshal(e.ValueFrom)
			m[e.Name] = "from " + string(b)
			continue
		}
		m[e.Name] = fmt.Sprintf("%q", e.Value)
	}
	return m
}

func ports(ps []corev1.ContainerPort) string {
	var s []string
	for _, p := range ps {
		v := fmt.Sprint(p.ContainerPort)
		if p.Name != "" {
			v = p.Name + "=" + v
		}
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			v += "/" + string(p.Protocol)
		}
		s = append(s, v)
	}
	return strings.Join(s, ", ")
}

func resources(r corev1.ResourceRequirements) string {
	list := func(what string, l corev1.ResourceList) []string {
		var s []string
		for k, v := range l {
			s = append(s, what+" "+string(k)+"="+v.String())
		}
		sort.Strings(s)
		return s
	}
	return strings.Join(append(list("request", r.Requests), list("limit", r.Limits)...), ", ")
}

func mounts(ms []corev1.VolumeMount) string {
	var s []string
	for _, m := range ms {
		if strings.HasPrefix(m.Name, "kube-api-access-") {
			continue
		}
		v := m.Name + " at " + m.MountPath
		if m.SubPath != "" {
			v += " (subPath " + m.SubPath + ")"
		}
		if m.ReadOnly {
			v += " read-only"
		}
		s = append(s, v)
	}
	return strings.Join(s, ", ")
}

// volumeMap describes each volume by its source (JSON without the name), so any change shows.
// The API server's defaults (mode 0644, the service account token volume it adds) are not
// changes: they are taken out before comparing.
func volumeMap(vs []corev1.Volume) map[string]string {
	m := make(map[string]string, len(vs))
	for _, v := range vs {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			continue
		}
		src := *v.VolumeSource.DeepCopy()
		dm := func(p **int32) {
			if *p != nil && **p == corev1.ConfigMapVolumeSourceDefaultMode {
				*p = nil
			}
		}
		switch {
		case src.ConfigMap != nil:
			dm(&src.ConfigMap.DefaultMode)
		case src.Secret != nil:
			dm(&src.Secret.DefaultMode)
		case src.Projected != nil:
			dm(&src.Projected.DefaultMode)
		case src.DownwardAPI != nil:
			dm(&src.DownwardAPI.DefaultMode)
		}
		b, _ := json.Marshal(src)
		m[v.Name] = string(b)
	}
	return m
}
