package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// UpgradeControllerName names the upgrade controller, its Events' source and its logs.
const UpgradeControllerName = "workspace-upgrade"

// TemplateSource is what the upgrade controller needs of the template registry
// (*templates.Registry and its read-only view templates.Shared satisfy it; tests supply fixed
// templates).
type TemplateSource interface {
	// Get returns the latest valid version of the template at key (workspace.TemplateKey: the
	// name for nogoo9's namespace, "<ns>/<name>" for a team template). The value may be shared
	// with every other caller (templates.Shared): the controllers only read it.
	Get(key string) (*templates.Template, bool)
	// Subscribe calls fn with a template's key whenever it changes.
	Subscribe(fn func(key string))
}

// deletedMeanwhile reads old from the API server and reports whether it is gone, being deleted by
// a delete of its workspace (deletedByOwner), or replaced by another pod of the same name since
// the cache showed it.
func (r *WorkspaceReconciler) deletedMeanwhile(ctx context.Context, old *corev1.Pod) (bool, error) {
	var live corev1.Pod
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(old), &live); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return deletedByOwner(&live) || live.UID != old.UID, nil
}

// deletedByOwner reports whether p is being deleted as its workspace is: by its owner, a person's
// kubectl delete, anything but Kubernetes deleting it for a disruption (lifecycle.Disrupted: a
// drain's eviction, the taint manager, preemption, the pod GC), which is no delete of the
// workspace, unless the owner's delete met the pod so (lifecycle.OwnerDeleted). Before, any
// deletion counted: an eviction of the old pod right after an upgrade's create read as the
// owner's delete, and the new pod, the one the workspace had left, was deleted with it.
func deletedByOwner(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && (!lifecycle.Disrupted(p) || lifecycle.OwnerDeleted(p))
}

// evictedRollback is the upgrade planner's move for a workspace none of whose pods is live, when
// the pod the lifecycle planner would copy for an eviction (lifecycle.Plan's CreateStoppedPod with
// Evicted: it alone decides what is an eviction, what the owner's delete, and whom to trust) is a
// Recreate upgrade's new pod that was never Ready (upgrade.PlanEvicted): that pod is rolled back,
// not copied. The copy would run the new version without the upgrade's record, so without a
// rollback; the rollback pod, once it exists, is live, and the lifecycle planner copies nothing
// more. ok is false otherwise: the lifecycle planner has the workspace.
func evictedRollback(pods []*corev1.Pod, now time.Time, cfg upgrade.Config) (upgrade.Move, bool) {
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			return upgrade.Move{}, false
		}
	}
	for _, a := range lifecycle.Plan(pods, lifecycle.Target{}, now, lifecycle.Config{}).Actions {
		if a.Kind == lifecycle.CreateStoppedPod && a.Evicted {
			return upgrade.PlanEvicted(a.Pod, now, cfg)
		}
	}
	return upgrade.Move{}, false
}

// templatesSynced reports whether src has loaded its initial set of templates. A source that cannot
// tell (a fixed set in tests) counts as synced.
func templatesSynced(src TemplateSource) bool {
	if s, ok := src.(interface{ Synced() bool }); ok {
		return s.Synced()
	}
	return true
}

// PodBuilder renders template t for the workspace of old (same identity) as a pod named name, with
// the PVCs it mounts. The default is spawner.BuildPod with spawner.IdentityFromPod(old).
type PodBuilder func(t *templates.Template, old *corev1.Pod, name string) (*corev1.Pod, []*corev1.PersistentVolumeClaim, error)

// LoadKeys reads the integrity key file (upgrade.ParseKeyFile); "" gives nil (a random key is
// used). Mount it from a Secret: the kubelet reads it, so nogoo9 needs no access to Secrets.
func LoadKeys(path string) (*upgrade.Keyring, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --integrity-key-file: %w", err)
	}
	k, err := upgrade.ParseKeyFile(data)
	if err != nil {
		return nil, fmt.Errorf("--integrity-key-file %s: %w", path, err)
	}
	return k, nil
}

// UpgradeOptions tunes the upgrade controller; main.go fills it from flags.
type UpgradeOptions struct {
	// Workers is the number of workspaces reconciled at once (--upgrade-workers, default 128).
	Workers int
	// MaxPendingUpgrades caps the upgrades whose new pod waits for a node (--max-pending-upgrades,
	// default 200 there): bulk upgrades go as fast as the cluster places the new pods, and stop
	// asking for more once that many have found no room. Zero or negative: no cap.
	MaxPendingUpgrades int
	// MaxConcurrentUpgrades caps the workspaces with an upgrade in flight
	// (--max-concurrent-upgrades, default 0 there); zero or negative: no cap.
	MaxConcurrentUpgrades int
	// Timeout is the upgrade deadline (--upgrade-timeout, default 10m).
	Timeout time.Duration
	// Now is the clock (time.Now by default); tests move it to pass the deadline.
	Now func() time.Time
	// BuildPod renders the upgraded pod (spawner.BuildPod by default).
	BuildPod PodBuilder
	// Pods is the list of every cached workspace pod (podcache.NewEvery) that the /metrics
	// collector and the concurrency gate read; main.go shares it with the update-policy runner.
	// Nil: one of its own, on the manager's cache.
	Pods *podcache.Every
	// Name overrides UpgradeControllerName (tests that run two managers in one process).
	Name string
	// Keys sign and verify the records of Recreate upgrades (--integrity-key-file). Without
	// them a random key is used: records written before a restart cannot be verified, so such
	// an upgrade fails (UpgradeRecordNotVerified) while the old pod still holds its volume, and
	// otherwise is not rolled back automatically.
	Keys *upgrade.Keyring
	// Lifecycle tunes stop, start and idle culling.
	Lifecycle LifecycleOptions
	// History reads kept earlier template versions for a rollback to one (nogoo9/target-version);
	// nil: such a request fails with TemplateVersionNotKept.
	History HistorySource
}

