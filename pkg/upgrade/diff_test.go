package upgrade

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestDiff(t *testing.T) {
	base := func() *corev1.Pod {
		p := &corev1.Pod{}
		p.Annotations = map[string]string{workspace.AnnTemplateVersion: "1", workspace.AnnWorkspacePort: "8080"}
		p.Spec.Containers = []corev1.Container{{Name: "ide", Image: "ide:1",
			Env:          []corev1.EnvVar{{Name: "A", Value: "1"}},
			Ports:        []corev1.ContainerPort{{Name: "ide", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: "/home"}}}}
		p.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{DefaultMode: ptr.To(corev1.ConfigMapVolumeSourceDefaultMode)}}}}
		return p
	}
	for _, tc := range []struct {
		name   string
		mutate func(next *corev1.Pod)
		want   []string
	}{
		{name: "the same pod has no changes, API defaults included", mutate: func(next *corev1.Pod) {
			next.Spec.Volumes[0].ConfigMap.DefaultMode = nil
			next.Spec.Containers[0].Ports[0].Protocol = ""
		}},
		{name: "image, env, port, resources and volume changes are each listed", mutate: func(next *corev1.Pod) {
			next.Annotations[workspace.AnnTemplateVersion] = "2"
			next.Annotations[workspace.AnnWorkspacePort] = "9090"
			c := &next.Spec.Containers[0]
			c.Image = "ide:2"
			c.Env = []corev1.EnvVar{{Name: "A", Value: "2"}, {Name: "B", Value: "x"}}
			c.Ports[0].ContainerPort = 9090
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
			next.Spec.Volumes = append(next.Spec.Volumes, corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}, want: []string{
			"template version: 1 -> 2", "workspace port: 8080 -> 9090", "container ide image: ide:1 -> ide:2",
			`container ide env A: "1" -> "2"`, `container ide env B:  -> "x"`, "container ide ports: ide=8080 -> ide=9090",
			"container ide resources:  -> limit memory=1Gi", "volume cache:  -> {\"emptyDir\":{}}",
		}},
		{name: "an added sidecar is listed with its image", mutate: func(next *corev1.Pod) {
			next.Spec.Containers = append(next.Spec.Containers, corev1.Container{Name: "db", Image: "pg:16"})
		}, want: []string{"container db:  -> added (image pg:16)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := base()
			tc.mutate(next)
			var got []string
			for _, c := range Diff(base(), next) {
				got = append(got, c.Field+": "+c.From+" -> "+c.To)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("Diff:\n got  %q\n want %q", got, tc.want)
			}
		})
	}
}
