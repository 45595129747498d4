package spawner

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

const claims = `[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"${context.class}","resources":{"requests":{"storage":"1Gi"}}}}]`

func mustTemplate(t *testing.T, ann map[string]string, spec, volumeClaims string) *templates.Template {
	t.Helper()
	a := map[string]string{workspace.AnnTemplateVersion: "v1.2"}
	for k, v := range ann {
		a[k] = v
	}
	data := map[string]string{"spec": spec}
	if volumeClaims != "" {
		data["volumeClaims"] = volumeClaims
	}
	tmpl, err := templates.Decode("node", "test", a, data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return tmpl
}

const nodeSpec = `{"containers":[{"name":"ide","image":"node:22","args":["--user","${user}","--ws","${id}"],
 "env":[{"name":"OWNER","value":"${owner}"},{"name":"REPO","value":"${context.repo}"},{"name":"SHELL_VAR","value":"$${HOME}"},{"name":"POD","value":"${pod}"}],
 "ports":[{"containerPort":8080},{"containerPort":3000}],
 "volumeMounts":[{"name":"home","mountPath":"/home/node"}]}]}`

func TestBuildPodSetsTheContract(t *testing.T) {
	tmpl := mustTemplate(t, map[string]string{
		workspace.AnnDescription:   "Node",
		workspace.AnnPreviewPort:   "3000",
		workspace.AnnStripPrefix:   "false",
		workspace.AnnPublicPreview: "true",
	}, nodeSpec, claims)
	id := Identity{Owner: "auth0|Jane", ID: "demo", Name: "My Demo", Context: map[string]string{"repo": "git@x:y.git", "class": "fast"}, Namespace: "team-a"}
	podName := workspace.PodName(id.Owner, id.ID)
	pod, pvcs, err := BuildPod(tmpl, id, podName)
	if err != nil {
		t.Fatal(err)
	}
	user := workspace.UserLabel(id.Owner)
	wantLabels := map[string]string{
		workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo", workspace.LabelUserSub: user,
		workspace.LabelTemplate: "node", workspace.LabelTemplateVersion: "v1.2",
	}
	if !reflect.DeepEqual(pod.Labels, wantLabels) {
		t.Errorf("labels = %v\nwant %v", pod.Labels, wantLabels)
	}
	wantAnn := map[string]string{
		workspace.AnnOwner: "auth0|Jane", workspace.AnnTemplateVersion: "v1.2", workspace.AnnWorkspaceName: "My Demo",
		workspace.AnnWorkspacePath: "/ws/team-a/demo/", workspace.AnnWorkspacePort: "8080",
		workspace.AnnPreviewPath: "/preview/team-a/demo/", workspace.AnnPreviewPort: "3000",
		workspace.AnnContext:     `{"class":"fast","repo":"git@x:y.git"}`,
		workspace.AnnStripPrefix: "false", workspace.AnnPublicPreview: "true",
	}
	if !reflect.DeepEqual(pod.Annotations, wantAnn) {
		t.Errorf("annotations = %v\nwant %v", pod.Annotations, wantAnn)
	}
	if pod.Name != podName || pod.Namespace != "" {
		t.Errorf("pod %s/%s", pod.Namespace, pod.Name)
	}
	c := pod.Spec.Containers[0]
	if got := strings.Join(c.Args, " "); got != "--user "+user+" --ws demo" {
		t.Errorf("args = %q", got)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["OWNER"] != "auth0|Jane" || env["REPO"] != "git@x:y.git" || env["SHELL_VAR"] != "${HOME}" || env["POD"] != podName {
		t.Errorf("env = %v", env)
	}
	if len(pvcs) != 1 {
		t.Fatalf("%d PVCs, want 1", len(pvcs))
	}
	pvc := pvcs[0]
	if pvc.Name != workspace.ClaimName(id.Owner, id.ID, "home") || pvc.Labels[workspace.LabelWorkspaceID] != "demo" ||
		pvc.Labels[workspace.LabelUserSub] != user || pvc.Annotations[workspace.AnnOwner] != id.Owner {
		t.Errorf("pvc meta = %+v", pvc.ObjectMeta)
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" {
		t.Errorf("pvc storage class = %v, want the expanded context value", pvc.Spec.StorageClassName)
	}
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].Name != "home" || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("volumes = %+v", pod.Spec.Volumes)
	}
	// The template is not changed by a build.
	if tmpl.Spec.Containers[0].Args[1] != "${user}" {
		t.Errorf("BuildPod changed the template")
	}
	// An upgrade reads the identity back, with the stamped paths instead of the namespace, and
	// renders the same pod under another name.
	pod.Namespace = id.Namespace
	back, err := IdentityFromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	id.Namespace, id.WorkspacePath, id.PreviewPath = "", "/ws/team-a/demo/", "/preview/team-a/demo/"
	if !reflect.DeepEqual(back, id) {
		t.Errorf("IdentityFromPod = %+v, want %+v", back, id)
	}
	up := workspace.UpgradePodName(id.Owner, id.ID, "seed")
	pod2, pvcs2, err := BuildPod(tmpl, back, up)
	if err != nil {
		t.Fatal(err)
	}
	if pod2.Name != up || pvcs2[0].Name != pvc.Name || !reflect.DeepEqual(pod2.Labels, pod.Labels) || !reflect.DeepEqual(pod2.Annotations, pod.Annotations) {
		t.Errorf("upgrade build differs: %s %s", pod2.Name, pvcs2[0].Name)
	}
}