func (o *UpgradeOptions) defaults() {
	if o.Workers <= 0 {
		o.Workers = 128
	}
	if o.Timeout <= 0 {
		o.Timeout = upgrade.DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BuildPod == nil {
		o.BuildPod = spawnerBuild
	}
	if o.Name == "" {
		o.Name = UpgradeControllerName
	}
	if o.Keys == nil {
		o.Keys = upgrade.RandomKeyring()
	}
}

// spawnerBuild is the production PodBuilder.
func spawnerBuild(t *templates.Template, old *corev1.Pod, name string) (*corev1.Pod, []*corev1.PersistentVolumeClaim, error) {
	id, err := spawner.IdentityFromPod(old)
	if err != nil {
		return nil, nil, err
	}
	return spawner.BuildPod(t, id, name)
}

// WorkspaceReconciler is the upgrade controller: per workspace (namespace + workspace id) it
// observes the pods and claims from the cache, asks upgrade.Plan for the next move, applies it and
// returns. It keeps no state that matters across passes except the concurrency gate's
// reservations (the cache lags its own creates) and which waiting workspaces to wake first.
type WorkspaceReconciler struct {
	// Client writes (create, delete, merge-patch) and Reader is the cache it observes.
	Client client.Client
	Reader client.Reader
	// APIReader reads full pods (the cache strips them) for rollback specs and name conflicts.
	APIReader client.Reader
	Templates TemplateSource
	Recorder  record.EventRecorder
	Opts      UpgradeOptions

	gate  *gate
	every *podcache.Every // every cached workspace pod, for the /metrics collector
	lag   templateLag
	wake  chan event.GenericEvent
	held  heldEvents
	// deleted are the pods this process has deleted (by UID), until the cache shows it.
	deleted deletedPods
	// seen tells when the cache has caught up with a pod this process created (nil: never
	// asked; the check after a create then reads the API server).
	seen *podcache.Seen
	// nodes are the names of the Nodes the cache holds (nil: none known; the node check then
	// looks each one up in the cache).
	nodes *nodeNames
}

// SetupWorkspaceReconciler adds the upgrade controller to mgr (leader only) with the template
// source reg.
func SetupWorkspaceReconciler(mgr ctrl.Manager, reg TemplateSource, opts UpgradeOptions) error {
	opts.defaults()
	writer, err := newPodDeletes(mgr.GetClient(), mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	r := &WorkspaceReconciler{
		Client:    writer,
		Reader:    mgr.GetCache(),
		APIReader: mgr.GetAPIReader(),
		Templates: reg,
		Recorder:  mgr.GetEventRecorderFor(opts.Name), //nolint:staticcheck // core/v1 Events, as the phase controller (see PhaseReconciler.Recorder)
		Opts:      opts,
	}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers r: pod and PVC events map to their workspace, template changes to
// every workspace of the template, freed concurrency slots to waiting workspaces.
func (r *WorkspaceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Opts.defaults()
	if err := podcache.AddWorkspaceIDIndex(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, indexNodeName, podNodeName); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	r.wake = make(chan event.GenericEvent, 1024)
	r.gate = newGate(r.Opts.MaxConcurrentUpgrades, r.Opts.MaxPendingUpgrades, r.Reader, r.wake)
	every := r.Opts.Pods
	var err error
	if every == nil {
		if every, err = podcache.NewEvery(context.Background(), mgr.GetCache()); err != nil {
			return err
		}
	}
	r.every = every
	r.gate.cached = everyUpgrading(every)
	if r.seen, err = podcache.WatchSeen(context.Background(), mgr.GetCache()); err != nil {
		return err
	}
	if r.nodes, err = watchNodeNames(context.Background(), mgr.GetCache(), r.nodeGone); err != nil {
		return err
	}
	registerCollector(r)
	r.Templates.Subscribe(r.templateChanged)
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.Opts.Name).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(WorkspaceRequest)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(claimRequest)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.nodeRequests), builder.OnlyMetadata,
			// Only a deletion matters: heartbeats would wake every workspace every few seconds.
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(event.CreateEvent) bool { return false },
				UpdateFunc:  func(event.UpdateEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		WatchesRawSource(source.Channel(r.wake, handler.EnqueueRequestsFromMapFunc(keyRequest))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Opts.Workers, RateLimiter: retryLimiter()}).
		Complete(r)
}

// maxRetryDelay caps the back-off of a workspace whose reconcile keeps failing. controller-runtime's
// default doubles up to 1000 s, so after an API-server outage of 20 s (a failure every few
// milliseconds, then seconds) a workspace could wait minutes for its next try although nothing
// else changes to wake it (docs/reliability.md).
const maxRetryDelay = 15 * time.Second

// retryLimiter is controller-runtime's default rate limiter with the per-item back-off capped at
// maxRetryDelay.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// claimRequest maps a workspace PVC (labelled with its workspace id by the spawner) to its
// workspace: its access modes decide the strategy.
func claimRequest(_ context.Context, obj client.Object) []reconcile.Request {
	id := obj.GetLabels()[workspace.LabelWorkspaceID]
	if id == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: id}}}
}

// keyRequest maps the wake-up objects (namespace + workspace id as name) to their request.
func keyRequest(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
}

// templateChanged enqueues every workspace of the template at key (a team template's are in its
// namespace only; a workspace of another template of the same name is woken for nothing and
// finds nothing to do). On a replica that is not the leader nobody reads the channel: the sends
// give up after a minute (a new leader reconciles every workspace when it starts anyway).
func (r *WorkspaceReconciler) templateChanged(key string) {
	ns, name := workspace.SplitTemplateKey(key)
	go func() {
		timeout := time.NewTimer(time.Minute)
		defer timeout.Stop()
		var list corev1.PodList
		if err := r.Reader.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelTemplate: name}, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.Log.WithName(r.Opts.Name).Error(err, "List workspaces of a changed template", "template", name)
			return
		}
		seen := map[types.NamespacedName]bool{}
		for i := range list.Items {
			p := &list.Items[i]
			k := types.NamespacedName{Namespace: p.Namespace, Name: workspace.ID(p)}
			if workspace.IsWorkspacePod(p) && !seen[k] {
				seen[k] = true
				select {
				case r.wake <- keyEvent(k):
				case <-timeout.C:
					return
				}
			}
		}
	}()
}

