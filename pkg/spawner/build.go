package spawner

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Identity is who and what a workspace is: everything BuildPod needs besides the template.
type Identity struct {
	// Owner is the raw subject of the owner.
	Owner string
	// ID is the workspace id (a DNS-1123 label).
	ID string
	// Name is the display name; empty means the id.
	Name string
	// Context holds the caller-supplied values for ${context.KEY} placeholders.
	Context map[string]string
	// Namespace is the workspace's namespace; a new workspace's paths are derived from it
	// (workspace.WorkspacePath).
	Namespace string
	// WorkspacePath and PreviewPath are the paths stamped on an existing workspace's pod; they win
	// over derived ones, so a workspace keeps its URLs whatever the current path shape is.
	WorkspacePath, PreviewPath string
}

// paths returns the workspace and preview paths to stamp: the stamped ones of an existing
// workspace, else those derived from the namespace, else none (a pure render with no namespace).
func (id Identity) paths() (ws, preview string) {
	ws, preview = id.WorkspacePath, id.PreviewPath
	if id.Namespace != "" {
		if ws == "" {
			ws = workspace.WorkspacePath(id.Namespace, id.ID)
		}
		if preview == "" {
			preview = workspace.PreviewPath(id.Namespace, id.ID)
		}
	}
	return ws, preview
}

// IdentityFromPod reads the identity back from a workspace pod, so an upgrade renders the
// template with the values of the original spawn. It carries the paths stamped on the pod, so a
// render never derives new paths for an existing workspace; only a pod that lacks one (made by
// hand, or by an earlier version of the product) gets the missing one from its namespace, so that
// an upgrade never leaves a workspace without a URL.
func IdentityFromPod(pod *corev1.Pod) (Identity, error) {
	id := Identity{Owner: workspace.Owner(pod), ID: workspace.ID(pod), Name: pod.Annotations[workspace.AnnWorkspaceName],
		WorkspacePath: pod.Annotations[workspace.AnnWorkspacePath], PreviewPath: pod.Annotations[workspace.AnnPreviewPath]}
	if id.WorkspacePath == "" || id.PreviewPath == "" {
		id.Namespace = pod.Namespace
	}
	if id.Owner == "" || id.ID == "" {
		return id, fmt.Errorf("pod %s/%s is not a workspace pod nogoo9 can adopt: it lacks label %s, or both annotation %s and a %s label that is a raw subject; annotate it with its owner (kubectl annotate pod %s %s=<subject>)",
			pod.Namespace, pod.Name, workspace.LabelWorkspaceID, workspace.AnnOwner, workspace.LabelUserSub, pod.Name, workspace.AnnOwner)
	}
	if raw := pod.Annotations[workspace.AnnContext]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &id.Context); err != nil {
			return id, fmt.Errorf("pod %s/%s: annotation %s is not a JSON object of strings: %v", pod.Namespace, pod.Name, workspace.AnnContext, err)
		}
	}
	return id, nil
}

