package spawner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Options configures a Spawner.
type Options struct {
	// Namespace where workspaces are created.
	Namespace string
	// Namespaces are all the namespaces nogoo9 watches (--namespaces): an owner's workspaces and
	// claims in any of them count toward MaxPerUser and MaxClaimsPerUser. Empty: Namespace only.
	Namespaces []string
	// MaxPerUser is how many Running or Pending workspaces a non-admin owner may have, stopped ones
	// not counted (0: no limit).
	MaxPerUser int
	// MaxClaimsPerUser is how many PersistentVolumeClaims a non-admin owner may have, those
	// left by deleted workspaces included (0: no limit). A spawn that would create claims beyond
	// it is refused with QuotaExceeded.
	MaxClaimsPerUser int
	// MaxStoppedPerUser is how many stopped workspaces a non-admin owner may keep (0: no limit);
	// a stop beyond it is refused with QuotaExceeded. Stopped workspaces do not count against
	// MaxPerUser.
	MaxStoppedPerUser int
	// ReservationTTL is how long a quota reservation whose pod never appeared counts (default 1m)
	// after its try last held it: a spawn settling after a lost answer holds it afresh on every
	// look until its pod can no longer appear (LostWriteWindow), so the TTL ends only holds
	// nobody releases (a crashed replica, a release that failed).
	ReservationTTL time.Duration
	// SyncTimeout bounds how long a spawn waits for the template registry's first sync (default 10s).
	SyncTimeout time.Duration
	// SettleTimeout bounds how long a spawn whose write's answer was lost is settled in the
	// background (settle.go; default 3m).
	SettleTimeout time.Duration
	// LostWriteWindow is how long after a create whose answer was lost its pod may still appear
	// (the API server's request timeout, 60 s by default, plus a margin; default 70s).
	LostWriteWindow time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Seen, when set, tells when the cache New's client reads has caught up with a pod this
	// spawn created: the check after the create then reads the cache instead of the API server
	// (otherPodWithID). Nil: the check reads the API server.
	Seen *podcache.Seen
	// CacheWait bounds how long that check waits for the cache to show the new pod before it
	// lists from the API server instead (default 1s): a person is waiting for the answer and the
	// watch event normally comes within milliseconds, while a watch being re-established (an API
	// server restart) must not add seconds to every spawn.
	CacheWait time.Duration
}

// Caller is who asks for the spawn.
type Caller struct {
	Subject string
	IsAdmin bool
}

// Request asks for one workspace.
type Request struct {
	// Template is the template name.
	Template string
	// Owner is the owner's raw subject; empty means the caller.
	Owner string
	// ID is the workspace id; empty means workspace.IDFromName(Name).
	ID string
	// Name is the display name (default: the id).
	Name string
	// Context fills ${context.KEY} placeholders and the template's required context.
	Context map[string]string
	// Namespace is where the workspace is created: one of Options.Namespaces; empty means
	// Options.Namespace. Whether the caller may spawn there is the front end's decision
	// (pkg/authz); the spawner only refuses a namespace nogoo9 does not watch.
	Namespace string
	Caller    Caller
}

// Result is a created workspace.
type Result struct {
	Pod *corev1.Pod
	// PVCs are the names of the workspace's claims (created now or reused from an earlier
	// workspace with the same owner and id).
	PVCs []string
}

// Spawner creates workspaces.
type Spawner struct {
	client    client.Client
	apiReader client.Reader
	reg       *templates.Registry
	opts      Options

	// locks serialise one process's spawns per owner, so they do not fight over the ledger
	// (replicas still coordinate through it); an owner's entry goes when their last spawn ends.
	locks ownerLocks
}

// ownerLocks is a lock per owner that is removed when nobody holds or waits for it, so the map
// is as large as the spawns, starts and stops in flight, not as the owners ever seen. A waiter
// gives up when its context ends: the holder may be a stop or a spawn waiting on a slow API
// server (up to maxAttempts rounds of ledger read, pod list and write), and a request waiting
// behind it must still answer within its own deadline.
type ownerLocks struct {
	mu sync.Mutex
	m  map[string]*ownerLock
}