func keyEvent(k types.NamespacedName) event.GenericEvent {
	return event.GenericEvent{Object: &corev1.Pod{ObjectMeta: ctrlObjectMeta(k)}}
}

// Reconcile observes one workspace, plans its next move and applies it.
func (r *WorkspaceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	// now is read before the pods are: a pass decides on state the cache showed at now or later,
	// so a deadline it finds passed is judged on what the pods showed after it (read after, the
	// pass could fail an upgrade on a view older than the deadline, without the pod's last status).
	now := r.Opts.Now()
	obs, tmplName, err := r.observe(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.gate.observed(req.NamespacedName, obs.Pods)
	if len(obs.Pods) == 0 {
		r.gate.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	if name, wait, ok := r.gate.awaiting(req.NamespacedName, now); ok {
		// The cache lags this process's own create (a second event for the workspace came in
		// while the pass that created the pod ran): wait for the pod's watch event rather than
		// plan the same start again (the ReplicaSet controller's expectations).
		log.V(1).Info("Waiting for the cache to show the upgraded pod", "pod", name)
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	target := upgrade.Target{Name: tmplName}
	tmpl, found, done, err := r.resolveTemplate(ctx, req.NamespacedName, obs, tmplName, now)
	if err != nil || done {
		return reconcile.Result{}, err
	}
	if !found && !templatesSynced(r.Templates) {
		// Until the registry has loaded every template, "not found" means "not loaded yet": a plan
		// made now would fail a pending upgrade with TemplateNotFound. Come back once it has.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if found {
		target.Found, target.Version = true, tmpl.Version
	}
	cfg := upgrade.Config{Timeout: r.Opts.Timeout, Keys: r.Opts.Keys}
	// A Recreate upgrade's new pod that Kubernetes evicts before it is Ready is the upgrade's to
	// end (a rollback from its record), not the lifecycle planner's to copy (evictedRollback).
	move, evicted := evictedRollback(obs.Pods, now, cfg)
	var lres reconcile.Result
	if !evicted {
		// Stop, start and culling first: a stopped or stopping workspace is moved by the
		// lifecycle planner alone, in the same pass order, so the two planners never race on
		// one workspace.
		var lifeTmpl *templates.Template
		if found {
			lifeTmpl = tmpl
		}
		var held bool
		held, lres, err = r.reconcileLifecycle(ctx, req.NamespacedName, obs.Pods, lifeTmpl, now)
		if err != nil || held {
			return lres, err
		}
		move = upgrade.Plan(obs, target, now, cfg)
	}
	if found {
		switch behind, err := r.templateBehind(ctx, req.NamespacedName, move, tmpl, now); {
		case err != nil:
			return reconcile.Result{}, err
		case behind:
			// The template cache has not seen the version the API server has: wait for it
			// (its change wakes every workspace of the template) rather than drop the intent.
			return reconcile.Result{RequeueAfter: 500 * time.Millisecond}, nil
		}
	}
	if len(move.Actions) > 0 {
		log.V(1).Info("Planned move", "state", move.State, "actions", len(move.Actions))
	}
	res := reconcile.Result{}
	if move.RequeueAfter > 0 {
		// A little past the deadline, so the next pass sees it passed.
		res.RequeueAfter = move.RequeueAfter + time.Second
	}
	if lres.RequeueAfter > 0 && (res.RequeueAfter == 0 || lres.RequeueAfter < res.RequeueAfter) {
		res.RequeueAfter = lres.RequeueAfter // the idle deadline
	}
	mv := &moveState{claims: obs.Claims}
	for _, a := range move.Actions {
		wait, err := r.apply(ctx, req.NamespacedName, mv, a, tmpl, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		if wait == stopMove {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		if wait == endMove {
			return res, nil
		}
		if wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	return res, nil
}

// observe lists the workspace's pods and the claims they mount from the cache.
//
// It reads without deep copies (client.UnsafeDisableDeepCopy): the pods' and claims' slices,
// pointers and (for claims) maps are the cache's own, so the whole pass, the planners and the
// apply step included, only reads what it observed. Every object the pass writes or sends is
// built anew (spawner.BuildPod, upgrade.RollbackPod, lifecycle.StoppedPod from a read of the API
// server) or a fresh patch target; TestUpgradeReconcilerNeverMutatesTheCache holds it to that.
// A copy of each pod per pass was about a tenth of nogoo9's allocated bytes in bulk upgrades.
func (r *WorkspaceReconciler) observe(ctx context.Context, key types.NamespacedName) (upgrade.Observed, string, error) {
	var list corev1.PodList
	if err := r.Reader.List(ctx, &list, client.InNamespace(key.Namespace), client.MatchingFields{podcache.IndexWorkspaceID: key.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return upgrade.Observed{}, "", fmt.Errorf("list pods of workspace %s: %w", key, err)
	}
	obs := upgrade.Observed{Claims: map[string]*corev1.PersistentVolumeClaim{}}
	tmplName := ""
	for i := range list.Items {
		p := &list.Items[i]
		if !workspace.IsWorkspacePod(p) {
			continue
		}
		obs.Pods = append(obs.Pods, p)
		if tmplName == "" || p.DeletionTimestamp == nil {
			if p.Labels[workspace.LabelTemplate] != "" {
				tmplName = workspace.TemplateKey(p) // where the template was found at spawn
			}
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			name := v.PersistentVolumeClaim.ClaimName
			if _, done := obs.Claims[name]; done {
				continue
			}
			var c corev1.PersistentVolumeClaim
			switch err := r.Reader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &c, client.UnsafeDisableDeepCopy); {
			case err == nil:
				obs.Claims[name] = &c
			case apierrors.IsNotFound(err):
				// Unknown claims are taken as single-writer by the planner.
			default:
				return upgrade.Observed{}, "", fmt.Errorf("get claim %s/%s of workspace %s: %w", key.Namespace, name, key.Name, err)
			}
		}
	}
	return obs, tmplName, nil
}

// stopMove, returned by apply, ends the move early: its remaining actions no longer hold; look
// again in a second. endMove ends it too, with nothing to wait for: the watch brings the
// workspace back (e.g. a create that did not happen, whose failure was recorded instead).
const (
	stopMove = time.Duration(-1)
	endMove  = time.Duration(-2)
)

// moveState is what one move's earlier actions tell its later ones: the pods this move created
// (or found already created by an earlier attempt of the same upgrade), by name, and the create
// whose check of the old pod is left to the old pod's delete later in the same move (unchecked).
type moveState struct {
	created map[string]*corev1.Pod
	// claims are the claims the pass observed (upgrade.Observed.Claims): the ones the workspace's
	// pods mount, by name, as the cache shows them.
	claims map[string]*corev1.PersistentVolumeClaim
	// unchecked is set when this move has just created an upgraded pod (a Recreate start) and
	// not yet made sure that the pod it replaces was not deleted meanwhile: the delete of that
	// old pod, next in the move and preconditioned on the UID and resourceVersion the cache
	// shows, is that check (see deletePod).
	unchecked *uncheckedCreate
}

// uncheckedCreate is an upgraded pod this move created, the old pod it replaces, and the Event
// to record once the old pod is known to have been live after the create.
type uncheckedCreate struct {
	pod, old *corev1.Pod
	started  upgrade.Action
}

func (m *moveState) made(p *corev1.Pod) {
	if m.created == nil {
		m.created = map[string]*corev1.Pod{}
	}
	m.created[p.Name] = p
}

// apply performs one action. wait > 0 asks to stop the move and come back then (no slot free);
// stopMove asks to stop it and re-plan; endMove to stop it.
func (r *WorkspaceReconciler) apply(ctx context.Context, key types.NamespacedName, mv *moveState, a upgrade.Action, tmpl *templates.Template, now time.Time) (time.Duration, error) {
	switch a.Kind {
	case upgrade.CreateUpgradePod:
		return r.createUpgradePod(ctx, key, mv, a, tmpl, now)
	case upgrade.CreateRollbackPod:
		return 0, r.createRollbackPod(ctx, key, a, now)
	case upgrade.DeletePod:
		return r.deletePod(ctx, key, mv, a)
	case upgrade.PatchPod:
		done, err := r.patchPod(ctx, a.Pod, a.Annotations, a.Remove)
		if err != nil {
			return 0, err
		}
		if !done {
			// The pod is gone or replaced: the cache was stale. The rest of the move assumed it
			// (e.g. "the old pod keeps serving, delete the new one"), so stop and re-plan.
			ctrl.LoggerFrom(ctx).V(1).Info("Pod changed under the move; re-planning", "pod", klog.KObj(a.Pod))
			return stopMove, nil
		}
		r.concluded(key, a)
		return 0, nil
	case upgrade.Event:
		r.event(a)
		return 0, nil
	case upgrade.RemoveGate:
		return r.removeGate(ctx, a.Pod, a.Gate, a.Annotations)
	}
	return 0, fmt.Errorf("unknown planner action %q", a.Kind)
}

// concluded records the Event and metrics of a write that actually happened.
func (r *WorkspaceReconciler) concluded(key types.NamespacedName, a upgrade.Action) {
	if a.Reason != "" {
		r.event(a)
	}
	if a.Result != "" {
		observeUpgrade(a.Result, string(a.Strategy), a.Duration)
		r.gate.finish(key, r.Opts.Now())
	}
}

func (r *WorkspaceReconciler) event(a upgrade.Action) {
	on := a.Pod
	if a.EventOn != nil {
		on = a.EventOn
	}
	r.Recorder.Event(on, a.EventType, a.Reason, a.Message)
}

// createUpgradePod starts an upgrade: within the concurrency cap, build the pod from the template
// with the old pod's identity, make sure its claims exist, and create it.
//
// It returns 0 only when the pod exists afterwards (created now, or by an earlier attempt of the
// same upgrade), so the move may go on (Recreate deletes the old pod next); any other outcome
// ends the move.
func (r *WorkspaceReconciler) createUpgradePod(ctx context.Context, key types.NamespacedName, mv *moveState, a upgrade.Action, tmpl *templates.Template, now time.Time) (time.Duration, error) {
	log := ctrl.LoggerFrom(ctx)
	old := a.Pod
	if a.NeedsSlot {
		adm, err := r.gate.acquire(ctx, key, a.Name, now)
		if err != nil {
			return 0, err
		}
		if !adm.ok {
			// A stale read is no queue: the cache shows this process's own create soon.
			if !adm.stale && r.gate.announce(old.UID) {
				if adm.byPending {
					r.Recorder.Eventf(old, corev1.EventTypeNormal, upgrade.ReasonUpgradeRequested,
						"Upgrade of pod %s is queued: %d upgraded pods are waiting for a node (--max-pending-upgrades=%d); it starts when the cluster places one of them or one finishes.",
						old.Name, adm.waitingForNode, r.Opts.MaxPendingUpgrades)
				} else {
					r.Recorder.Eventf(old, corev1.EventTypeNormal, upgrade.ReasonUpgradeRequested,
						"Upgrade of pod %s is queued: %d upgrades are in flight (--max-concurrent-upgrades=%d); it starts when one finishes.",
						old.Name, adm.inFlight, r.Opts.MaxConcurrentUpgrades)
				}
			}
			return waitForSlot(), nil
		}
	}
	failStart := func(reason string, err error) (time.Duration, error) {
		r.gate.release(key)
		for _, fa := range upgrade.FailStart(old, reason, err.Error(), now) {
			if wait, aerr := r.apply(ctx, key, mv, fa, tmpl, now); aerr != nil || wait != 0 {
				return wait, aerr
			}
		}
		return endMove, nil
	}
	pod, claims, err := r.Opts.BuildPod(tmpl, old, a.Name)
	if err != nil {
		return failStart("TemplateRenderFailed", fmt.Errorf("template %s version %s does not render for this workspace: %w", tmpl.Name, tmpl.Version, err))
	}
	pod.Name, pod.Namespace, pod.GenerateName = a.Name, old.Namespace, ""
	upgrade.PreserveIdentity(pod, old)
	for k, v := range a.Annotations {
		pod.Annotations[k] = v
	}
	if a.Gate != "" {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: a.Gate})
	}
	if a.Strategy == upgrade.Recreate {
		var full corev1.Pod
		if err := r.readForRollback(ctx, old, &full); err != nil {
			r.gate.release(key)
			if apierrors.IsNotFound(err) {
				return endMove, nil // gone meanwhile: the next pass sees it
			}
			return 0, fmt.Errorf("read pod %s for its rollback spec: %w", old.Name, err)
		}
		if full.DeletionTimestamp != nil || full.UID != old.UID {
			r.gate.release(key)
			return endMove, nil // being deleted or replaced meanwhile: the next pass sees it
		}
		spec, err := upgrade.RollbackSpec(&full)
		if err != nil {
			return failStart("RollbackSpecFailed", err)
		}
		pod.Annotations[workspace.AnnRollbackSpec] = spec
		// The old pod is deleted in this pass: its maintenance as the API server has it now is
		// the one the new pod takes over.
		if v, ok := full.Annotations[workspace.AnnMaintenance]; ok {
			pod.Annotations[workspace.AnnMaintenance] = v
		} else {
			delete(pod.Annotations, workspace.AnnMaintenance)
		}
		pod.Annotations[workspace.AnnUpgradeHMAC] = r.Opts.Keys.Sign(pod.Namespace, pod.Name, pod.Annotations, spec)
	}
	for _, c := range claims {
		if _, mounted := mv.claims[c.Name]; mounted {
			// A claim the workspace's pod mounts exists (a mounted claim cannot be removed, only
			// marked for deletion, which a create would answer with AlreadyExists too): no round
			// trip to learn it.
			continue
		}
		c.Namespace = old.Namespace
		taken, err := r.createClaim(ctx, c, workspace.Owner(old), workspace.ID(old))
		switch {
		case taken:
			return failStart("ClaimConflict", fmt.Errorf("claim %s that version %s of template %s adds already exists and belongs to another workspace: spawn this workspace under another id, or ask an administrator to look at the claim", c.Name, tmpl.Version, tmpl.Name))
		case err == nil:
		case permanent(err):
			return failStart("ClaimRejected", fmt.Errorf("the API server rejected claim %s: %w", c.Name, err))
		default:
			r.gate.release(key)
			return 0, fmt.Errorf("create claim %s for upgraded pod %s: %w", c.Name, pod.Name, err)
		}
	}
	err = r.Client.Create(ctx, pod)
	switch {
	case err == nil:
		log.Info("Created upgraded pod", "pod", klog.KObj(pod), "from", klog.KObj(old), "strategy", a.Strategy)
		mv.made(pod)
		if a.CheckedByDelete && old.ResourceVersion != "" {
			// The old pod's delete, next in this move, carries the UID and resourceVersion this
			// pass saw as preconditions: if it succeeds, the old pod was live and unchanged after
			// this create, which is what the read below would tell, one round trip later on the
			// way to the volume's release (deletePod).
			mv.unchecked = &uncheckedCreate{pod: pod, old: old, started: a}
			return 0, nil
		}
		if wait, err := r.checkAfterCreate(ctx, key, pod, old); err != nil || wait != 0 {
			return wait, err
		}
		r.event(a)
		return 0, nil
	case apierrors.IsAlreadyExists(err):
		// A repeated create after a stale read or a crash: done if it is the pod this upgrade made.
		var existing corev1.Pod
		if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), &existing); gerr != nil {
			return 0, fmt.Errorf("read existing pod %s: %w", pod.Name, gerr)
		}
		if existing.Annotations[workspace.AnnUpgradeFromUID] == string(old.UID) {
			if existing.DeletionTimestamp != nil {
				return endMove, nil
			}
			mv.made(&existing)
			return 0, nil
		}
		return failStart("PodNameConflict", fmt.Errorf("a pod named %s already exists and is not this workspace's upgrade: remove %s from pod %s or delete that pod", pod.Name, workspace.AnnUpgradePod, old.Name))
	case permanent(err):
		return failStart("PodRejected", fmt.Errorf("the API server rejected pod %s: %w", pod.Name, err))
	default:
		r.gate.release(key)
		return 0, fmt.Errorf("create upgraded pod %s: %w", pod.Name, err)
	}
}

// createClaim creates c, a claim of workspace (owner, id) that its new pod mounts, or finds it
// there already. A claim found there is the workspace's only if spawner.ClaimOf says so: claim
// names are cut and hashed (workspace.ClaimName), so another tenant's claim can have the name,
// and mounting it would hand that tenant's data over. taken says it is another's. The claim is
// read from the API server: the cache holds the claims the workspace's pods mount, not this one.
func (r *WorkspaceReconciler) createClaim(ctx context.Context, c *corev1.PersistentVolumeClaim, owner, id string) (taken bool, err error) {
	if err := r.Client.Create(ctx, c); !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	var existing corev1.PersistentVolumeClaim
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(c), &existing); err != nil {
		// Not found: deleted since the create; a retry creates it.
		return false, fmt.Errorf("read existing claim %s: %w", c.Name, err)
	}
	return !spawner.ClaimOf(&existing, owner, id), nil
}

// readForRollback reads old in full (the cache strips its spec), for the rollback spec of a
// Recreate start. The cache keeps the spec of a pod with an upgrade intent and a claim
// (podcache.KeepsSpec): a cached copy of the very version this pass planned from needs no read.
// Otherwise it asks the API server's watch cache (resourceVersion "0": no etcd read, and the API
// server has the object decoded already). Either way, a copy at exactly the resourceVersion this
// pass planned from is the version that the old pod's delete, next in the move, has as its
// precondition: if that delete succeeds, the spec is the deleted pod's, as a quorum read would
// have given. Any other answer (the watch cache behind or ahead of nogoo9's cache, another API
// server replica, not found) is followed by a quorum read, as before.
func (r *WorkspaceReconciler) readForRollback(ctx context.Context, old, full *corev1.Pod) error {
	key := client.ObjectKeyFromObject(old)
	if old.ResourceVersion != "" {
		if c, ok := r.Reader.(fullPods); ok && c.FullPod(ctx, key, old.UID, old.ResourceVersion, full) {
			return nil
		}
		err := r.APIReader.Get(ctx, key, full, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
		if err == nil && full.UID == old.UID && full.ResourceVersion == old.ResourceVersion {
			return nil
		}
		*full = corev1.Pod{}
	}
	return r.APIReader.Get(ctx, key, full)
}

// fullPods is a cache that keeps some pods whole (podcache.Cache.FullPod).
type fullPods interface {
	FullPod(ctx context.Context, key client.ObjectKey, uid types.UID, rv string, out *corev1.Pod) bool
}

// checkAfterCreate looks at old, the pod that upgraded pod pod replaces, as it was when pod was
// created: in the cache once the cache shows pod, else read from the API server
// (deletedBeforeCreate). When the owner deleted the workspace while this pass still saw it in the cache,
// pod must not outlive it and bring the workspace back: it is deleted and the move ends
// (endMove). The front end's delete does the mirror image (it deletes, then lists again), so
// whatever the interleaving one of the two sees the other's write. 0: old is live, go on.
func (r *WorkspaceReconciler) checkAfterCreate(ctx context.Context, key types.NamespacedName, pod, old *corev1.Pod) (time.Duration, error) {
	gone, err := r.deletedBeforeCreate(ctx, pod, old)
	if err == nil && !gone {
		return 0, nil
	}
	r.gate.release(key)
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Workspace deleted during the upgrade's start; removing the upgraded pod", "pod", klog.KObj(pod))
		err = r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		if err == nil || apierrors.IsNotFound(err) {
			return endMove, nil
		}
	}
	return 0, fmt.Errorf("check pod %s after creating %s: %w", old.Name, pod.Name, err)
}

// deletedBeforeCreate reports whether old was gone, being deleted with its workspace
// (deletedByOwner: an eviction is not) or replaced when pod, its upgrade, was created: what the
// owner's delete race needs to know (checkAfterCreate). It waits
// for the informer cache to show pod (podcache.Seen): the cache then holds every pod write committed
// before the create, so old as the cache shows it answers without a read from the API server (a
// delete committed after the create is the front end's to find: it lists again after its own
// delete, and sees pod). Only a live old pod of the same UID, or one being deleted or replaced,
// is taken from the cache; when the cache does not show old at all (removed, or no longer
// labelled as a workspace pod, which the cache cannot tell apart) or does not show pod in time,
// old is read from the API server (deletedMeanwhile), as a pass without the cache's notice does.
func (r *WorkspaceReconciler) deletedBeforeCreate(ctx context.Context, pod, old *corev1.Pod) (bool, error) {
	if r.seen.Wait(ctx, r.Reader, pod, podcache.AwaitSeen) {
		var cached corev1.Pod
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(old), &cached, client.UnsafeDisableDeepCopy); err == nil {
			return deletedByOwner(&cached) || cached.UID != old.UID, nil
		}
	}
	return r.deletedMeanwhile(ctx, old)
}

