package controllers

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/updatepolicy"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Event reasons of the update policies.
const (
	ReasonAutoUpgradeRequested = "AutoUpgradeRequested"
	ReasonAutoUpgradeWithdrawn = "AutoUpgradeWithdrawn"
	ReasonInvalidUpdatePolicy  = "InvalidUpdatePolicy"
)

// PolicyOptions tunes the update-policy runner; main.go fills it from flags.
type PolicyOptions struct {
	// Interval is how often every workspace's policy is evaluated (--update-policy-interval).
	Interval time.Duration
	// PerInterval is the most automatic upgrades requested per interval
	// (--auto-upgrades-per-interval): after an outage, the workspaces that became due meanwhile
	// start a few at a time, never all at once.
	PerInterval int
	// MaxInFlight is --max-concurrent-upgrades: no automatic request is added while that many
	// upgrades are requested or in flight (zero or negative: no cap).
	MaxInFlight int
	// MaxPending is --max-pending-upgrades: no automatic request is added while that many
	// upgrades are requested and not started yet or wait for a node (zero or negative: no cap).
	MaxPending int
	// IdleAfter is the when-idle threshold (--idle-after).
	IdleAfter time.Duration
	// RetryAfter is how long after a failed upgrade an automatic one is tried again
	// (--auto-upgrade-retry-after).
	RetryAfter time.Duration
	// Now is the clock (time.Now by default).
	Now func() time.Time
}

// PolicyRunner evaluates the update policy of every workspace each Interval and, for those the
// policy wants upgraded now (updatepolicy.Decide), writes the same intent the API writes, marked
// nogoo9/auto-upgrade. The upgrade controller does the rest, within the same concurrency cap and
// with the same crash safety. It keeps no state but the Warnings already given: each tick starts
// from the cache, so nothing piles up while nogoo9 is down: what is due is what the policy wants
// at the tick, and at most PerInterval of it starts per tick. A request it wrote that the policy
// no longer wants before the upgrade started (the window closed while it waited for a slot) is
// withdrawn.
type PolicyRunner struct {
	Client client.Client
	// Pods, when set, are the cache's own workspace pods, read one workspace at a time (main.go
	// shares the upgrade controller's). Without it each tick Lists every workspace pod from
	// Reader: at 10,000 workspaces a copy of every pod struct, 0.1-0.2 s of CPU on the cold
	// start's path for the first tick (bench/history.md, "Tenth round: cold start").
	Pods   *podcache.Every
	Reader client.Reader
	// Templates may hand out the registry's own values (templates.Shared): a tick reads each
	// workspace's template (its version and policy annotations) and writes into none.
	Templates TemplateSource
	Recorder  record.EventRecorder
	Opts      PolicyOptions

	mu     sync.Mutex
	warned map[types.UID]string
}

// SetupPolicyRunner adds the update-policy runner to mgr (leader only). pods is the list of every
// cached workspace pod to read (nil: one of its own, on mgr's cache).
func SetupPolicyRunner(mgr ctrl.Manager, reg TemplateSource, pods *podcache.Every, opts PolicyOptions) error {
	if pods == nil {
		var err error
		if pods, err = podcache.NewEvery(context.Background(), mgr.GetCache()); err != nil {
			return err
		}
	}
	return mgr.Add(&PolicyRunner{Client: mgr.GetClient(), Pods: pods, Reader: mgr.GetCache(), Templates: reg,
		Recorder: mgr.GetEventRecorderFor("workspace-update-policy"), Opts: opts}) //nolint:staticcheck // core/v1 Events, as the upgrade controller
}

func (p *PolicyRunner) defaults() {
	if p.Opts.Interval <= 0 {
		p.Opts.Interval = time.Minute
	}
	if p.Opts.PerInterval <= 0 {
		p.Opts.PerInterval = 10
	}
	if p.Opts.IdleAfter <= 0 {
		p.Opts.IdleAfter = 30 * time.Minute
	}
	if p.Opts.RetryAfter <= 0 {
		p.Opts.RetryAfter = time.Hour
	}
	if p.Opts.Now == nil {
		p.Opts.Now = time.Now
	}
	if p.warned == nil {
		p.warned = map[types.UID]string{}
	}
}