// ownerLock is a one-slot semaphore: held while its channel holds a token.
type ownerLock struct {
	ch   chan struct{}
	refs int
}

// errOwnerBusy is the refusal of a request that waited for its owner's lock until its context
// ended. Nothing was written: it is no lost write (mayHaveHappened).
var errOwnerBusy = errors.New("owner busy")

// lock takes owner's lock and returns its unlock, or gives up when ctx ends first with an error
// that wraps ctx's (context.DeadlineExceeded: the front ends answer 503) and errOwnerBusy.
func (o *ownerLocks) lock(ctx context.Context, owner string) (unlock func(), err error) {
	o.mu.Lock()
	if o.m == nil {
		o.m = map[string]*ownerLock{}
	}
	l := o.m[owner]
	if l == nil {
		l = &ownerLock{ch: make(chan struct{}, 1)}
		o.m[owner] = l
	}
	l.refs++
	o.mu.Unlock()
	drop := func() {
		o.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(o.m, owner)
		}
		o.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		drop()
		return nil, fmt.Errorf("%w: another spawn, start or stop of %s's in this replica still holds their quota ledger (the Kubernetes API server is slow to answer it), and this request's deadline passed while it waited: retry in a few seconds: %w", errOwnerBusy, workspace.Quote(owner), context.Cause(ctx))
	}
	return func() {
		<-l.ch
		drop()
	}, nil
}

