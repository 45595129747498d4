package workspace

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IsWorkspacePod reports whether pod carries the workspace type label and an id.
func IsWorkspacePod(pod *corev1.Pod) bool { return IsWorkspaceObject(pod) }

// IsWorkspaceObject is IsWorkspacePod of any pod object by its metadata (the informer's cached
// podcache.Pod, a *corev1.Pod).
func IsWorkspaceObject(o metav1.Object) bool {
	return LabelOf(o, LabelType) == TypeWorkspace && LabelOf(o, LabelWorkspaceID) != ""
}

// keyed is an object that reads one label or annotation without building a map: the informer's
// cached podcache.Pod, whose GetLabels and GetAnnotations build a map per call.
type keyed interface {
	Label(key string) string
	Annotation(key string) string
}

// LabelOf is the value of o's label key ("" for none), read without building a map when o can.
func LabelOf(o metav1.Object, key string) string {
	if k, ok := o.(keyed); ok {
		return k.Label(key)
	}
	return o.GetLabels()[key]
}

// AnnotationOf is the value of o's annotation key ("" for none), read without building a map when
// o can.
func AnnotationOf(o metav1.Object, key string) string {
	if k, ok := o.(keyed); ok {
		return k.Annotation(key)
	}
	return o.GetAnnotations()[key]
}

// ID is the workspace id of a workspace pod.
func ID(pod *corev1.Pod) string { return pod.Labels[LabelWorkspaceID] }

// IDOf is ID of any pod object by its metadata.
func IDOf(o metav1.Object) string { return LabelOf(o, LabelWorkspaceID) }

// Owner is the raw owner subject of a workspace pod. Ownership checks compare this value. A pod
// made by the original product carries no AnnOwner: its owner is then the LabelUserSub label when
// that is a raw subject (a value UserLabel keeps as it is), and "" when the label is a hashed form
// (the raw subject cannot be recovered). The controller stamps AnnOwner on such pods.
func Owner(pod *corev1.Pod) string { return OwnerOf(pod) }

// OwnerOf is Owner of any pod object by its metadata.
func OwnerOf(o metav1.Object) string {
	if v := AnnotationOf(o, AnnOwner); v != "" {
		return v
	}
	if l := LabelOf(o, LabelUserSub); l != "" && UserLabel(l) == l {
		return l
	}
	return ""
}

// TemplateVersion is the exact template version a workspace pod was built from.
func TemplateVersion(pod *corev1.Pod) string {
	if v, ok := pod.Annotations[AnnTemplateVersion]; ok {
		return v
	}
	return pod.Labels[LabelTemplateVersion]
}

// TemplateKey names the template workspace pod follows, as the template registry looks it up:
// the template's name for a template of nogoo9's namespace (no AnnTemplateNamespace stamp), and
// "<namespace>/<name>" for a team template found in the workspace's own namespace at spawn.
//
// Only nogoo9 writes the stamp, and only with the pod's own namespace (the admission policy refuses
// it from anyone else). A stamp naming another namespace is therefore never followed: its key
// resolves to no template (the workspace shows no latest version and an upgrade fails with
// TemplateNotFound), so no pod can be pointed at another namespace's template.
func TemplateKey(pod *corev1.Pod) string {
	ns, name := pod.Annotations[AnnTemplateNamespace], pod.Labels[LabelTemplate]
	if ns != "" && ns != pod.Namespace {
		return JoinTemplateKey(ns, name) + foreignStamp + pod.Namespace + ")"
	}
	return JoinTemplateKey(ns, name)
}

// foreignStamp marks the key of a pod stamped with another namespace than its own: no template
// name holds a space, so the key never resolves, and it reads well in the error that names it.
const foreignStamp = " (stamped for another namespace than the pod's, "

// JoinTemplateKey is the registry key of template name in namespace ns ("" for nogoo9's
// namespace): a template name is a ConfigMap name, which never holds a '/'.
func JoinTemplateKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// SplitTemplateKey is JoinTemplateKey's inverse: ns is "" for a key of nogoo9's namespace.
func SplitTemplateKey(key string) (ns, name string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

// IsReady reports whether pod is Running, has an IP, is not being deleted and has condition
// Ready=True: the pod can take traffic.
func IsReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NewestFirst sorts pods by creation time, newest first; ties break on name so the order is
// stable. It sorts in place and returns pods.
func NewestFirst(pods []*corev1.Pod) []*corev1.Pod {
	sort.SliceStable(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		// Creation times have one-second resolution, so an upgraded pod is often as "old" as the
		// pod it replaces: the upgrade-from link decides before the name does.
		if pods[i].Annotations[AnnUpgradeFrom] == pods[j].Name {
			return true
		}
		if pods[j].Annotations[AnnUpgradeFrom] == pods[i].Name {
			return false
		}
		return pods[i].Name > pods[j].Name
	})
	return pods
}

// Active picks the pod that serves a workspace: among pods (newest first), the first that is
// ready; if none is, the newest that is not being deleted; if all are being deleted, the newest.
// It returns nil for no pods. pods must already be sorted with NewestFirst.
func Active(pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if IsReady(p) {
			return p
		}
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			return p
		}
	}
	if len(pods) > 0 {
		return pods[0]
	}
	return nil
}

// GroupByID groups workspace pods by workspace id, each group sorted newest first. Pods that are
// not workspace pods are skipped.
func GroupByID(pods []*corev1.Pod) map[string][]*corev1.Pod {
	out := make(map[string][]*corev1.Pod)
	for _, p := range pods {
		if IsWorkspacePod(p) {
			out[ID(p)] = append(out[ID(p)], p)
		}
	}
	for _, g := range out {
		NewestFirst(g)
	}
	return out
}

// CarriedOver is what the pod that stays (keep) must be given, in one merge patch, before the pod
// it replaces (gone) is deleted: for each of keys, gone's value where it differs (set), or the
// key's removal where gone has none (remove); and gone's stop intent where keep has none, which
// is never removed (while any live pod carries it the workspace is stopped). Both are empty when
// keep already agrees. gone is the pod every writer has seen: the front end writes every live pod
// its cache shows, and its cache may not show keep yet.
func CarriedOver(gone, keep *corev1.Pod, keys []string) (set map[string]string, remove []string) {
	set = map[string]string{}
	for _, k := range keys {
		want, has := gone.Annotations[k]
		got, had := keep.Annotations[k]
		switch {
		case has && (!had || want != got):
			set[k] = want
		case !has && had:
			remove = append(remove, k)
		}
	}
	if v := gone.Annotations[AnnStopRequested]; v != "" && keep.Annotations[AnnStopRequested] == "" {
		set[AnnStopRequested] = v
	}
	return set, remove
}