// Start ticks until ctx ends.
func (p *PolicyRunner) Start(ctx context.Context) error {
	p.defaults()
	log := ctrl.Log.WithName("update-policy")
	// The first tick evaluates as soon as the templates and the cache's pods are in, not an
	// interval later (a tick before that evaluates nothing).
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return templatesSynced(p.Templates) && (p.Pods == nil || p.Pods.Synced()), nil
	}); err != nil {
		return nil // stopped before
	}
	t := time.NewTicker(p.Opts.Interval)
	defer t.Stop()
	for {
		if templatesSynced(p.Templates) {
			if n, err := p.Tick(ctx); err != nil {
				log.Error(err, "Evaluate update policies")
			} else if n > 0 {
				log.Info("Requested automatic upgrades", "count", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type candidate struct {
	pod    *corev1.Pod
	key    string
	policy updatepolicy.Policy
	to     string
	reason string
}

// workspaces calls fn with the pods of each workspace (one namespace and id): from Pods, the
// cache's own pods one workspace at a time, or, without Pods, from a List of Reader. fn keeps
// none of the pods it is given (they may be a reused buffer). ok is false while Pods has not had
// the informer's initial list.
func (p *PolicyRunner) workspaces(ctx context.Context, fn func(group []*corev1.Pod)) (ok bool, err error) {
	if p.Pods != nil {
		return p.Pods.Workspaces(fn), nil
	}
	var list corev1.PodList
	if err := p.Reader.List(ctx, &list, client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace}); err != nil {
		return false, err
	}
	byKey := map[string][]*corev1.Pod{}
	for i := range list.Items {
		if pod := &list.Items[i]; workspace.IsWorkspacePod(pod) {
			k := pod.Namespace + "/" + workspace.ID(pod)
			byKey[k] = append(byKey[k], pod)
		}
	}
	for _, group := range byKey {
		fn(group)
	}
	return true, nil
}

// Tick evaluates every workspace once and returns how many upgrades it requested.
func (p *PolicyRunner) Tick(ctx context.Context) (int, error) {
	p.defaults()
	now := p.Opts.Now()
	busy, unplaced := 0, 0 // requested or in flight; requested or waiting for a node
	var due []candidate
	synced, err := p.workspaces(ctx, func(group []*corev1.Pod) {
		var live []*corev1.Pod
		inFlight := false
		for _, pod := range group {
			if pod.DeletionTimestamp == nil && workspace.IsWorkspacePod(pod) {
				live = append(live, pod)
			}
		}
		for _, pod := range live {
			if pod.Annotations[workspace.AnnUpgradeFrom] != "" && workspace.UpgradeInFlight(pod, live) {
				inFlight = true
			}
		}
		// A stopped workspace's intent waits, held by the stop, for its start: it is neither in
		// flight nor waiting for a node, so it takes no place under the caps.
		stopped := workspace.IsStopped(live)
		intent := len(live) == 1 && live[0].Annotations[workspace.AnnUpgradeRequested] != ""
		if inFlight || intent && !stopped {
			busy++
		}
		if intent && !stopped || inFlight && upgrade.SlotOf(live).WaitingForNode {
			unplaced++
		}
		if len(live) != 1 {
			return
		}
		pod := live[0]
		// Present is enough, whatever its value (`kubectl annotate ... nogoo9/maintenance=`): the
		// one rule the phase, the API and the controller apply.
		_, inMaintenance := workspace.InMaintenance(live)
		tmpl, found := p.Templates.Get(workspace.TemplateKey(pod))
		var tmplAnn map[string]string
		if found {
			tmplAnn = tmpl.Annotations
		}
		ready, since := updatepolicy.ReadySince(pod)
		in := updatepolicy.Input{
			Settings:    updatepolicy.SettingsOf(pod, tmplAnn),
			Outdated:    found && workspace.TemplateVersion(pod) != tmpl.Version,
			Busy:        inFlight || intent,
			Maintenance: inMaintenance,
			Stopped:     stopped,
			Ready:       ready, ReadySince: since,
			IdleAfter:    p.Opts.IdleAfter,
			LastFailedAt: updatepolicy.FailedAt(pod.Annotations[workspace.AnnLastUpgradeError]),
			RetryAfter:   p.Opts.RetryAfter,
		}
		in.LastActivity, in.HasLastActivity = pod.Annotations[workspace.AnnLastActivity]
		if intent && !inFlight && pod.Annotations[workspace.AnnAutoUpgrade] != "" && pod.Annotations[workspace.AnnTargetVersion] == "" {
			// Our own request, not started yet (queued behind the cap): withdraw it when the
			// policy no longer wants it.
			in.Busy = false
			if d := updatepolicy.Decide(in, now); !d.Upgrade {
				p.withdraw(ctx, pod, d.Reason)
			}
			return
		}
		d := updatepolicy.Decide(in, now)
		if d.Err != nil {
			p.warnOnce(pod, d.Reason)
		}
		if d.Upgrade {
			// A copy: fn's pods and their maps may be a buffer reused for the next workspace.
			due = append(due, candidate{pod: podcache.Keep(pod), key: pod.Namespace + "/" + workspace.ID(pod), policy: d.Policy, to: tmpl.Version, reason: d.Reason})
		}
	})
	if err != nil || !synced {
		return 0, err // not synced: the next tick evaluates
	}
	budget := p.Opts.PerInterval
	if p.Opts.MaxInFlight > 0 {
		budget = min(budget, p.Opts.MaxInFlight-busy)
	}
	if p.Opts.MaxPending > 0 {
		budget = min(budget, p.Opts.MaxPending-unplaced)
	}
	// The longest-outdated first would need history; the oldest pod is a fair, stable proxy.
	sort.Slice(due, func(i, j int) bool {
		a, b := due[i].pod.CreationTimestamp, due[j].pod.CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return due[i].key < due[j].key
	})
	started := 0
	for _, c := range due {
		if started >= budget {
			break
		}
		ok, err := p.request(ctx, c, now)
		if err != nil {
			return started, err
		}
		if ok {
			started++
		}
	}
	return started, nil
}

// request writes the upgrade intent on c.pod, only on the version the decision saw
// (resourceVersion): a pin or policy written since wins. It names every companion of the intent:
// a person who withdrew an earlier request could remove only its intent, and that request's
// target version would be read as this one's.
func (p *PolicyRunner) request(ctx context.Context, c candidate, now time.Time) (bool, error) {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": c.pod.UID, "resourceVersion": c.pod.ResourceVersion,
		"annotations": map[string]any{
			workspace.AnnUpgradeRequested: now.UTC().Format(time.RFC3339),
			workspace.AnnUpgradePod:       workspace.NextPodName(c.pod, c.to),
			workspace.AnnAutoUpgrade:      string(c.policy),
			workspace.AnnTargetVersion:    nil,
		}}})
	target := &corev1.Pod{}
	target.Name, target.Namespace = c.pod.Name, c.pod.Namespace
	err := p.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ctrl.Log.WithName("update-policy").Info("Requested automatic upgrade", "pod", klog.KObj(c.pod), "policy", c.policy, "to", c.to)
	p.Recorder.Eventf(c.pod, corev1.EventTypeNormal, ReasonAutoUpgradeRequested,
		"Requested the upgrade of pod %s from version %s to %s: %s.", c.pod.Name, workspace.TemplateVersion(c.pod), c.to, c.reason)
	return true, nil
}