// size is the number of owners with a lock entry (tests).
func (o *ownerLocks) size() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// New returns a Spawner writing through c and reading authoritative state (quota, and the id
// check after the create unless the cache has shown the new pod: otherPodWithID) through
// apiReader, which must not be a cache. c reads the cache (the manager's client): the check
// before the create (checkFree), and with opts.Seen the check after it.
func New(c client.Client, apiReader client.Reader, reg *templates.Registry, opts Options) *Spawner {
	if opts.ReservationTTL <= 0 {
		opts.ReservationTTL = time.Minute
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SettleTimeout <= 0 {
		opts.SettleTimeout = 3 * time.Minute
	}
	if opts.CacheWait <= 0 {
		opts.CacheWait = time.Second
	}
	if opts.LostWriteWindow <= 0 {
		opts.LostWriteWindow = 70 * time.Second
	}
	return &Spawner{client: c, apiReader: apiReader, reg: reg, opts: opts}
}

// Spawn creates the workspace req describes: its PVCs, then its Pod. It refuses with an *Error
// (NotFound, Invalid, Conflict, QuotaExceeded, Forbidden) and never leaves half a workspace: what
// this call created is deleted again when a later step fails.
func (s *Spawner) Spawn(ctx context.Context, req Request) (*Result, error) {
	owner := req.Owner
	if owner == "" {
		owner = req.Caller.Subject
	}
	if owner == "" {
		return nil, errorf(Invalid, nil, "the workspace has no owner: authenticate, or give the owner's subject")
	}
	// Errors quote a caller's input with workspace.Quote: never an oversized one whole.
	if !req.Caller.IsAdmin && req.Caller.Subject != "" && req.Caller.Subject != owner {
		return nil, errorf(Forbidden, nil, "only an admin may create a workspace for another user (%s)", workspace.Quote(owner))
	}
	if err := workspace.ValidateName(req.Name); err != nil {
		return nil, errorf(Invalid, err, "%v", err)
	}
	id := req.ID
	if id == "" {
		if id = workspace.IDFromName(req.Name); id == "" {
			return nil, errorf(Invalid, nil, "give a workspace id, or a name with letters or digits to derive it from (got name %s)", workspace.Quote(req.Name))
		}
	}
	if err := workspace.ValidateID(id); err != nil {
		return nil, errorf(Invalid, err, "%v", err)
	}
	if err := ValidateContext(req.Context); err != nil {
		return nil, errorf(Invalid, err, "%v", err)
	}
	if req.Template == "" {
		return nil, errorf(Invalid, nil, "no template given: name one of the templates list_templates shows")
	}
	// A template is named, never addressed by key: "team-b/node" would reach team-b's template
	// from any namespace. A namespace's templates serve spawns in that namespace (Resolve).
	if err := templates.ValidateName(req.Template); err != nil {
		return nil, errorf(Invalid, nil, "template name %s is not valid: a template's name is a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters); name one of the templates list_templates shows; a team namespace's template is used by spawning in that namespace", workspace.Quote(req.Template))
	}
	ns := req.Namespace
	if ns == "" {
		ns = s.opts.Namespace
	}
	if !slices.Contains(s.quotaNamespaces(), ns) {
		return nil, errorf(NotFound, nil, "namespace %s is not watched by nogoo9: spawn in one of [%s], or ask the platform team to add it to --namespaces", workspace.Quote(ns), strings.Join(s.quotaNamespaces(), ", "))
	}
	syncCtx, cancel := context.WithTimeout(ctx, s.opts.SyncTimeout)
	synced := s.reg.WaitForSync(syncCtx)
	cancel()
	// The template is looked up in the workspace's namespace first, then in nogoo9's; BuildPod
	// stamps where it was found, and the workspace follows that template from now on.
	t, key, ok := s.reg.Shared().Resolve(ns, req.Template) // BuildPod only reads it
	if !ok {
		if !synced {
			return nil, errorf(Unavailable, nil, "nogoo9 is still loading its templates, so it cannot tell whether template %s exists: retry in a few seconds", workspace.Quote(req.Template))
		}
		return nil, s.notFound(key, ns)
	}
	podName := workspace.PodName(owner, id)
	pod, pvcs, err := BuildPod(t, Identity{Owner: owner, ID: id, Name: req.Name, Context: req.Context, Namespace: ns}, podName)
	if err != nil {
		return nil, errorf(Invalid, err, "%v", err)
	}
	pod.Namespace = ns
	for _, p := range pvcs {
		p.Namespace = ns
	}
	// rid names the workspace in the owner's quota ledger: the id, or namespace/id outside
	// nogoo9's namespace (ids are unique per namespace).
	rid := s.claimKey(ns, id)
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", ns, "workspace", id, "owner", owner, "template", t.Name, "version", t.Version)
	// settling is set when a write's answer was lost after the pod may have been created: the
	// spawn is then finished or undone in the background (settle), which also releases the quota
	// reservation.
	settling := false
	quota := s.opts.MaxPerUser > 0 && !req.Caller.IsAdmin
	limitClaims := s.opts.MaxClaimsPerUser > 0 && !req.Caller.IsAdmin

	if err := s.checkFree(ctx, ns, id); err != nil {
		return nil, err
	}
	if limitClaims && len(pvcs) > 0 {
		// Held until the claims are created, so one process's spawns of one owner cannot both
		// see room for the last claim.
		unlock, err := s.locks.lock(ctx, owner)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if err := s.checkClaims(ctx, owner, pvcs); err != nil {
			return nil, err
		}
	}
	var token string // this try's hold on its quota reservation
	if quota {
		var err error
		if s.opts.MaxClaimsPerUser > 0 && len(pvcs) > 0 {
			token, err = s.reserve(ctx, owner, rid) // the owner's lock is already held
		} else {
			unlock, lerr := s.locks.lock(ctx, owner)
			if lerr != nil {
				return nil, lerr // nothing written: no reservation to release
			}
			token, err = s.reserve(ctx, owner, rid)
			unlock()
		}
		if err != nil {
			if mayHaveHappened(err) {
				// The ledger write's answer may be lost: the reservation may be there.
				go s.releaseLater(ctx, owner, rid, token, log)
			}
			return nil, err
		}
		defer func() {
			if settling {
				return // settle releases it once it knows whether the pod exists
			}
			s.releaseWhenDone(ctx, owner, rid, token, log)
		}()
	}

	// The pod first, then its claims. The pod's name is the workspace's, so of two spawns of the
	// same id only one creates it; the other stops before touching any claim. Only the spawn
	// that created the pod creates (and, on failure, deletes) claims, so a losing spawn never
	// deletes a claim the winner uses. A pod whose claim does not exist yet simply waits for it.
	if err := s.client.Create(ctx, pod); err != nil {
		switch {
		case apierrors.IsAlreadyExists(err):
			return nil, errorf(Conflict, err, "workspace %q already exists (pod %s): choose another id or delete it first", id, podName)
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return nil, errorf(Invalid, err, "template %s version %s rendered a pod the API server refused: %v", t.Name, t.Version, err)
		case apierrors.IsForbidden(err):
			return nil, errorf(Forbidden, err, "the API server refused the pod of workspace %q: %v", id, err)
		}
		if mayHaveHappened(err) {
			settling = true
			go s.settle(ctx, lostSpawn{pod: pod, pvcs: pvcs, owner: owner, id: id, quota: quota, token: token, limitClaims: limitClaims, since: s.opts.Now()}, log)
		}
		return nil, fmt.Errorf("create pod %s: %w", podName, err)
	}
	var created []*corev1.PersistentVolumeClaim
	undo := func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if err := s.client.Delete(cctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			log.Error(err, "cannot delete the pod of a failed spawn", "pod", klog.KObj(pod))
		}
		for _, p := range created {
			if err := s.client.Delete(cctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
				log.Error(err, "cannot delete PVC of a failed spawn", "pvc", klog.KObj(p))
			}
		}
	}
	names := make([]string, 0, len(pvcs))
	for _, p := range pvcs {
		names = append(names, p.Name)
		reused, err := s.createClaim(ctx, p, owner, id)
		if err != nil {
			if mayHaveHappened(err) {
				// The API server did not answer (in time): the pod exists, so finish the
				// workspace in the background rather than leave half of it.
				settling = true
				go s.settle(ctx, lostSpawn{pod: pod, pvcs: pvcs, created: created, owner: owner, id: id, quota: quota, token: token, limitClaims: limitClaims, since: s.opts.Now()}, log)
				return nil, err
			}
			undo()
			return nil, err
		}
		if !reused {
			created = append(created, p)
		}
	}
	// Two owners racing for one id create two differently named pods; each spawn looks again
	// after its create and yields if another owner's pod has the id (both may yield: never two
	// pods). A pod of this owner with the id is the workspace's own (otherPodWithID).
	if other, err := s.otherPodWithID(ctx, pod, owner); err != nil || other != "" {
		if err != nil && mayHaveHappened(err) {
			settling = true
			go s.settle(ctx, lostSpawn{pod: pod, pvcs: pvcs, created: created, owner: owner, id: id, quota: quota, token: token, limitClaims: limitClaims, since: s.opts.Now()}, log)
			return nil, err
		}
		if err == nil {
			err = errorf(Conflict, nil, "workspace %q was created at the same time by another request: choose another id", id)
		}
		undo()
		return nil, err
	}
	log.Info("workspace created", "pod", klog.KObj(pod), "pvcs", names)
	return &Result{Pod: pod, PVCs: names}, nil
}