// BuildPod renders template t for a workspace: the Pod named podName and the PVCs it mounts (one
// per template claim, named by workspace.ClaimName). It is pure: the same inputs give the same
// objects, the namespace is left empty, nothing is sent anywhere. Errors (a missing required
// context key, an unknown placeholder, an annotation that does not fit the spec) say what to fix.
func BuildPod(t *templates.Template, id Identity, podName string) (*corev1.Pod, []*corev1.PersistentVolumeClaim, error) {
	if t == nil {
		return nil, nil, fmt.Errorf("no template given")
	}
	if err := workspace.ValidateID(id.ID); err != nil {
		return nil, nil, err
	}
	if id.Owner == "" {
		return nil, nil, fmt.Errorf("workspace %s has no owner: a spawn needs the owner's subject", id.ID)
	}
	exp, err := t.Expansion()
	if err != nil {
		return nil, nil, fmt.Errorf("template %s: %w", t.Name, err)
	}
	if err := validateRequiredContext(t, exp, id.Context); err != nil {
		return nil, nil, err
	}
	if err := validateContextText(id.Context); err != nil {
		return nil, nil, err
	}
	spec, claims, err := renderSpec(t, exp, id, podVars(t, id, podName, make(map[string]string, 7)), !alwaysRoundTrip)
	if err != nil {
		return nil, nil, fmt.Errorf("template %s: %w", t.Name, err)
	}

	ctxJSON := "{}"
	if len(id.Context) > 0 {
		b, err := json.Marshal(id.Context)
		if err != nil {
			return nil, nil, err
		}
		ctxJSON = string(b)
	}
	ann := map[string]string{
		workspace.AnnOwner:           id.Owner,
		workspace.AnnTemplateVersion: t.Version,
		workspace.AnnWorkspaceName:   id.displayName(),
		workspace.AnnWorkspacePort:   strconv.Itoa(int(exp.WorkspacePort)),
		workspace.AnnPreviewPort:     strconv.Itoa(int(exp.PreviewPort)),
		workspace.AnnContext:         ctxJSON,
	}
	if t.Namespace != "" {
		// A team template: the workspace follows it, not nogoo9's of the same name.
		ann[workspace.AnnTemplateNamespace] = t.Namespace
	}
	ws, preview := id.paths()
	if ws != "" {
		ann[workspace.AnnWorkspacePath] = ws
	}
	if preview != "" {
		ann[workspace.AnnPreviewPath] = preview
	}
	if exp.StripPrefix != nil {
		ann[workspace.AnnStripPrefix] = *exp.StripPrefix
	}
	if exp.PublicPreview != nil {
		ann[workspace.AnnPublicPreview] = *exp.PublicPreview
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        podName,
			Labels:      labels(t, id),
			Annotations: ann,
		},
		Spec: *spec,
	}
	return pod, claims, nil
}

// displayName is the workspace's display name: Name, or the id when none was given.
func (id Identity) displayName() string {
	if id.Name == "" {
		return id.ID
	}
	return id.Name
}

// podVars are the placeholders' values in a render of t for id as pod podName, set in fixed, an
// empty map the caller makes (BuildPod's stays on its stack; one made here would not).
func podVars(t *templates.Template, id Identity, podName string, fixed map[string]string) vars {
	fixed["owner"], fixed["user"], fixed["id"], fixed["name"] = id.Owner, workspace.UserLabel(id.Owner), id.ID, id.displayName()
	fixed["pod"], fixed["template"], fixed["version"] = podName, t.Name, t.Version
	return vars{fixed: fixed, context: id.Context}
}

// renderSpec renders t's spec and claims for a workspace: the claims bound, the init container
// and preStop hook injected, every placeholder expanded. With programmed (BuildPod's default),
// a template whose program is usable (programsOf) is expanded from its program, computed once
// per template value: substitute and decode. Otherwise, and whenever the programmed render
// fails, it takes the whole spec's JSON round trip after the injections, as before: its errors
// are the ones BuildPod reports, in the order it always found them.
func renderSpec(t *templates.Template, exp *templates.Expansion, id Identity, v vars, programmed bool) (*corev1.PodSpec, []*corev1.PersistentVolumeClaim, error) {
	if programmed {
		if progs := programsOf(t); progs != nil && progs.spec != nil && injectsNoPlaceholderNames(exp) {
			if spec, claims, err := renderProgrammed(t, progs, exp, id, v); err == nil {
				return spec, claims, nil
			}
		}
	}
	return renderRoundTrip(t, exp, id, v)
}

// injectsNoPlaceholderNames: the names the injections look for in the spec hold no "${" (so
// they find the same volume and container before and after the spec's expansion). Redundant
// today: Expansion requires nogoo9/init-volume to name a volume of the spec or a claim (a
// DNS-1123 label) and the preStop container to be one of the spec's, so a "${" here is one in a
// name namesHoldPlaceholders already refuses (renderCases' "nogoo9/init-volume naming a volume
// with a placeholder in its name" passes without this check). Kept because that holds only
// through templates' validation: were it relaxed, a program would inject the name unexpanded,
// which the round trip expands; two string searches guard it.
func injectsNoPlaceholderNames(exp *templates.Expansion) bool {
	return (exp.Init == nil || !strings.Contains(exp.Init.Volume, "${")) &&
		(exp.PreStop == nil || !strings.Contains(exp.PreStop.Container, "${"))
}