// withdraw removes an automatic request the policy no longer wants, on the version it saw.
func (p *PolicyRunner) withdraw(ctx context.Context, pod *corev1.Pod, why string) {
	ann := map[string]any{}
	for _, k := range []string{workspace.AnnUpgradeRequested, workspace.AnnUpgradePod, workspace.AnnAutoUpgrade} {
		ann[k] = nil
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID, "resourceVersion": pod.ResourceVersion, "annotations": ann}})
	target := &corev1.Pod{}
	target.Name, target.Namespace = pod.Name, pod.Namespace
	if err := p.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body)); err != nil {
		return // changed or gone meanwhile: the next tick decides again
	}
	p.Recorder.Eventf(pod, corev1.EventTypeNormal, ReasonAutoUpgradeWithdrawn,
		"Withdrew the automatic upgrade of pod %s before it started: %s.", pod.Name, why)
}

// warnOnce records a Warning for an invalid policy setting once per pod and message.
func (p *PolicyRunner) warnOnce(pod *corev1.Pod, msg string) {
	p.mu.Lock()
	seen := p.warned[pod.UID] == msg
	if len(p.warned) > 10000 {
		p.warned = map[types.UID]string{}
	}
	p.warned[pod.UID] = msg
	p.mu.Unlock()
	if !seen {
		p.Recorder.Eventf(pod, corev1.EventTypeWarning, ReasonInvalidUpdatePolicy, "Pod %s is not upgraded automatically: %s.", pod.Name, msg)
	}
}
