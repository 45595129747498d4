package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// PhaseControllerName names the phase controller, its Events' reporting controller and its logs.
const PhaseControllerName = "workspace-phase"

// allPhases lists every phase, so the gauge exports a 0 for each from the start.
var allPhases = []workspace.PhaseName{
	workspace.PhaseScheduling, workspace.PhaseInitializing, workspace.PhaseReady, workspace.PhaseUpgrading,
	workspace.PhaseUnavailable, workspace.PhaseFailed, workspace.PhaseTerminating, workspace.PhaseStopped,
}

// workspacesGauge is nogoo9_workspaces{phase}: workspaces per phase, as seen by the leader.
var workspacesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "nogoo9_workspaces",
	Help: "Workspaces per phase (Scheduling, Initializing, Ready, Upgrading, Unavailable, Failed, Terminating, Stopped), as seen by the elected controller.",
}, []string{"phase"})

func init() {
	metrics.Registry.MustRegister(workspacesGauge)
}

// PhaseReconciler computes each workspace's phase from the cached pods, records every phase
// transition as one Event on the workspace's active pod, and keeps nogoo9_workspaces{phase}.
//
// It remembers the last phase per workspace in memory only: phases are derived from pods, so
// nothing is lost on a restart except the "previous phase". After a restart or a leader change
// the first sighting of a workspace created before the reconciler started sets the gauge but
// emits no Event (otherwise every handover would repeat one Event per workspace); a workspace
// created since then gets its first Event as usual. A transition that happened while no leader
// ran is thus not recorded as an Event; the current phase is always in the API.
type PhaseReconciler struct {
	// Reader lists workspace pods; the manager's cache in production.
	Reader client.Reader
	// Recorder emits core/v1 Events. The core recorder is used on purpose, not the events.k8s.io
	// one: the latter writes the third and later occurrences of an isomorphic event (same pod,
	// reason) only every 30 minutes, so "Ready again after maintenance" would stay invisible;
	// the core recorder patches the count at once and still rate-limits per pod.
	Recorder record.EventRecorder
	// Gauge is nogoo9_workspaces by default.
	Gauge *prometheus.GaugeVec
	// Now is time.Now by default.
	Now func() time.Time

	mu      sync.Mutex
	started time.Time
	last    map[types.NamespacedName]workspace.PhaseName
}

// SetupPhaseReconciler adds the phase controller to mgr. It runs on the elected leader only.
func SetupPhaseReconciler(mgr ctrl.Manager) error {
	r := &PhaseReconciler{
		Reader:   mgr.GetCache(),
		Recorder: mgr.GetEventRecorderFor(PhaseControllerName), //nolint:staticcheck // see PhaseReconciler.Recorder
	}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers r with mgr, watching workspace pods and reconciling per workspace
// (namespace + workspace id).
func (r *PhaseReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.init()
	if err := podcache.AddWorkspaceIDIndex(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(PhaseControllerName).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(WorkspaceRequest)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// WorkspaceRequest maps a workspace pod to the reconcile request of its workspace: namespace and
// workspace id. Other pods map to nothing.
func WorkspaceRequest(_ context.Context, obj client.Object) []reconcile.Request {
	if obj == nil || !workspace.IsWorkspaceObject(obj) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: workspace.IDOf(obj)}}}
}

func (r *PhaseReconciler) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Gauge == nil {
		r.Gauge = workspacesGauge
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.last == nil {
		r.last = make(map[types.NamespacedName]workspace.PhaseName)
		r.started = r.Now()
		for _, p := range allPhases {
			r.Gauge.WithLabelValues(string(p)).Add(0)
		}
	}
}

// workspacePods is what the phase controller reads a workspace's pods through when its Reader
// offers it (nogoo9's cache, podcache.Cache.ReadWorkspace): the pods materialised into reused
// memory for the pass only, instead of a pod struct and two maps per pod and pass, as a List
// makes them. The phase controller passes once per pod event of a workspace, about six times per
// workspace in a bulk upgrade.
type workspacePods interface {
	ReadWorkspace(ctx context.Context, ns, id string, fn func(pods []*corev1.Pod) error) error
}

// nogoo9's cache offers it: a change of its signature must not send the phase controller back to
// Lists silently.
var _ workspacePods = (*podcache.Cache)(nil)