// renderProgrammed expands the spec from its program first, then binds the claims and injects
// the init container and preStop hook with their own values expanded one by one: what the round
// trip's expansion of the whole spec makes of them (programsOf's conditions keep the names
// they are matched by free of placeholders).
func renderProgrammed(t *templates.Template, progs *programs, exp *templates.Expansion, id Identity, v vars) (*corev1.PodSpec, []*corev1.PersistentVolumeClaim, error) {
	spec := &corev1.PodSpec{}
	if progs.spec.plain {
		spec = t.Spec.DeepCopy()
	} else if err := progs.spec.render(spec, v); err != nil {
		return nil, nil, err
	}
	claims, err := bindAndInject(t, spec, exp, id, v, true)
	if err != nil {
		return nil, nil, err
	}
	for i, c := range claims {
		if i >= len(progs.claims) || progs.claims[i] == nil {
			return nil, nil, fmt.Errorf("claim %d has no program", i)
		}
		if progs.claims[i].plain {
			continue // bindClaims' deep copy is the render
		}
		var out corev1.PersistentVolumeClaimSpec
		if err := progs.claims[i].render(&out, v); err != nil {
			return nil, nil, err
		}
		c.Spec = out
	}
	return spec, claims, nil
}

// renderRoundTrip is renderSpec through the whole spec's JSON round trip after the injections.
func renderRoundTrip(t *templates.Template, exp *templates.Expansion, id Identity, v vars) (*corev1.PodSpec, []*corev1.PersistentVolumeClaim, error) {
	spec := t.Spec.DeepCopy()
	claims, err := bindAndInject(t, spec, exp, id, v, false)
	if err != nil {
		return nil, nil, err
	}
	if err := expandJSON(spec, "data.spec", v); err != nil {
		return nil, nil, err
	}
	for i, c := range claims {
		if err := expandJSON(&c.Spec, fmt.Sprintf("data.volumeClaims[%d].spec", i), v); err != nil {
			return nil, nil, err
		}
	}
	return spec, claims, nil
}