// permanent tells a refusal that retrying will not heal (an invalid object, quota, an admission
// policy) from a transient error. A Forbidden while the namespace terminates is left to retry.
func permanent(err error) bool {
	return apierrors.IsInvalid(err) ||
		(apierrors.IsForbidden(err) && !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause))
}

// createRollbackPod brings a failed Recreate upgrade back on the spec stored on the failed pod,
// if nogoo9 wrote that spec (the record's HMAC) and the workspace still exists. Without a usable,
// verified spec, or when the API server refuses the pod for good, the failed pod stays (never
// leave the workspace with nothing) and the error says so: no retry, no other pod.
func (r *WorkspaceReconciler) createRollbackPod(ctx context.Context, key types.NamespacedName, a upgrade.Action, now time.Time) error {
	log := ctrl.LoggerFrom(ctx)
	var full corev1.Pod
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(a.Pod), &full); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read pod %s for its rollback spec: %w", a.Pod.Name, err)
	}
	if deletedByOwner(&full) || full.UID != a.Pod.UID {
		// The owner deleted the workspace (or the pod was replaced): nothing to bring back. A pod
		// Kubernetes is deleting for a disruption is rolled back: its record goes with it
		// (upgrade.PlanEvicted).
		r.gate.release(key)
		return nil
	}
	cannot := func(reason string, err error) error {
		text := a.Annotations[workspace.AnnLastUpgradeError] + "; cannot roll back: " + err.Error()
		done, perr := r.patchPod(ctx, a.Pod, map[string]string{workspace.AnnLastUpgradeError: text},
			[]string{workspace.AnnRollbackSpec, workspace.AnnUpgradeStartedAt, workspace.AnnUpgradeHMAC})
		if perr != nil {
			return perr
		}
		if !done {
			// Planned from a pod version that has changed since (e.g. this very outcome, written
			// by the previous pass): re-plan from what the watch brings.
			return nil
		}
		r.Recorder.Eventf(a.Pod, corev1.EventTypeWarning, reason,
			"Upgrade of workspace %s failed and pod %s cannot be rolled back (%v); it stays as the workspace's pod: fix the template and request the upgrade again.", key.Name, a.Pod.Name, err)
		observeUpgrade(upgrade.ResultFailed, string(upgrade.Recreate), a.Duration)
		r.gate.release(key)
		return nil
	}
	if err := r.Opts.Keys.VerifySpec(&full); err != nil {
		return cannot(upgrade.ReasonUntrustedAnnotations, err)
	}
	pod, err := upgrade.RollbackPod(&full, a.Name, a.Annotations)
	if err != nil {
		return cannot(upgrade.ReasonUpgradeFailed, err)
	}
	// Maintenance follows the pod that serves now, not the one the spec was taken from.
	if v, ok := full.Annotations[workspace.AnnMaintenance]; ok {
		pod.Annotations[workspace.AnnMaintenance] = v
	} else {
		delete(pod.Annotations, workspace.AnnMaintenance)
	}
	switch err := r.Client.Create(ctx, pod); {
	case err == nil:
		log.Info("Created rollback pod", "pod", klog.KObj(pod), "failed", klog.KObj(a.Pod))
		if gone, err := r.rollbackUndone(ctx, &full); err != nil || gone {
			// The owner deleted the workspace while this pass still saw the failed pod: the
			// rollback pod must not bring it back (the delete lists again after its own write;
			// this read after ours closes the race from this side).
			if err == nil {
				log.Info("Workspace deleted during its rollback; removing the rollback pod", "pod", klog.KObj(pod))
				err = r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
				if err == nil || apierrors.IsNotFound(err) {
					r.gate.release(key)
					return nil
				}
			}
			return fmt.Errorf("check pod %s after creating rollback pod %s: %w", a.Pod.Name, pod.Name, err)
		}
		r.event(a)
		observeUpgrade(a.Result, string(upgrade.Recreate), a.Duration)
		r.gate.release(key)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	case permanent(err) || apierrors.IsBadRequest(err):
		return cannot(upgrade.ReasonUpgradeFailed, fmt.Errorf("the API server refused rollback pod %s: %w", pod.Name, err))
	default:
		return fmt.Errorf("create rollback pod %s: %w", pod.Name, err)
	}
}

