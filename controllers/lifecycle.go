package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// lifecycleTotal is nogoo9_workspace_lifecycle_total{action}: stops, starts and culls that
// happened (a cull is also a stop); rate(...[1h]) gives them per hour.
var lifecycleTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "nogoo9_workspace_lifecycle_total",
	Help: "Workspace stops, starts and idle culls carried out by the elected controller (action=stop|start|cull).",
}, []string{"action"})

func init() {
	metrics.Registry.MustRegister(lifecycleTotal)
	for _, a := range []string{"stop", "start", "cull"} {
		lifecycleTotal.WithLabelValues(a).Add(0)
	}
}

// LifecycleOptions tunes stop, start and idle culling; main.go fills it from flags.
type LifecycleOptions struct {
	// IdleTimeout is the default idle timeout of templates without nogoo9/idle-timeout
	// (--idle-timeout; 0, the default, turns culling off).
	IdleTimeout time.Duration
}

// heldEvents remembers which "start held" Events were recorded, per pod version, so a workspace
// that waits for its maintenance to end says so once.
type heldEvents struct {
	mu   sync.Mutex
	seen map[types.UID]string
}

func (h *heldEvents) first(p *corev1.Pod) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[types.UID]string{}
	}
	if h.seen[p.UID] == p.ResourceVersion {
		return false
	}
	if len(h.seen) >= 10000 {
		clear(h.seen) // bounded: at worst a waiting start says so once more
	}
	h.seen[p.UID] = p.ResourceVersion
	return true
}