func TestBuildPodBindsAClaimReferencedByAVolume(t *testing.T) {
	tmpl := mustTemplate(t, nil, `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"data","mountPath":"/d"}]}],
 "volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"home"}}]}`, strings.Replace(claims, "${context.class}", "std", 1))
	pod, pvcs, err := BuildPod(tmpl, Identity{Owner: "jane", ID: "w1"}, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].Name != "data" || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvcs[0].Name {
		t.Errorf("volumes = %+v", pod.Spec.Volumes)
	}
	if pod.Annotations[workspace.AnnWorkspaceName] != "w1" || pod.Annotations[workspace.AnnContext] != "{}" {
		t.Errorf("defaults: %v", pod.Annotations)
	}
	if _, ok := pod.Annotations[workspace.AnnStripPrefix]; ok {
		t.Errorf("strip-prefix set although the template does not set it")
	}
}

func TestExpandString(t *testing.T) {
	v := vars{fixed: map[string]string{"owner": "jane", "id": "demo"}, context: map[string]string{"repo": "r", "a.b": "dotted"}}
	tests := []struct {
		name, in, want, wantErr string
	}{
		{name: "no placeholder", in: "plain $HOME $(VAR)", want: "plain $HOME $(VAR)"},
		{name: "fixed variables", in: "${owner}/${id}", want: "jane/demo"},
		{name: "context values", in: "x${context.repo}y${context.a.b}", want: "xrydotted"},
		{name: "an escaped placeholder stays literal", in: "$${HOME} and $${owner}", want: "${HOME} and ${owner}"},
		{name: "an unknown variable is an error", in: "${nope}", wantErr: "unknown placeholder ${nope}"},
		{name: "a missing context value names the key", in: "${context.branch}", wantErr: `context value "branch"`},
		{name: "an unclosed placeholder is an error", in: "a ${owner", wantErr: "not closed"},
		{name: "an empty placeholder is an error", in: "${}", wantErr: "unknown placeholder ${}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := expandString(tc.in, "f", v)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("expandString(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestBuildPodRefusals(t *testing.T) {
	base := `{"containers":[{"name":"a","image":"b","ports":[{"containerPort":80}],"env":[{"name":"X","value":"%s"}]}]}`
	tests := []struct {
		name    string
		ann     map[string]string
		value   string
		id      Identity
		wantErr []string
	}{
		{name: "an unknown placeholder names the field", value: "${nope}", id: Identity{Owner: "o", ID: "w"},
			wantErr: []string{"data.spec.containers[0].env[0].value", "${nope}", "${owner}"}},
		{name: "missing required context lists every key", ann: map[string]string{workspace.AnnRequiredContext: "repo,branch,token"}, value: "v",
			id: Identity{Owner: "o", ID: "w", Context: map[string]string{"branch": "main"}}, wantErr: []string{"template node requires context keys", "repo, token"}},
		{name: "a bad id is refused", value: "v", id: Identity{Owner: "o", ID: "Bad_ID"}, wantErr: []string{`"Bad_ID"`}},
		{name: "a missing owner is refused", value: "v", id: Identity{ID: "w"}, wantErr: []string{"no owner"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := mustTemplate(t, tc.ann, strings.Replace(base, "%s", tc.value, 1), "")
			_, _, err := BuildPod(tmpl, tc.id, "p")
			if err == nil {
				t.Fatalf("BuildPod succeeded, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func initContainer(t *testing.T, pod *corev1.Pod) (corev1.Container, map[string]string) {
	t.Helper()
	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != InitContainerName {
		t.Fatalf("no init container first: %+v", pod.Spec.InitContainers)
	}
	c := pod.Spec.InitContainers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return c, env
}

func TestInjectInitContainer(t *testing.T) {
	spec := `{"initContainers":[{"name":"own","image":"x"}],"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],"volumeMounts":[{"name":"home","mountPath":"/h"}]}]}`
	cl := strings.Replace(claims, "${context.class}", "std", 1)
	id := Identity{Owner: "jane", ID: "w"}
	t.Run("from S3 with credentials, endpoint and a per-user prefix", func(t *testing.T) {
		tmpl := mustTemplate(t, map[string]string{
			workspace.AnnInitFrom: "s3://seeds/${user}/base", workspace.AnnInitSecret: "s3-creds", workspace.AnnInitS3Endpoint: "http://minio:9000",
		}, spec, cl)
		pod, pvcs, err := BuildPod(tmpl, id, "p")
		if err != nil {
			t.Fatal(err)
		}
		c, env := initContainer(t, pod)
		if c.Image != templates.DefaultS3InitImage || env["NOGOO9_INIT_SOURCE"] != "s3://seeds/jane/base" || env["AWS_ENDPOINT_URL"] != "http://minio:9000" {
			t.Errorf("init container = %+v", c)
		}
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name != "s3-creds" {
			t.Errorf("envFrom = %+v", c.EnvFrom)
		}
		if len(c.Command) != 3 || c.Command[0] != "/bin/sh" || !strings.Contains(c.Command[2], "aws s3 sync") || !strings.Contains(c.Command[2], InitMarker) {
			t.Errorf("command = %q", c.Command)
		}
		if c.VolumeMounts[0].Name != "home" || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvcs[0].Name {
			t.Errorf("mounts = %+v, volumes = %+v", c.VolumeMounts, pod.Spec.Volumes)
		}
		if pod.Spec.InitContainers[1].Name != "own" {
			t.Errorf("the template's own init container must run after nogoo9-init")
		}
	})
	t.Run("from a ConfigMap mounted read-only", func(t *testing.T) {
		tmpl := mustTemplate(t, map[string]string{workspace.AnnInitFrom: "configmap:seed", workspace.AnnInitImage: "busybox:stable"}, spec, cl)
		pod, _, err := BuildPod(tmpl, id, "p")
		if err != nil {
			t.Fatal(err)
		}
		c, env := initContainer(t, pod)
		if c.Image != "busybox:stable" || env["NOGOO9_INIT_CONFIGMAP"] != "seed" || !strings.Contains(c.Command[2], "cp -L") {
			t.Errorf("init container = %+v", c)
		}
		var src *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].ConfigMap != nil {
				src = &pod.Spec.Volumes[i]
			}
		}
		if src == nil || src.ConfigMap.Name != "seed" {
			t.Fatalf("no ConfigMap volume: %+v", pod.Spec.Volumes)
		}
		if len(c.VolumeMounts) != 2 || c.VolumeMounts[1].Name != src.Name || !c.VolumeMounts[1].ReadOnly {
			t.Errorf("mounts = %+v", c.VolumeMounts)
		}
	})
	t.Run("into an emptyDir named by nogoo9/init-volume", func(t *testing.T) {
		tmpl := mustTemplate(t, map[string]string{workspace.AnnInitFrom: "configmap:seed", workspace.AnnInitVolume: "scratch"},
			`{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}]}],"volumes":[{"name":"scratch","emptyDir":{}}]}`, "")
		pod, _, err := BuildPod(tmpl, id, "p")
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := initContainer(t, pod); c.VolumeMounts[0].Name != "scratch" {
			t.Errorf("mounts = %+v", c.VolumeMounts)
		}
	})
}

func TestInjectPreStopHook(t *testing.T) {
	spec := `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}]},{"name":"sidecar","image":"c"}]}`
	tests := []struct {
		name          string
		ann           map[string]string
		wantContainer int
		wantGrace     int64
	}{
		{name: "the first container gets the hook and the default grace period", ann: map[string]string{workspace.AnnPreStop: "sync"}, wantContainer: 0, wantGrace: templates.DefaultTerminationGrace},
		{name: "a named container and grace period", ann: map[string]string{workspace.AnnPreStop: "flush ${id}", workspace.AnnPreStopContainer: "sidecar", workspace.AnnTerminationGrace: "120"}, wantContainer: 1, wantGrace: 120},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, _, err := BuildPod(mustTemplate(t, tc.ann, spec, ""), Identity{Owner: "o", ID: "w"}, "p")
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range pod.Spec.Containers {
				has := c.Lifecycle != nil && c.Lifecycle.PreStop != nil
				if has != (i == tc.wantContainer) {
					t.Fatalf("container %s has hook = %v", c.Name, has)
				}
				if has {
					cmd := c.Lifecycle.PreStop.Exec.Command
					want := strings.ReplaceAll(tc.ann[workspace.AnnPreStop], "${id}", "w")
					if len(cmd) != 3 || cmd[0] != "/bin/sh" || cmd[2] != want {
						t.Errorf("hook = %q, want sh -c %q", cmd, want)
					}
				}
			}
			if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != tc.wantGrace {
				t.Errorf("grace = %v, want %d", g, tc.wantGrace)
			}
		})
	}
}

func TestIdentityFromPodRefusesBrokenPods(t *testing.T) {
	pod := &corev1.Pod{}
	pod.Labels = map[string]string{workspace.LabelWorkspaceID: "w"}
	pod.Annotations = map[string]string{workspace.AnnOwner: "o", workspace.AnnContext: "[1]"}
	if _, err := IdentityFromPod(pod); err == nil || !strings.Contains(err.Error(), workspace.AnnContext) {
		t.Errorf("err = %v", err)
	}
	delete(pod.Annotations, workspace.AnnOwner)
	if _, err := IdentityFromPod(pod); err == nil {
		t.Errorf("a pod without owner gave an identity")
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	err := error(errorf(Conflict, nil, "workspace %q already exists", "w"))
	if !errors.Is(err, ErrConflict) || errors.Is(err, ErrQuotaExceeded) || CodeOf(err) != Conflict {
		t.Errorf("sentinel matching broken for %v", err)
	}
}

// A workspace created before paths named the namespace keeps the paths stamped on its pod through
// every later render (an upgrade), while a new workspace of the same owner and id in the same
// namespace would get /ws/<namespace>/<id>/.
func TestBuildPodKeepsTheStampedPathsOfAnExistingWorkspace(t *testing.T) {
	tmpl := mustTemplate(t, map[string]string{workspace.AnnPreviewPort: "3000"}, nodeSpec, strings.Replace(claims, "${context.class}", "std", 1))
	owner := "system:serviceaccount:default:demo-user"
	oldWS := "/ws/" + workspace.UserLabel(owner) + "/demo/"
	oldPreview := "/preview/" + workspace.UserLabel(owner) + "/demo/"
	old := &corev1.Pod{}
	old.Namespace = "default"
	old.Labels = map[string]string{workspace.LabelWorkspaceID: "demo", workspace.LabelUserSub: workspace.UserLabel(owner)}
	old.Annotations = map[string]string{workspace.AnnOwner: owner, workspace.AnnWorkspacePath: oldWS, workspace.AnnPreviewPath: oldPreview,
		workspace.AnnContext: `{"repo":"r.git"}`}
	id, err := IdentityFromPod(old)
	if err != nil {
		t.Fatal(err)
	}
	up, _, err := BuildPod(tmpl, id, "up")
	if err != nil {
		t.Fatal(err)
	}
	if got := up.Annotations[workspace.AnnWorkspacePath]; got != oldWS {
		t.Errorf("upgraded workspace path %q, want the stamped %q", got, oldWS)
	}
	if got := up.Annotations[workspace.AnnPreviewPath]; got != oldPreview {
		t.Errorf("upgraded preview path %q, want the stamped %q", got, oldPreview)
	}
	fresh, _, err := BuildPod(tmpl, Identity{Owner: owner, ID: "demo", Namespace: "default", Context: id.Context}, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := fresh.Annotations[workspace.AnnWorkspacePath]; got != "/ws/default/demo/" {
		t.Errorf("new workspace path %q, want /ws/default/demo/", got)
	}
	if got := fresh.Annotations[workspace.AnnPreviewPath]; got != "/preview/default/demo/" {
		t.Errorf("new preview path %q, want /preview/default/demo/", got)
	}
}