// rollbackUndone reads failed, the pod a rollback pod was just made from (as the API server had it
// before the create), again and reports whether the owner deleted the workspace meanwhile, so the
// rollback pod must go: failed is being deleted with its workspace (deletedByOwner), replaced,
// or gone. Not when failed is being deleted by Kubernetes for a disruption (an eviction is no
// delete of the workspace), nor when failed, evicted or on a Node that is gone
// (workspace.AnnNodeLost), is gone: the eviction's delete or the pod GC removed it (the GC
// force-deletes a pod of a gone Node at any time), and the rollback pod is all the workspace has.
// An owner's delete is graceful, and such a pod waits for its kubelet or the GC being deleted,
// which the read sees; one the GC completes before the read is the delete's sweep's to find.
func (r *WorkspaceReconciler) rollbackUndone(ctx context.Context, failed *corev1.Pod) (bool, error) {
	var live corev1.Pod
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(failed), &live); {
	case apierrors.IsNotFound(err):
		taken := failed.Annotations[workspace.AnnNodeLost] != "" || (lifecycle.Disrupted(failed) && !lifecycle.OwnerDeleted(failed))
		return !taken, nil
	case err != nil:
		return false, err
	}
	return deletedByOwner(&live) || live.UID != failed.UID, nil
}

// deletePod deletes a pod with its UID as precondition: a retried delete never removes a newer pod
// that reused the name. NotFound and a failed precondition mean it is already gone. The pod that
// stays instead (Keep) is first read from the API server: if the cache was stale and it is gone or
// going, the move stops, so nogoo9 never deletes a workspace's last pod. A Keep that this move
// has just created needs no read: the create's answer is fresher than any read.
func (r *WorkspaceReconciler) deletePod(ctx context.Context, key types.NamespacedName, mv *moveState, a upgrade.Action) (time.Duration, error) {
	if (mv.unchecked == nil || mv.unchecked.old.UID != a.Pod.UID) && r.deleted.recent(a.Pod.UID, r.Opts.Now()) {
		// This process has deleted this very pod (its UID) already and the cache does not show
		// it yet (a Recreate start's delete, seen by the pass the new pod's event brings): a
		// delete cannot be undone, so the read of the pod that stays and a second delete would
		// be two round trips for nothing, ahead of the pass that removes the new pod's gate
		// once the old pod is gone.
		ctrl.LoggerFrom(ctx).V(1).Info("Pod already deleted by this process; waiting for the cache", "pod", klog.KObj(a.Pod))
		return 0, nil
	}
	if k := a.Keep; k != nil && (k.UID != "" || mv.created[k.Name] == nil) {
		// A quorum read of the pod's metadata only: whether it is there, the same pod and not
		// being deleted is all this read is for, so the API server sends (and nogoo9 decodes)
		// no spec and no status.
		live := podMeta()
		err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(k), live)
		if apierrors.IsNotFound(err) || (err == nil && (!sameKeep(live, k) || live.DeletionTimestamp != nil)) {
			ctrl.LoggerFrom(ctx).V(1).Info("Pod that stays is gone; re-planning", "pod", klog.KObj(k))
			return stopMove, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read pod %s before deleting %s: %w", k.Name, a.Pod.Name, err)
		}
	}
	pre := client.Preconditions{UID: &a.Pod.UID}
	if a.MatchVersion && a.Pod.ResourceVersion != "" {
		rv := a.Pod.ResourceVersion
		pre.ResourceVersion = &rv
	}
	err := r.Client.Delete(ctx, a.Pod, pre)
	if u := mv.unchecked; u != nil && u.old.UID == a.Pod.UID {
		mv.unchecked = nil
		if spawner.MayHaveHappened(err) {
			// The delete may have been applied with its answer lost (the connection dropped, a
			// timeout). The old pod would then be going by this very delete, which the check
			// cannot tell from the owner's: it would take the workspace for deleted and remove
			// the new pod, leaving no pod at all. So no check: the pass fails and is retried,
			// and the next one plans from what the pods show (the old pod terminating, or still
			// live and deleted again; the new pod gated). An owner's delete racing this start is
			// left to the front end's delete sweep (pkg/frontend/service.go, sweep), which
			// removes pods made from the pods it deleted, as the new pod is.
			return 0, fmt.Errorf("delete pod %s after creating %s: %w", a.Pod.Name, u.pod.Name, err)
		}
		if err != nil || pre.ResourceVersion == nil {
			// Not proven live by the delete (the API server refused it: gone, changed or
			// replaced; or no resourceVersion precondition): check it (checkAfterCreate), as a
			// create without this delete does.
			if wait, cerr := r.checkAfterCreate(ctx, key, u.pod, u.old); cerr != nil || wait != 0 {
				return wait, cerr
			}
		}
		r.event(u.started)
	}
	if apierrors.IsConflict(err) && pre.ResourceVersion != nil {
		// Changed since the planner saw it (e.g. maintenance set meanwhile), or replaced: plan
		// again from what the cache shows next.
		ctrl.LoggerFrom(ctx).V(1).Info("Pod changed before its delete; re-planning", "pod", klog.KObj(a.Pod))
		return stopMove, nil
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delete pod %s: %w", a.Pod.Name, err)
	}
	r.deleted.add(a.Pod.UID, r.Opts.Now())
	ctrl.LoggerFrom(ctx).Info("Deleted pod", "pod", klog.KObj(a.Pod), "reason", a.Reason)
	r.concluded(key, a)
	return 0, nil
}