// reconcileLifecycle plans and applies the workspace's lifecycle move. done means the pass is
// over (the upgrade planner does not run); res is its result.
func (r *WorkspaceReconciler) reconcileLifecycle(ctx context.Context, key types.NamespacedName, pods []*corev1.Pod, tmpl *templates.Template, now time.Time) (done bool, res ctrl.Result, err error) {
	t := lifecycle.Target{}
	if tmpl != nil {
		t = lifecycle.Target{Found: true, Version: tmpl.Version, Annotations: tmpl.Annotations}
	}
	gone, err := r.goneNodes(ctx, pods)
	if err != nil {
		return true, ctrl.Result{}, err
	}
	t.GoneNodes = gone
	move := lifecycle.Plan(pods, t, now, lifecycle.Config{IdleTimeout: r.Opts.Lifecycle.IdleTimeout})
	if move.RequeueAfter > 0 {
		res.RequeueAfter = move.RequeueAfter + time.Second
	}
	if len(move.Actions) == 0 {
		return move.Hold, res, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Planned lifecycle move", "state", move.State, "actions", len(move.Actions))
	for _, a := range move.Actions {
		happened, err := r.applyLifecycle(ctx, key, a, tmpl, now)
		if err != nil {
			return true, ctrl.Result{}, err
		}
		if !happened {
			// Stale view (changed, gone, replaced): plan again from what the watch brings.
			return true, ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	return true, ctrl.Result{}, nil
}

// applyLifecycle performs one action; happened is false when it did not (stale view).
func (r *WorkspaceReconciler) applyLifecycle(ctx context.Context, key types.NamespacedName, a lifecycle.Action, tmpl *templates.Template, now time.Time) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	switch a.Kind {
	case lifecycle.EventOnly:
		if r.held.first(a.Pod) {
			r.Recorder.Event(a.Pod, a.EventType, a.Reason, a.Message)
		}
		return true, nil
	case lifecycle.PatchPod:
		done, err := r.patchAnnotationsAt(ctx, a.Pod, a.Set, a.Remove...)
		if err != nil || !done {
			return done, err
		}
		if a.Culled {
			lifecycleTotal.WithLabelValues("cull").Inc()
			log.Info("Culled idle workspace", "pod", klog.KObj(a.Pod), "reason", a.Set[workspace.AnnStopRequested])
		}
		r.lifecycleEvent(a)
		return true, nil
	case lifecycle.DeletePod:
		if a.NodeLost {
			return r.deleteLostPod(ctx, a)
		}
		// Counted only by the pass whose delete went through: a pass planned from a cache that
		// does not show this process's delete yet skips it (deletePod) and must not count it again.
		already := r.deleted.recent(a.Pod.UID, r.Opts.Now())
		// As the planner saw it (MatchVersion): a write on the pod since (a stop intent, a
		// maintenance, a pin) fails the delete, and the next pass carries it instead of losing it.
		wait, err := r.deletePod(ctx, key, &moveState{}, upgrade.Action{Kind: upgrade.DeletePod, Pod: a.Pod, Keep: a.Keep, MatchVersion: true,
			EventType: a.EventType, Reason: a.Reason, Message: a.Message})
		if err != nil {
			return false, err
		}
		if wait == 0 && !already && r.deleted.recent(a.Pod.UID, r.Opts.Now()) {
			switch a.Reason {
			case lifecycle.ReasonStopped:
				lifecycleTotal.WithLabelValues("stop").Inc()
			case lifecycle.ReasonStarted:
				lifecycleTotal.WithLabelValues("start").Inc()
			}
		}
		return wait == 0, nil
	case lifecycle.CreateStoppedPod:
		return r.createStoppedPod(ctx, a)
	case lifecycle.Ungate:
		done, err := r.ungate(ctx, a.Pod, now)
		if err != nil || !done {
			return done, err
		}
		lifecycleTotal.WithLabelValues("start").Inc()
		log.Info("Started workspace", "pod", klog.KObj(a.Pod))
		r.lifecycleEvent(a)
		return true, nil
	case lifecycle.CreateStartedPod:
		return r.createStartedPod(ctx, a, tmpl, now)
	}
	return false, fmt.Errorf("unknown lifecycle action %q", a.Kind)
}

func (r *WorkspaceReconciler) lifecycleEvent(a lifecycle.Action) {
	if a.Reason != "" {
		r.Recorder.Event(a.Pod, a.EventType, a.Reason, a.Message)
	}
}

// createStoppedPod creates the stopped copy of the serving pod from its full object. The name is
// deterministic: a create repeated after a crash finds the copy it made (AlreadyExists).
func (r *WorkspaceReconciler) createStoppedPod(ctx context.Context, a lifecycle.Action) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	var full corev1.Pod
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(a.Pod), &full); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read pod %s to stop it: %w", a.Pod.Name, err)
	}
	if full.UID != a.Pod.UID || (full.DeletionTimestamp != nil) != a.Evicted || (a.Evicted && (!lifecycle.Disrupted(&full) || lifecycle.OwnerDeleted(&full))) {
		// Gone, replaced, or (an eviction's copy) not being deleted by Kubernetes for a
		// disruption as the API server has it, or its owner's delete marked it since the
		// cache showed it (nogoo9/deleted-at): re-plan.
		return false, nil
	}
	if full.Annotations[workspace.AnnStopRequested] == "" && !a.NodeLost && !a.Evicted {
		// The intent was withdrawn since the cache showed it (a start): nothing to stop.
		return false, nil
	}
	pod, err := lifecycle.StoppedPod(&full, a.Name, a.Set)
	if err != nil {
		return false, err
	}
	switch err := r.Client.Create(ctx, pod); {
	case err == nil:
		if why, err := r.stopUndone(ctx, &full, a.NodeLost, a.Evicted); err != nil || why != "" {
			if err == nil {
				log.Info(why, "pod", klog.KObj(pod))
				err = r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
				if err == nil || apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			return false, fmt.Errorf("check pod %s after creating stopped pod %s: %w", full.Name, pod.Name, err)
		}
		log.Info("Created stopped pod", "pod", klog.KObj(pod), "from", klog.KObj(&full))
		r.lifecycleEvent(a)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return true, nil // an earlier attempt made it; the next pass deletes the running pod
	default:
		return false, fmt.Errorf("create stopped pod %s: %w", pod.Name, err)
	}
}