// Reconcile observes one workspace's pods, derives its phase and records a transition.
func (r *PhaseReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.init()
	if wr, ok := r.Reader.(workspacePods); ok {
		// The pass keeps nothing of the pods: the phase and the gauge are values, and the Event's
		// object reference is taken before Eventf returns.
		err := wr.ReadWorkspace(ctx, req.Namespace, req.Name, func(pods []*corev1.Pod) error {
			r.observed(ctx, req, pods)
			return nil
		})
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("list pods of workspace %s: %w", req, err)
		}
		return reconcile.Result{}, nil
	}
	var list corev1.PodList
	// The workspace-id index: a label selector would scan every pod in the namespace per pass.
	// No deep copy: this reconciler only reads the pods (TestPhaseReconcilerNeverMutatesTheCache),
	// and its first pass visits every workspace at start (docs/performance.md, "Start-up garbage").
	if err := r.Reader.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{podcache.IndexWorkspaceID: req.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("list pods of workspace %s: %w", req, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	r.observed(ctx, req, pods)
	return reconcile.Result{}, nil
}

// observed derives the phase of workspace req from its pods (read only; reordered newest first
// in place) and records a transition: the gauge, and an Event unless the upgrade controller's
// Events tell it. No pods: the workspace is forgotten.
func (r *PhaseReconciler) observed(ctx context.Context, req reconcile.Request, pods []*corev1.Pod) {
	log := ctrl.LoggerFrom(ctx)
	if len(pods) == 0 {
		r.forget(req.NamespacedName)
		return
	}
	workspace.NewestFirst(pods)
	now := r.Now()
	st := workspace.Phase(pods, now)

	prev, seen, announce := r.record(req.NamespacedName, st.Phase, pods[0].CreationTimestamp.Time)
	if seen && prev == st.Phase {
		return
	}
	log.V(1).Info("workspace phase changed", "workspace", req, "from", prev, "to", st.Phase, "reason", st.Reason)
	if !announce || upgradeSaysIt(prev, st.Phase) {
		return
	}
	active := workspace.Active(pods)
	eventType := corev1.EventTypeNormal
	if st.Phase == workspace.PhaseFailed || st.Phase == workspace.PhaseUnavailable {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(active, eventType, "Phase"+string(st.Phase),
		"workspace %s is %s: %s: %s", req, st.Phase, st.Reason, st.Message)
	log.V(1).Info("recorded phase event", "pod", klog.KObj(active), "phase", st.Phase)
}

// record stores phase as key's current phase and moves the gauge. It returns the previous phase,
// whether the workspace had been seen, and whether the change deserves an Event (see the type's
// comment on restarts).
func (r *PhaseReconciler) record(key types.NamespacedName, phase workspace.PhaseName, newest time.Time) (prev workspace.PhaseName, seen, announce bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, seen = r.last[key]
	if seen && prev == phase {
		return prev, true, false
	}
	if seen {
		r.Gauge.WithLabelValues(string(prev)).Dec()
	}
	r.Gauge.WithLabelValues(string(phase)).Inc()
	r.last[key] = phase
	// Creation timestamps have whole seconds: a pod created in the second the reconciler
	// started counts as new.
	return prev, seen, seen || !newest.Before(r.started.Truncate(time.Second))
}

// forget drops a workspace whose pods are all gone.
func (r *PhaseReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.last[key]; ok {
		r.Gauge.WithLabelValues(string(prev)).Dec()
		delete(r.last, key)
	}
}

// upgradeSaysIt reports whether a phase change is already told by the upgrade controller's own
// Events on the same pods, so it gets no Phase Event of its own: entering Upgrading (the upgrade
// controller records UpgradeStarted, UpgradeRequested while queued, or UpgradeFailed when it
// cannot start) and Upgrading back to Ready (UpgradeSucceeded, or UpgradeFailed with the old pod
// serving). A bulk upgrade then writes two Events per workspace instead of four (docs/upgrades.md,
// "Events"). Every other change out of Upgrading (Failed, Unavailable, ...) keeps its Event.
func upgradeSaysIt(prev, next workspace.PhaseName) bool {
	return next == workspace.PhaseUpgrading || (prev == workspace.PhaseUpgrading && next == workspace.PhaseReady)
}