// sameKeep reports whether live is the pod that Keep names: the same UID or, for a Keep without
// UID (the pod a move creates), the upgrade of the same pod.
func sameKeep(live metav1.Object, keep *corev1.Pod) bool {
	if keep.UID == "" {
		uid := keep.Annotations[workspace.AnnUpgradeFromUID]
		return uid != "" && live.GetAnnotations()[workspace.AnnUpgradeFromUID] == uid
	}
	return live.GetUID() == keep.UID
}

// podMeta is an empty pod metadata object: a read into it asks the API server for the pod's
// metadata only (PartialObjectMetadata).
func podMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// patchPod merge-patches nogoo9's annotations on pod (set, and remove), with the pod's UID in the
// patch as a precondition. done is false when the pod is gone or was replaced.
func (r *WorkspaceReconciler) patchPod(ctx context.Context, pod *corev1.Pod, set map[string]string, remove []string) (done bool, err error) {
	ann := map[string]any{}
	for _, k := range remove {
		ann[k] = nil
	}
	for k, v := range set {
		ann[k] = v
	}
	meta := map[string]any{"uid": pod.UID, "annotations": ann}
	if (slices.Contains(remove, workspace.AnnUpgradeRequested) || slices.Contains(remove, workspace.AnnUpgradeStartedAt)) &&
		pod.ResourceVersion != "" {
		// Never end an upgrade, or clear an intent, on a pod version this pass did not see: a
		// stale cache (our own last write not yet observed) re-plans a finished upgrade, and a
		// new intent written since (the API, a person) or the first pass's outcome (its error
		// text) must survive it. The conflict stops the move; the watch brings a fresh pass.
		meta["resourceVersion"] = pod.ResourceVersion
	}
	return r.rawPatch(ctx, pod, map[string]any{"metadata": meta})
}