// notFound explains why the template at key (Registry.Resolve for a spawn in ns) cannot be used.
func (s *Spawner) notFound(key, ns string) error {
	visible := s.reg.ListFor(ns)
	_, name := workspace.SplitTemplateKey(key)
	for _, info := range visible {
		if info.Name == name && !info.Valid {
			return errorf(NotFound, nil, "template %s has no valid version (%s): fix it and raise %s", key, info.Error, workspace.AnnTemplateVersion)
		}
	}
	var names []string
	for _, info := range visible {
		if info.ServingVersion != "" {
			names = append(names, info.Name)
		}
	}
	return errorf(NotFound, nil, "template %q does not exist: use one of [%s]", name, strings.Join(dedupe(names), ", "))
}

// checkFree refuses an id some workspace pod in the namespace already has. It reads the cache
// (s.client), not the API server: it only spares the common conflict (an id taken a while ago) a
// create and its undo, and costs no round trip. The guard that holds under races and cache lag
// is the list after the create (otherPodWithID: from the cache once it shows the new pod, else
// from the API server) and the pod's deterministic name.
func (s *Spawner) checkFree(ctx context.Context, ns, id string) error {
	var list corev1.PodList
	if err := s.client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelWorkspaceID: id}); err != nil {
		return fmt.Errorf("check workspace id %q: %w", id, err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			return errorf(Conflict, nil, "workspace %q is being deleted: retry when it is gone, or choose another id", id)
		}
		return errorf(Conflict, nil, "workspace %q already exists: choose another id or delete it first", id)
	}
	return nil
}