// bindAndInject binds t's claims to spec's volumes (bindClaims) and injects the init container
// and preStop hook, and returns the claims. Into a spec already expanded (expanded), every value
// they add is expanded here; into one the round trip expands next, only the values a check
// approves (the init image and S3 endpoint, which the caller must not choose, and the shell-safe
// preStop script), escaped again so that the round trip leaves them as they are, and the rest is
// left to the round trip.
func bindAndInject(t *templates.Template, spec *corev1.PodSpec, exp *templates.Expansion, id Identity, v vars, expanded bool) ([]*corev1.PersistentVolumeClaim, error) {
	claimVolume, claims, err := bindClaims(t, spec, id)
	if err != nil {
		return nil, err
	}
	if exp.Init != nil {
		in := *exp.Init
		// What runs with nogoo9/init-secret and where its requests go are the template's alone;
		// the endpoint and the location are environment values, which the kubelet expands.
		if in.Image, err = expandNoCaller(in.Image, "annotation "+workspace.AnnInitImage, v, false, !expanded); err != nil {
			return nil, err
		}
		if in.Endpoint, err = expandNoCaller(in.Endpoint, "annotation "+workspace.AnnInitS3Endpoint, v, true, !expanded); err != nil {
			return nil, err
		}
		if expanded {
			// Into a spec already expanded, the location (the init container's env[0].value,
			// which the kubelet expands) and the Secret's name are expanded here; the round trip
			// expands them with the spec.
			if in.Location, err = expandChecked(in.Location, "annotation "+workspace.AnnInitFrom, v, true, nil); err != nil {
				return nil, err
			}
			if in.Secret, err = expandString(in.Secret, "annotation "+workspace.AnnInitSecret, v); err != nil {
				return nil, err
			}
		}
		vol := in.Volume
		if cv, ok := claimVolume[vol]; ok && !hasVolume(spec, vol) {
			vol = cv
		}
		if err := injectInitContainer(spec, &in, vol); err != nil {
			return nil, err
		}
	}
	if exp.PreStop != nil {
		p := *exp.PreStop
		if p.Script, err = expandShell(p.Script, "annotation "+workspace.AnnPreStop, v, !expanded); err != nil {
			return nil, err
		}
		if err := injectPreStopHook(spec, &p); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

func labels(t *templates.Template, id Identity) map[string]string {
	return map[string]string{
		workspace.LabelType:            workspace.TypeWorkspace,
		workspace.LabelWorkspaceID:     id.ID,
		workspace.LabelUserSub:         workspace.UserLabel(id.Owner),
		workspace.LabelTemplate:        t.Name,
		workspace.LabelTemplateVersion: workspace.VersionLabel(t.Version),
	}
}

// bindClaims renders the template's claims as PVCs of this workspace and points the spec's
// volumes at them: a volume whose persistentVolumeClaim.claimName is a template claim's name gets
// the workspace's PVC; a claim no volume refers to gets a volume of its own name. It returns
// claim name -> pod volume name.
func bindClaims(t *templates.Template, spec *corev1.PodSpec, id Identity) (map[string]string, []*corev1.PersistentVolumeClaim, error) {
	claimVolume := map[string]string{}
	var pvcs []*corev1.PersistentVolumeClaim
	for _, c := range t.VolumeClaims {
		pvcName := workspace.ClaimName(id.Owner, id.ID, c.Name)
		bound := false
		for i := range spec.Volumes {
			vol := &spec.Volumes[i]
			if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == c.Name {
				vol.PersistentVolumeClaim.ClaimName = pvcName
				claimVolume[c.Name] = vol.Name
				bound = true
			} else if vol.Name == c.Name {
				return nil, nil, fmt.Errorf("volume %q has the name of a volume claim but does not use it: rename the volume or set persistentVolumeClaim.claimName: %q", vol.Name, c.Name)
			}
		}
		if !bound {
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvcName},
			}})
			claimVolume[c.Name] = c.Name
		}
		pvc := &corev1.PersistentVolumeClaim{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: metav1.ObjectMeta{
				Name: pvcName,
				Labels: map[string]string{
					workspace.LabelWorkspaceID: id.ID,
					workspace.LabelUserSub:     workspace.UserLabel(id.Owner),
					workspace.LabelTemplate:    t.Name,
				},
				Annotations: map[string]string{workspace.AnnOwner: id.Owner},
			},
			Spec: *c.Spec.DeepCopy(),
		}
		for k, v := range c.Labels {
			if _, ok := pvc.Labels[k]; !ok {
				pvc.Labels[k] = v
			}
		}
		for k, v := range c.Annotations {
			if _, ok := pvc.Annotations[k]; !ok {
				pvc.Annotations[k] = v
			}
		}
		pvcs = append(pvcs, pvc)
	}
	return claimVolume, pvcs, nil
}

func hasVolume(spec *corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

// validateContextText refuses a context key or value that is not valid UTF-8: the API server
// stores text as UTF-8 (JSON), so such a value would land in the pod altered, not as given.
// (REST and MCP bodies are JSON, so their values are always valid; a Go caller's need not be.)
func validateContextText(ctx map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(ctx)) {
		if !utf8.ValidString(k) {
			return fmt.Errorf("context key %s is not valid UTF-8: use UTF-8 text for context keys", workspace.Quote(k))
		}
		if v := ctx[k]; !utf8.ValidString(v) {
			return fmt.Errorf("context value %s (%s) is not valid UTF-8, so it could not be stored as given: pass UTF-8 text", workspace.Quote(k), workspace.Quote(v))
		}
	}
	return nil
}