// stopUndone reads running, the pod a stopped copy was just made from, from the API server and
// says why the copy must go ("" when it stays):
//   - the owner deleted the workspace while this pass still saw it: the copy must not outlive it
//     (the delete lists again after its own writes);
//   - a start withdrew the stop intent after the read before the create: the front end lifts it
//     from the pod, then lists the pods for copies that carry it, and a copy made after that list
//     keeps an intent nobody withdraws (the next pass would copy it back and stop the workspace).
//
// A copy that replaces the pod of a lost node (nodeLost) stays when that pod is gone: the pod GC
// removes such a pod with grace period 0 at any time, and the copy is then all the workspace has.
// A person's delete is graceful, and a pod bound to a gone node waits, being deleted, for the GC.
//
// A copy of a pod Kubernetes is deleting for a disruption (evicted: createStoppedPod checked
// DisruptionTarget=True on the pod it copied) stays while that pod is being deleted, and when it
// is gone: that delete is the eviction, not the owner's. So does a stop's copy whose pod a drain
// evicted after this pass's read (read in full: deletedByOwner is false): the eviction would
// make the same copy, and removing it lost the workspace when the evicted pod went first.
func (r *WorkspaceReconciler) stopUndone(ctx context.Context, running *corev1.Pod, nodeLost, evicted bool) (string, error) {
	const deleted = "Workspace deleted during its stop; removing the stopped pod"
	live := podMeta()
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(running), live); {
	case apierrors.IsNotFound(err) && (nodeLost || evicted):
		return "", nil
	case apierrors.IsNotFound(err):
		return deleted, nil
	case err != nil:
		return "", err
	}
	if live.UID == running.UID && live.DeletionTimestamp != nil && !evicted {
		// Being deleted: the owner's delete, or a drain's eviction that came after this pass's
		// read. The metadata read has no status: read the pod in full for its condition.
		var full corev1.Pod
		switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(running), &full); {
		case apierrors.IsNotFound(err):
			return deleted, nil
		case err != nil:
			return "", err
		case full.UID == running.UID && !deletedByOwner(&full):
			return "", nil // the eviction's copy is this copy: it stays, as createStoppedPod's
		}
	}
	switch {
	case live.UID == running.UID && live.DeletionTimestamp != nil && evicted:
		return "", nil
	case live.DeletionTimestamp != nil || live.UID != running.UID:
		return deleted, nil
	case !nodeLost && !evicted && live.Annotations[workspace.AnnStopRequested] == "":
		return "Workspace started during its stop; removing the stopped pod", nil
	}
	return "", nil
}