// otherPodWithID names another owner's pod with pod's workspace id in its namespace, or "": the
// rival that owner's spawn of pod yields to, after its create (Spawn) or once it finds the pod
// after a lost answer (settle). Only another owner's pod is a rival: a pod of owner with the id
// and another name is the workspace's own replacement (a stop's stopped copy, an eviction's
// copy, an upgrade's new pod) and mounts the spawn's claims (their names derive from owner and
// id), so yielding to it would delete the data the workspace lives on. Two spawns of one owner
// and id never get this far together: they build the same pod name, and the second create fails.
//
// Of two spawns racing for one id, the one that created its pod later must see the other's: the
// API server's list after the create shows every pod created before it. So does the cache once
// it has shown pod (podcache.Seen: the informer's store then holds every pod write committed
// before pod's create), which spares the round trip; a rival that created its pod later sees
// this one in its own check and yields. When the cache does not show pod within
// Options.CacheWait (a watch being re-established), or without Seen, the list comes from the API
// server.
func (s *Spawner) otherPodWithID(ctx context.Context, pod *corev1.Pod, owner string) (string, error) {
	id := pod.Labels[workspace.LabelWorkspaceID]
	var r client.Reader = s.apiReader
	if s.opts.Seen.Wait(ctx, s.client, pod, s.opts.CacheWait) {
		r = s.client
	}
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingLabels{workspace.LabelWorkspaceID: id}); err != nil {
		return "", fmt.Errorf("check workspace id %q: %w", id, err)
	}
	for i := range list.Items {
		if workspace.Owner(&list.Items[i]) != owner {
			return list.Items[i].Name, nil
		}
	}
	return "", nil
}

// createClaim creates p, or reuses an existing PVC of the same name that belongs to the same
// owner and workspace id (claims outlive pods, so a re-created workspace gets its data back).
func (s *Spawner) createClaim(ctx context.Context, p *corev1.PersistentVolumeClaim, owner, id string) (reused bool, err error) {
	err = s.client.Create(ctx, p)
	if err == nil {
		return false, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		switch {
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return false, errorf(Invalid, err, "the API server refused PVC %s: %v", p.Name, err)
		case apierrors.IsForbidden(err):
			// A namespace ResourceQuota ("exceeded quota") or an admission policy: a refusal with
			// the API server's reason, not an internal failure to retry.
			return false, errorf(Forbidden, err, "the API server refused PVC %s of workspace %q (%v): free room under the namespace's quota, or ask the platform team", p.Name, id, err)
		}
		return false, fmt.Errorf("create PVC %s: %w", p.Name, err)
	}
	var existing corev1.PersistentVolumeClaim
	if err := s.apiReader.Get(ctx, client.ObjectKeyFromObject(p), &existing); err != nil {
		return false, fmt.Errorf("read existing PVC %s: %w", p.Name, err)
	}
	if !ClaimOf(&existing, owner, id) {
		return false, errorf(Conflict, nil, "PVC %s already exists and belongs to another workspace: delete it or choose another id", p.Name)
	}
	if existing.DeletionTimestamp != nil {
		return false, errorf(Conflict, nil, "PVC %s of workspace %q is being deleted: retry when it is gone", p.Name, id)
	}
	existing.DeepCopyInto(p)
	return true, nil
}

// ClaimOf reports whether c, a PVC found under the name one of workspace (owner, id)'s claims
// must have, is that workspace's own. Claim names are cut and hashed (workspace.ClaimName), so
// another owner's or another workspace's claim can have the name (a tenant can search for an id
// that gives it): whoever finds a claim it did not create asks this before it mounts the claim
// (the spawner here, the controller's upgrade and start).
func ClaimOf(c *corev1.PersistentVolumeClaim, owner, id string) bool {
	return c.Labels[workspace.LabelWorkspaceID] == id && c.Annotations[workspace.AnnOwner] == owner
}

// cleanupContext outlives a cancelled request, so an undo still runs, but not forever.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

func dedupe(in []string) []string {
	var out []string
	for i, s := range in {
		if i == 0 || in[i-1] != s {
			out = append(out, s)
		}
	}
	return out
}