// removeGate removes scheduling gate name from pod with a JSON patch that first tests the pod's UID
// and the gate at the index the cache shows: it removes exactly that gate of exactly that pod, or
// nothing. The annotations set (a Recreate's new deadline) go in the same patch, so they are written
// with the gate's removal or not at all, in one request. A refused test (the gate is already gone,
// the pod replaced) ends the move; the watch brings the next pass.
func (r *WorkspaceReconciler) removeGate(ctx context.Context, pod *corev1.Pod, name string, set map[string]string) (time.Duration, error) {
	i := slices.IndexFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == name })
	if i < 0 {
		return 0, nil
	}
	path := fmt.Sprintf("/spec/schedulingGates/%d", i)
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": pod.UID},
		{"op": "test", "path": path + "/name", "value": name},
		{"op": "remove", "path": path},
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		// "add" replaces a member that exists. A pod nogoo9 upgraded always has annotations (its
		// upgrade record), so the map is there to add to.
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + jsonPointerToken(k), "value": set[k]})
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return 0, err
	}
	target := &corev1.Pod{ObjectMeta: ctrlObjectMeta(client.ObjectKeyFromObject(pod))}
	err = r.Client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, body))
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).V(1).Info("Removed scheduling gate", "pod", klog.KObj(pod), "gate", name)
		return 0, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err):
		ctrl.LoggerFrom(ctx).V(1).Info("Scheduling gate or pod changed; re-planning", "pod", klog.KObj(pod), "error", err.Error())
		return endMove, nil
	default:
		return 0, fmt.Errorf("remove scheduling gate %s from pod %s: %w", name, pod.Name, err)
	}
}

// jsonPointerToken escapes k as one reference token of a JSON pointer (RFC 6901): annotation keys
// hold "/".
func jsonPointerToken(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// waitForSlot is how long a queued upgrade waits before looking again if no finished upgrade
// wakes it first.
func waitForSlot() time.Duration {
	return 5*time.Second + time.Duration(rand.Int64N(int64(2*time.Second)))
}