// createStartedPod starts a stopped workspace on the template's latest version: a pod built from
// the template with the stopped pod's identity, named deterministically.
func (r *WorkspaceReconciler) createStartedPod(ctx context.Context, a lifecycle.Action, tmpl *templates.Template, now time.Time) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	stopped := a.Pod
	// The name derives from the stopped pod's UID alone (lifecycle.StartedPodName), so a start
	// on the latest version repeated from a stale cache fails with AlreadyExists whatever the
	// version. A start that happened otherwise (the gate removed: the workspace started on its own
	// version) has no such pod: the API server says whether the pod is still stopped.
	var live corev1.Pod
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(stopped), &live); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read pod %s to start it: %w", stopped.Name, err)
	}
	if live.DeletionTimestamp != nil || live.UID != stopped.UID || !workspace.IsStoppedPod(&live) {
		log.V(1).Info("Stopped pod changed before its start; re-planning", "pod", klog.KObj(stopped))
		return false, nil
	}
	pod, claims, err := r.Opts.BuildPod(tmpl, stopped, a.Name)
	if err != nil {
		// Never leave the workspace without a way back: start it on its own version instead.
		return r.startOnOwnVersion(ctx, stopped, fmt.Sprintf("Template %s version %s does not render for workspace %s (%v)", tmpl.Name, tmpl.Version, workspace.ID(stopped), err), "fix the template, then upgrade the workspace", now)
	}
	pod.Name, pod.Namespace, pod.GenerateName = a.Name, stopped.Namespace, ""
	upgrade.PreserveIdentity(pod, stopped)
	for k, v := range a.Set {
		pod.Annotations[k] = v
	}
	mounted := map[string]bool{}
	for _, v := range live.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mounted[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	for _, c := range claims {
		if mounted[c.Name] {
			// The stopped pod mounts it: the workspace's own (a mounted claim cannot be
			// removed, only marked for deletion), no round trip to learn it.
			continue
		}
		c.Namespace = stopped.Namespace
		switch taken, err := r.createClaim(ctx, c, workspace.Owner(stopped), workspace.ID(stopped)); {
		case taken:
			return r.startOnOwnVersion(ctx, stopped, fmt.Sprintf("Claim %s that version %s of template %s adds for workspace %s already exists and belongs to another workspace", c.Name, tmpl.Version, tmpl.Name, workspace.ID(stopped)), "spawn this workspace under another id, or ask an administrator to look at the claim", now)
		case err == nil:
		case permanent(err):
			return r.startOnOwnVersion(ctx, stopped, fmt.Sprintf("The API server refused claim %s of version %s of template %s for workspace %s (%v)", c.Name, tmpl.Version, tmpl.Name, workspace.ID(stopped), err), "fix the template, then upgrade the workspace", now)
		default:
			return false, fmt.Errorf("create claim %s for started pod %s: %w", c.Name, pod.Name, err)
		}
	}
	switch err := r.Client.Create(ctx, pod); {
	case err == nil:
		// deletedBeforeCreate waits for the cache to show the new pod: the next pass, which
		// may come with a newer template version, plans from a view that has it.
		if gone, err := r.deletedBeforeCreate(ctx, pod, stopped); err != nil || gone {
			if err == nil {
				log.Info("Workspace deleted during its start; removing the started pod", "pod", klog.KObj(pod))
				err = r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
				if err == nil || apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			return false, fmt.Errorf("check pod %s after creating started pod %s: %w", stopped.Name, pod.Name, err)
		}
		log.Info("Created started pod", "pod", klog.KObj(pod), "from", klog.KObj(stopped), "version", tmpl.Version)
		r.lifecycleEvent(a)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return true, nil
	case permanent(err):
		// Admission or Pod Security refuses the new version for this workspace: retrying will
		// not heal it, and the workspace must not stay stopped for it.
		return r.startOnOwnVersion(ctx, stopped, fmt.Sprintf("The API server refused pod %s of version %s of template %s for workspace %s (%v)", pod.Name, tmpl.Version, tmpl.Name, workspace.ID(stopped), err), "fix the template, then upgrade the workspace", now)
	default:
		return false, fmt.Errorf("create started pod %s: %w", pod.Name, err)
	}
}

// startOnOwnVersion starts the stopped pod on its own version (the gate removed) when a start on
// the template's latest version cannot be made (why), and says so in a Warning Event once the
// start happened, with what to do about it (fix).
func (r *WorkspaceReconciler) startOnOwnVersion(ctx context.Context, stopped *corev1.Pod, why, fix string, now time.Time) (bool, error) {
	done, err := r.ungate(ctx, stopped, now)
	if err != nil || !done {
		return done, err
	}
	lifecycleTotal.WithLabelValues("start").Inc()
	ctrl.LoggerFrom(ctx).Info("Started workspace on its own version", "pod", klog.KObj(stopped), "reason", why)
	r.Recorder.Eventf(stopped, corev1.EventTypeWarning, lifecycle.ReasonStarting,
		"%s; started it on its version %s instead: %s.", why, workspace.TemplateVersion(stopped), fix)
	return true, nil
}

// ungate removes the stop gate (keeping any other gate) and the stop bookkeeping, and stamps
// nogoo9/started-at with now, on the pod version the planner saw: a stop intent written meanwhile
// wins. The stamp is the start the idle culler counts (lifecycle.IdleSince): the pod's creation
// is the stop's, and the kubelet's status says nothing until the pod is scheduled.
func (r *WorkspaceReconciler) ungate(ctx context.Context, pod *corev1.Pod, now time.Time) (bool, error) {
	gates := []corev1.PodSchedulingGate{}
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name != workspace.GateStopped {
			gates = append(gates, g)
		}
	}
	meta := map[string]any{"uid": pod.UID, "annotations": map[string]any{
		workspace.AnnStoppedAt: nil, workspace.AnnStoppedFromUID: nil,
		workspace.AnnStartedAt: now.UTC().Format(time.RFC3339),
	}}
	if pod.ResourceVersion != "" {
		meta["resourceVersion"] = pod.ResourceVersion
	}
	return r.rawPatch(ctx, pod, map[string]any{"metadata": meta, "spec": map[string]any{"schedulingGates": gates}})
}

// patchAnnotationsAt sets (and removes) annotations on the pod version the planner saw
// (resourceVersion and UID preconditions): a cull never overrides activity recorded since, nor a
// start, and a value carried from another pod never overrides a write on this one.
func (r *WorkspaceReconciler) patchAnnotationsAt(ctx context.Context, pod *corev1.Pod, set map[string]string, remove ...string) (bool, error) {
	ann := make(map[string]any, len(set)+len(remove))
	for _, k := range remove {
		ann[k] = nil
	}
	for k, v := range set {
		ann[k] = v
	}
	meta := map[string]any{"uid": pod.UID, "annotations": ann}
	if pod.ResourceVersion != "" {
		meta["resourceVersion"] = pod.ResourceVersion
	}
	return r.rawPatch(ctx, pod, map[string]any{"metadata": meta})
}

// rawPatch merge-patches pod. done is false, with no error, when a precondition in the patch
// (metadata.uid, metadata.resourceVersion) says the pod is gone, was replaced or changed since.
func (r *WorkspaceReconciler) rawPatch(ctx context.Context, pod *corev1.Pod, patch map[string]any) (bool, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return false, err
	}
	target := &corev1.Pod{ObjectMeta: ctrlObjectMeta(client.ObjectKeyFromObject(pod))}
	err = r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("patch pod %s: %w", pod.Name, err)
	}
	return true, nil
}
