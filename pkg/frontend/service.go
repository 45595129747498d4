package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/updatepolicy"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// IndexOwner is the field index of cached workspace pods by raw owner, registered by AddIndexes.
const IndexOwner = "nogoo9.frontend.owner"

// AddIndexes registers the owner index and the shared workspace-id index
// (podcache.IndexWorkspaceID) on the manager's cache. Call it before the cache starts.
func AddIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexOwner, indexOwner); err != nil {
		return fmt.Errorf("index pods by owner: %w", err)
	}
	return podcache.AddWorkspaceIDIndex(ctx, idx)
}

func indexOwner(o client.Object) []string {
	if podcache.IsPod(o) {
		if v := workspace.OwnerOf(o); v != "" {
			return []string{v}
		}
	}
	return nil
}

// Config builds a Service.
type Config struct {
	// Namespace is nogoo9's own namespace: the one requests address unless they name another
	// (WithNamespace).
	Namespace string
	// Namespaces are the watched namespaces (--namespaces, with Namespace); requests may address
	// any of them. Empty: Namespace only.
	Namespaces []string
	// Access decides who may spawn in a watched namespace other than Namespace (pkg/authz); nil:
	// only admins may.
	Access SpawnAccess
	// Cache reads workspace pods (the manager's cache, with AddIndexes registered).
	Cache client.Reader
	// Client writes (patches, deletes).
	Client client.Client
	// APIReader reads straight from the API server where the cache may lag (the pods a delete
	// removes). The Cache is used when nil.
	APIReader client.Reader
	// Events lists and watches core/v1 Events (not cached): the core/v1 client, not a whole
	// clientset (holding a kubernetes.Interface links every API group's typed client into the
	// binary; bench/history.md, "Fifth round").
	Events    corev1client.EventsGetter
	Templates Templates
	Spawner   Spawner
	// Pods, when set, is the cache's pod informer: lists then read views kept current from its
	// events (see views). Without it, or until it has delivered its initial list, a list reads
	// and describes every pod per call.
	Pods PodInformer
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// UpgradeAllWorkers bounds the patches in flight during upgrade-all (64 when 0). The
	// controller starts each upgrade as soon as its intent is written, so the last intent's
	// write is on the critical path of a bulk upgrade: many small patches in flight at once
	// finish sooner than a few at a time (docs/upgrades.md, "Tuning").
	UpgradeAllWorkers int
	// MaxFollowsPerUser caps one user's concurrent event follows (DefaultMaxFollowsPerUser when 0).
	MaxFollowsPerUser int
	// Quota bounds stops and starts (the spawner); nil: no limits.
	Quota LifecycleQuota
	// History reads kept template versions (rollback, list_templates); nil: none are kept.
	History HistoryReader
	// WriteTimeout bounds a spawn's, a stop's, a start's and an upgrade or rollback intent's
	// writes to the API server (DefaultWriteTimeout when 0), the wait for the owner's quota lock
	// included, so a caller gets an answer (503 Unavailable) even when the API server holds the
	// write, e.g. while its etcd is down.
	WriteTimeout time.Duration
	// DeleteSweep is how long after a delete the front end keeps looking for a pod made from one
	// it deleted (DefaultDeleteSweep when 0; negative: not at all).
	DeleteSweep time.Duration
}

// DefaultWriteTimeout is Config.WriteTimeout's default.
const DefaultWriteTimeout = 10 * time.Second

// DefaultDeleteSweep is Config.DeleteSweep's default: longer than kube-apiserver's default
// request timeout (60 s), within which a create sent before a delete's last list still lands.
const DefaultDeleteSweep = 75 * time.Second

// Service is the front end's operations. Every method takes the caller from ctx (auth.CallerFrom)
// and refuses a call without one.
type Service struct {
	cfg     Config
	views   *views
	follows *followSlots
	// recent are the workspaces spawned here a moment ago, which the cache may not show yet.
	recent recentSpawns
}

// New returns a Service. With cfg.Pods it subscribes to the pod informer (call it before the
// cache starts, or the initial list is replayed to it).
func New(cfg Config) (*Service, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.UpgradeAllWorkers <= 0 {
		cfg.UpgradeAllWorkers = 64
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.DeleteSweep == 0 {
		cfg.DeleteSweep = DefaultDeleteSweep
	}
	s := &Service{cfg: cfg, follows: newFollowSlots(cfg.MaxFollowsPerUser)}
	if cfg.Pods != nil {
		v := newViews(cfg.Namespace)
		reg, err := cfg.Pods.AddEventHandler(v)
		if err != nil {
			return nil, fmt.Errorf("watch workspace pods for the front end's views: %w", err)
		}
		v.reg = reg
		s.views = v
	}
	return s, nil
}

// OnViewChange makes fn hear of every change to a workspace of the home namespace after the
// views serve it, and reports whether the service has views (false: fn is never called). The
// views are one handler of the pod informer among others, each run in its own goroutine, so a
// handler of that informer can hear of a change before the views apply it; a live page told of
// the change by such a handler could read the workspace's old view and keep it. One fn: a later
// call replaces it.
func (s *Service) OnViewChange(fn func(id string)) bool {
	if s.views == nil {
		return false
	}
	s.views.changed.Store(&fn)
	return true
}

func caller(ctx context.Context) (*auth.Caller, error) {
	c, ok := auth.CallerFrom(ctx)
	if !ok || c.Subject == "" {
		return nil, errorf(CodeForbidden, "no authenticated caller: send a bearer token")
	}
	return c, nil
}

func mayActOn(c *auth.Caller, owner string) bool { return c.IsAdmin || c.Subject == owner }

// ListTemplates returns the templates a spawn in ctx's namespace can use, valid or not: that
// namespace's own and nogoo9's not shadowed by one of them, each with where it lives.
//
// Another namespace's templates are shown only to whoever may spawn there (as Spawn decides):
// a team's templates, and the errors of its invalid ones, are the team's.
func (s *Service) ListTemplates(ctx context.Context) ([]TemplateInfo, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.maySpawnIn(ctx, c, ns); err != nil {
		return nil, err
	}
	out := s.cfg.Templates.Infos(ns)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if s.cfg.History != nil {
		// One request per namespace for every template's history (kept beside the template);
		// without it the list still answers.
		byNS := map[string]map[string][]templates.VersionInfo{}
		for i := range out {
			where := out[i].Namespace
			if where == "" {
				where = s.cfg.Namespace
			}
			all, ok := byNS[where]
			if !ok {
				all, err = s.cfg.History.AllVersions(ctx, where)
				if err != nil {
					ctrl.LoggerFrom(ctx).Error(err, "Read template history for list_templates", "namespace", where)
				}
				byNS[where] = all
			}
			out[i].History = all[out[i].Name]
		}
	}
	return out, nil
}

// SpawnKey is the registry key a spawn of template name in ns follows: ns's own template of
// that name when ns offers one, else nogoo9's (templates.LookupNamespace, as the spawner does).
// It reads what Templates offers ns, from memory.
// A name that is not a template name (e.g. "team-b/node", a key) has no key: "".
func (s *Service) SpawnKey(ns, name string) string {
	if templates.ValidateName(name) != nil {
		return ""
	}
	for _, i := range s.cfg.Templates.Infos(ns) {
		if i.Name == name && i.Namespace != "" && i.Namespace != s.cfg.Namespace {
			return templates.Key(i.Namespace, name, s.cfg.Namespace)
		}
	}
	return name
}

// listPods reads workspace pods from the cache without copying them: the result must not be
// modified.
func (s *Service) listPods(ctx context.Context, opts ...client.ListOption) ([]*corev1.Pod, error) {
	ns, err := s.namespace(ctx)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	opts = append(opts, client.InNamespace(ns), client.UnsafeDisableDeepCopy)
	if err := s.cfg.Cache.List(ctx, &list, opts...); err != nil {
		return nil, &Error{Code: CodeInternal, Message: "reading workspaces failed; try again", Err: err}
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// ListOptions filter ListWorkspaces.
type ListOptions struct {
	// AllUsers lists every user's workspaces (admins only).
	AllUsers bool
	// AllNamespaces lists every watched namespace's workspaces, sorted by (namespace, id),
	// instead of the one namespace the request addresses; a request that names a namespace
	// (WithNamespace) too is refused.
	AllNamespaces bool
	// Limit, when above 0, is the most workspaces one answer holds; WorkspaceList.Continue then
	// names where the next page starts.
	Limit int
	// Continue is the WorkspaceList.Continue of the previous page (an opaque value, see
	// page.go): the list goes on after that page's last workspace.
	Continue string
}

// ListWorkspaces returns the caller's workspaces (every user's for an admin with AllUsers),
// sorted by id (by namespace and id with AllNamespaces).
func (s *Service) ListWorkspaces(ctx context.Context, o ListOptions) ([]Workspace, error) {
	l, err := s.List(ctx, o)
	if err != nil {
		return nil, err
	}
	return l.Workspaces(), nil
}

// List is ListWorkspaces as a snapshot that encodes itself cheaply (WorkspaceList.WriteJSON):
// the REST and MCP lists use it.
func (s *Service) List(ctx context.Context, o ListOptions) (*WorkspaceList, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if o.AllUsers && !c.IsAdmin {
		return nil, errorf(CodeForbidden, "Forbidden: only admin users can list every user's workspaces; omit allUsers to list yours")
	}
	if o.Limit < 0 {
		return nil, errorf(CodeInvalid, "limit %d is negative: give a positive number of workspaces per page, or 0 for all", o.Limit)
	}
	if named, _ := ctx.Value(namespaceKey{}).(string); o.AllNamespaces && named != "" {
		return nil, errorf(CodeInvalid, "namespace %s and allNamespaces=true both given: give a namespace to list that one, or allNamespaces=true (and no namespace) to list every watched namespace", workspace.Quote(named))
	}
	var after position
	if o.Continue != "" {
		if after, err = decodePosition(o.Continue, o.AllUsers, o.AllNamespaces); err != nil {
			return nil, err
		}
	}
	var entries []*entry
	var more bool
	if o.AllNamespaces {
		entries, more, err = s.entriesAcross(ctx, c, o.AllUsers, after, o.Limit)
	} else {
		var ns string
		if ns, err = s.namespace(ctx); err != nil {
			return nil, err
		}
		entries, more, err = s.entriesIn(ctx, c, ns, o.AllUsers, after.id, o.Limit)
	}
	if err != nil {
		return nil, err
	}
	l := &WorkspaceList{entries: entries, latest: map[string]string{}, now: s.cfg.Now()}
	prev := "\x00"
	for _, e := range entries {
		if e.template == prev {
			continue // most neighbours share a template: skip the map
		}
		prev = e.template
		if _, ok := l.latest[e.template]; !ok {
			l.latest[e.template] = s.templateVersion(e.template)
		}
	}
	if more {
		last := entries[len(entries)-1]
		if o.AllNamespaces {
			l.Continue = encodeContinueAcross(o.AllUsers, last.pods[0].Namespace, last.id)
		} else {
			l.Continue = encodeContinue(o.AllUsers, last.id)
		}
	}
	return l, nil
}

// entriesIn returns the entries of namespace ns that c's list shows (every user's with
// allUsers), in id order, after id after, at most limit of them (0: all); more reports whether
// entries follow.
func (s *Service) entriesIn(ctx context.Context, c *auth.Caller, ns string, allUsers bool, after string, limit int) ([]*entry, bool, error) {
	if s.views != nil && s.views.synced() && ns == s.cfg.Namespace {
		entries, more := s.views.snapshot(c.Subject, allUsers, after, limit)
		return entries, more, nil
	}
	var pods []*corev1.Pod
	var err error
	nctx := WithNamespace(ctx, ns)
	if allUsers {
		pods, err = s.listPods(nctx)
	} else {
		pods, err = s.listPods(nctx, client.MatchingFields{IndexOwner: c.Subject})
	}
	if err != nil {
		return nil, false, err
	}
	entries, more := entriesOf(pods, after, limit)
	return entries, more, nil
}

// entriesAcross is entriesIn over every watched namespace in name order, the page starting after
// position after (a namespace and an id; zero: from the start).
func (s *Service) entriesAcross(ctx context.Context, c *auth.Caller, allUsers bool, after position, limit int) ([]*entry, bool, error) {
	var out []*entry
	for _, ns := range s.Namespaces() {
		if ns < after.ns {
			continue
		}
		from := ""
		if ns == after.ns {
			from = after.id
		}
		want := 0
		if limit > 0 {
			// One more than the page still holds: the first one beyond it says more follow.
			want = limit - len(out) + 1
		}
		entries, more, err := s.entriesIn(ctx, c, ns, allUsers, from, want)
		if err != nil {
			return nil, false, err
		}
		out = append(out, entries...)
		if limit > 0 && (more || len(out) > limit) {
			return out[:limit], true, nil
		}
	}
	return out, false, nil
}

// entriesOf builds the entries of a list from pods read per call (no views yet).
func entriesOf(pods []*corev1.Pod, after string, limit int) ([]*entry, bool) {
	var out []*entry
	for _, g := range workspace.GroupByID(pods) {
		out = append(out, newEntry(g))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	if after != "" {
		i, found := searchID(out, after)
		if found {
			i++
		}
		out = out[i:]
	}
	if limit > 0 && len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// templateVersion is the registry's current version of template name ("" when unknown).
func (s *Service) templateVersion(name string) string {
	if t, ok := s.cfg.Templates.Get(name); ok && t != nil {
		return t.Version
	}
	return ""
}

// latestVersion looks the active pod's template up once per call and template.
func (s *Service) latestVersion(memo map[string]string, pods []*corev1.Pod) string {
	name := workspace.TemplateKey(workspace.Active(pods))
	if v, ok := memo[name]; ok {
		return v
	}
	v := ""
	if t, ok := s.cfg.Templates.Get(name); ok && t != nil {
		v = t.Version
	}
	memo[name] = v
	return v
}

// workspacePods returns the pods of workspace id (newest first) after checking that the caller
// may act on it.
func (s *Service) workspacePods(ctx context.Context, id string) (*auth.Caller, []*corev1.Pod, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := workspace.ValidateID(id); err != nil {
		return nil, nil, errorf(CodeInvalid, "%s", err.Error())
	}
	pods, err := s.listPods(ctx, client.MatchingFields{podcache.IndexWorkspaceID: id})
	if err != nil {
		return nil, nil, err
	}
	pods = workspace.GroupByID(pods)[id]
	if len(pods) > 0 {
		s.recent.forget(s.nsOf(ctx), id) // the cache has caught up
	} else if owner, ok := s.recent.owner(s.nsOf(ctx), id, s.cfg.Now()); ok && mayActOn(c, owner) {
		// Spawned here a moment ago: the API server has it, the cache may not yet.
		live, err := s.livePods(ctx, id, owner)
		if err != nil {
			return nil, nil, &Error{Code: CodeUnavailable, Err: err, Message: fmt.Sprintf(
				"workspace %q was created a moment ago and this replica's cache does not show it yet, and reading it from the Kubernetes API server failed: try again in a few seconds", id)}
		}
		if pods = workspace.GroupByID(live)[id]; len(pods) == 0 {
			s.recent.forget(s.nsOf(ctx), id) // gone already: the next request need not look again
		}
	}
	if len(pods) > 0 && mayActOn(c, workspace.Owner(workspace.Active(pods))) {
		return c, pods, nil
	}
	// Another team's workspaces are as private as its templates (ListTemplates): to a caller
	// who may not spawn in that namespace, one that exists is as unknown as one that does not,
	// so ids cannot be probed there. The check runs for a missing id too, so neither its cost
	// nor its failure tells the two apart.
	if ns := s.nsOf(ctx); ns != s.cfg.Namespace {
		switch err := s.maySpawnIn(ctx, c, ns); {
		case CodeOf(err) == CodeForbidden:
			return nil, nil, notFound(id)
		case err != nil:
			return nil, nil, err
		}
	}
	if len(pods) == 0 {
		return nil, nil, notFound(id)
	}
	return nil, nil, accessDenied(id)
}

// GetWorkspace returns one workspace of the caller's (any, for an admin).
func (s *Service) GetWorkspace(ctx context.Context, id string) (*Workspace, error) {
	_, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.describeNow(pods), nil
}

// SpawnInput is what a caller gives to create a workspace.
type SpawnInput struct {
	Template string            `json:"template" jsonschema:"name of the template (see list_templates)"`
	Name     string            `json:"name,omitempty" jsonschema:"display name; the id is derived from it when id is empty"`
	ID       string            `json:"id,omitempty" jsonschema:"workspace id: lower-case letters, digits and '-', at most 40 characters"`
	Context  map[string]string `json:"context,omitempty" jsonschema:"values the template's placeholders need (e.g. repository URL)"`
	// Namespace is where to create it (MCP; the REST API takes it from the path).
	Namespace string `json:"namespace,omitempty" jsonschema:"watched namespace to create it in (whoami lists them); empty: nogoo9's own namespace"`
}

// Spawn creates a workspace owned by the caller and returns at once (the pod is Pending).
func (s *Service) Spawn(ctx context.Context, in SpawnInput) (*Workspace, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if in.Template == "" {
		return nil, errorf(CodeInvalid, "template is empty: name one of the templates list_templates shows")
	}
	if err := templates.ValidateName(in.Template); err != nil {
		return nil, errorf(CodeInvalid, "%v: name one of the templates list_templates shows; a team namespace's template is used by spawning in that namespace", err)
	}
	if in.Namespace != "" {
		if ns, _ := ctx.Value(namespaceKey{}).(string); ns != "" && ns != in.Namespace {
			return nil, errorf(CodeInvalid, "namespace %s in the body differs from namespace %s in the path: give one of them", workspace.Quote(in.Namespace), workspace.Quote(ns))
		}
		ctx = WithNamespace(ctx, in.Namespace)
	}
	ns, err := s.namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.maySpawnIn(ctx, c, ns); err != nil {
		return nil, err
	}
	// An early, clear refusal; the spawner looks the template up again and builds the pod from it.
	if t, ok := s.cfg.Templates.Get(s.SpawnKey(ns, in.Template)); !ok || t == nil {
		return nil, errorf(CodeNotFound, "template %q not found (or not valid) for namespace %s: list_templates shows the available ones", in.Template, ns)
	}
	id := in.ID
	if id == "" {
		id = workspace.IDFromName(in.Name)
	}
	if id == "" {
		return nil, errorf(CodeInvalid, "give an id (e.g. \"my-project\") or a name with letters or digits to derive it from")
	}
	if err := workspace.ValidateID(id); err != nil {
		return nil, errorf(CodeInvalid, "%s", err.Error())
	}
	if err := workspace.ValidateName(in.Name); err != nil {
		return nil, errorf(CodeInvalid, "%s", err.Error())
	}
	name := in.Name
	if name == "" {
		name = id
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	pod, err := s.cfg.Spawner.Spawn(wctx, SpawnRequest{Owner: c.Subject, ID: id, Name: name, Template: in.Template, Context: in.Context, Namespace: ns})
	if err != nil {
		return nil, err
	}
	s.recent.add(pod.Namespace, id, c.Subject, s.cfg.Now())
	// The pod carries the version the spawner built it from (its own lookup, a moment later).
	w := describe([]*corev1.Pod{pod}, workspace.TemplateVersion(pod), s.cfg.Now())
	return &w, nil
}

// DeleteResult says which pods are being deleted.
type DeleteResult struct {
	ID     string   `json:"id"`
	Status string   `json:"status" jsonschema:"always \"deleting\": the pods terminate in the background"`
	Pods   []string `json:"pods"`
}

// Delete deletes every pod of a workspace (UID preconditions, so a newer pod reusing a name is
// never hit). Persistent volume claims stay: delete them with kubectl when the data can go.
//
// A workspace in maintenance is an operator's: only an admin may delete it. Its owner is refused
// with CodeConflict, as for an upgrade: a spawn of the same id would mount the claims the delete
// leaves on a fresh pod without the maintenance, in the middle of the operator's work. The check
// is made on the pods the API server lists (the first pass below), so a maintenance set a moment
// ago and not in the cache yet holds too.
//
// A pod already going when the delete meets it (evicted by a drain, its preStop still running;
// retired by an upgrade) is marked nogoo9/deleted-at before the others are deleted: the
// controller copies a pod Kubernetes deletes for a disruption so the workspace survives it, and
// without the mark it made that copy again once the delete had removed the first (its name free
// again), bringing the deleted workspace back. A pod deleted here is not marked (no request more
// on the usual path): its delete carries no DisruptionTarget, so it is never copied, unless the
// second pass finds it marked by an eviction that raced this delete.
func (s *Service) Delete(ctx context.Context, id string) (*DeleteResult, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	owner := workspace.Owner(workspace.Active(pods))
	res := &DeleteResult{ID: id, Status: "deleting"}
	// The upgrade controller may be creating the workspace's next pod right now, unseen by the
	// cache. Each side writes, then reads what the other wrote: the controller creates its pod and
	// then re-reads the old one (deleting its own pod if the old one is going), and this deletes
	// what the API server lists and then lists again. Whatever the interleaving, one of the two
	// sees the other's write, so no pod outlives the workspace. Unless the controller is killed
	// between its create and its re-read: the sweep, in the background, deletes a pod made from
	// one deleted here that lands after the second list.
	gone, deleted := map[types.UID]bool{}, map[types.UID]bool{}
	defer func() {
		if len(gone) > 0 && s.cfg.DeleteSweep > 0 {
			go s.sweep(context.WithoutCancel(ctx), id, owner, gone)
		}
	}()
	for pass := 0; pass < 2; pass++ {
		live, err := s.livePods(ctx, id, owner)
		if err != nil {
			return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("listing the pods of workspace %q failed; try again", id), Err: err}
		}
		if pass == 0 && len(live) == 0 {
			live = pods
		}
		if pass == 0 && !c.IsAdmin {
			if reason, ok := workspace.InMaintenance(workspace.GroupByID(live)[id]); ok {
				return nil, inMaintenance(id, reason, "deleted", "delete")
			}
		}
		for _, p := range live {
			// A pod already going (evicted, its node lost) is the workspace's too: a copy the
			// controller makes of it is swept as well, and it is marked first, so the
			// controller makes none once the live pods (a copy among them) are deleted below.
			gone[p.UID] = true
			if p.DeletionTimestamp == nil || p.Annotations[workspace.AnnDeletedAt] != "" || (deleted[p.UID] && !lifecycle.Disrupted(p)) {
				continue
			}
			if err := s.markDeleted(ctx, p); err != nil {
				return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("marking pod %s, which is already being deleted, as deleted by its owner failed; try again", p.Name), Err: err}
			}
		}
		for _, p := range live {
			if p.DeletionTimestamp != nil {
				continue
			}
			del := &corev1.Pod{}
			del.Name, del.Namespace = p.Name, p.Namespace
			err := s.cfg.Client.Delete(ctx, del, client.Preconditions{UID: &p.UID})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("deleting pod %s failed; try again", p.Name), Err: err}
			}
			deleted[p.UID] = true
			res.Pods = append(res.Pods, p.Name)
		}
	}
	return res, nil
}

// markDeleted writes nogoo9/deleted-at on p, a pod of a workspace being deleted that was already
// going, as the pod p is (the UID in the patch): a pod gone or replaced since needs none.
func (s *Service) markDeleted(ctx context.Context, p *corev1.Pod) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID, "annotations": map[string]string{
		workspace.AnnDeletedAt: s.cfg.Now().UTC().Format(time.RFC3339),
	}}})
	if err != nil {
		return err
	}
	target := &corev1.Pod{}
	target.Name, target.Namespace = p.Name, p.Namespace
	err = s.cfg.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// madeFrom are the keys naming the pod a pod was made from: an upgrade's or a rollback's, a stop's
// copy, a start's.
var madeFrom = []string{workspace.AnnUpgradeFromUID, workspace.AnnStoppedFromUID, workspace.AnnStartedFromUID}

// sweep looks for pods of the deleted workspace id made from a pod in gone (and from those, in
// turn) for DeleteSweep after a delete, and deletes them: a controller killed between its create
// and the re-read that would have undone it leaves one behind. A pod of a workspace spawned anew
// under the same id is made from none of them and stays.
func (s *Service) sweep(ctx context.Context, id, owner string, gone map[types.UID]bool) {
	log := ctrl.LoggerFrom(ctx).WithValues("workspace", id)
	window := s.cfg.DeleteSweep
	start := time.Now()
	for _, at := range []time.Duration{window / 16, window / 4, window / 2, window} {
		t := time.NewTimer(at - time.Since(start))
		<-t.C
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		live, err := s.livePods(lctx, id, owner)
		if err != nil {
			log.Error(err, "cannot list the pods of a deleted workspace")
		}
		for _, p := range live {
			if p.DeletionTimestamp != nil || !slices.ContainsFunc(madeFrom, func(k string) bool { return gone[types.UID(p.Annotations[k])] }) {
				continue
			}
			gone[p.UID] = true
			err := s.cfg.Client.Delete(lctx, p, client.Preconditions{UID: &p.UID})
			if err != nil && !apierrors.IsNotFound(err) {
				log.Error(err, "cannot delete a pod made from a deleted workspace's pod", "pod", p.Name)
				continue
			}
			log.Info("Deleted a pod made from a deleted workspace's pod after the delete", "pod", p.Name)
		}
		cancel()
	}
}

// livePods lists workspace id's pods owned by owner from the API server.
func (s *Service) livePods(ctx context.Context, id, owner string) ([]*corev1.Pod, error) {
	reader := s.cfg.APIReader
	if reader == nil {
		reader = s.cfg.Cache
	}
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.InNamespace(s.nsOf(ctx)),
		client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id}); err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if workspace.Owner(&list.Items[i]) == owner {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// livePodsOf reads the pods of the workspace of cached (the cache's pods of one workspace) from
// the API server, newest first, for a decision the cache may be behind on (a stop or a start a
// moment ago, an admin's rollback, pin or maintenance). A workspace the API server no longer
// lists is not found.
func (s *Service) livePodsOf(ctx context.Context, cached []*corev1.Pod) ([]*corev1.Pod, error) {
	active := workspace.Active(cached)
	id := workspace.ID(active)
	live, err := s.livePods(WithNamespace(ctx, active.Namespace), id, workspace.Owner(active))
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("reading the pods of workspace %q failed; try again", id), Err: err}
	}
	pods := workspace.GroupByID(live)[id]
	if len(pods) == 0 {
		return nil, notFound(id)
	}
	return pods, nil
}

// maxIntentTries bounds how often an intent write (upgrade, rollback) whose pod changed since it
// was read is decided again on the pod as the API server has it.
const maxIntentTries = 5

// intentDecision is what an upgrade or a rollback decides on a workspace's pods: the answer, and
// the annotations to write on the active pod for it (none: the answer stands without a write).
type intentDecision func(ctx context.Context, pods []*corev1.Pod) (res *UpgradeResult, ann map[string]any, err error)

// writeIntent decides on pods (the cache's) and writes the decision's annotations to the active
// pod with the resourceVersion it decided on as a precondition (metadata.resourceVersion in the
// merge patch). A pod that changed since (an admin's rollback, a pin or a maintenance the cache
// has not shown yet, an upgrade that replaced it) refuses the write with 409: the workspace is
// read again from the API server and decided on again, at most maxIntentTries times. Where the
// cache is current this is the one write it was before; only a pod that changed costs a read.
// The whole is bounded by WriteTimeout, so a caller gets an answer (503) even when the API
// server holds the write. what names the intent in messages ("upgrade", "rollback",
// "maintenance").
func (s *Service) writeIntent(ctx context.Context, pods []*corev1.Pod, what string, decide intentDecision) (*UpgradeResult, error) {
	id := workspace.ID(workspace.Active(pods))
	wctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	for try := 1; ; try++ {
		res, ann, err := decide(wctx, pods)
		if err != nil || ann == nil {
			return res, err
		}
		active := workspace.Active(pods)
		meta := map[string]any{"annotations": ann}
		if active.ResourceVersion != "" {
			meta["resourceVersion"] = active.ResourceVersion
		}
		patch, _ := json.Marshal(map[string]any{"metadata": meta})
		target := &corev1.Pod{}
		target.Name, target.Namespace = active.Name, active.Namespace
		err = s.cfg.Client.Patch(wctx, target, client.RawPatch(types.MergePatchType, patch))
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info(what+" recorded", "workspace", id, "owner", res.Owner, "pod", active.Name, "upgradePod", res.PodName, "to", res.To, "tries", try)
			return res, nil
		case apierrors.IsInvalid(err):
			return nil, refusedAsInvalid(what, id, err)
		case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
			return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("recording the %s of workspace %q failed; try again", what, id), Err: err}
		case try == maxIntentTries:
			return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf("workspace %q changed %d times while its %s was being recorded, so nothing was written; look at it again and retry", id, maxIntentTries, what), Err: err}
		}
		// The pod changed (409) or is gone (404) since it was read: decide again on what the API
		// server has now.
		if pods, err = s.livePodsOf(wctx, pods); err != nil {
			return nil, err
		}
	}
}

// UpgradeResult is the answer to an upgrade request.
type UpgradeResult struct {
	// Namespace is the workspace's namespace.
	Namespace string `json:"namespace,omitempty"`
	ID        string `json:"id"`
	Owner     string `json:"owner,omitempty"`
	Status    string `json:"status" jsonschema:"\"upgrading\" (intent recorded or already in progress), \"upToDate\" (nothing to do), \"skipped\" (upgrade-all: in maintenance) or \"failed\""`
	PodName   string `json:"podName,omitempty" jsonschema:"the pod the controller creates for the new version"`
	From      string `json:"fromVersion,omitempty"`
	To        string `json:"toVersion,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Upgrade records the upgrade intent on the workspace's active pod and returns at once. A
// workspace in maintenance is an operator's decision: only an admin may upgrade it (and the
// maintenance stays on the new pod); its owner is refused with CodeConflict. The decision holds
// on the pod the intent is written to (writeIntent): a rollback, pin or maintenance written a
// moment before, not in the cache yet, is seen, never overwritten.
func (s *Service) Upgrade(ctx context.Context, id string) (*UpgradeResult, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.upgrade(ctx, pods, func(pods []*corev1.Pod) (*UpgradeResult, error) {
		if reason, ok := workspace.InMaintenance(pods); ok && !c.IsAdmin {
			return nil, inMaintenance(id, reason, "upgraded", "upgrade")
		}
		return nil, nil
	})
}

// inMaintenance is the refusal of a user's action on a workspace in maintenance: done is what the
// workspace cannot be ("upgraded"), do what an admin can do instead ("upgrade").
func inMaintenance(id, reason, done, do string) *Error {
	return errorf(CodeConflict, "workspace %q is in maintenance (%q): an operator took it out of service, so it cannot be %s now; ask an admin, who can lift the maintenance or %s it", id, reason, done, do)
}

// upgrade records the upgrade intent of the workspace of pods (writeIntent). gate, when set, is
// asked first on every decision (on the cache's pods, then on the API server's after a conflict):
// an answer or an error from it stands, and nothing is written.
func (s *Service) upgrade(ctx context.Context, pods []*corev1.Pod, gate func([]*corev1.Pod) (*UpgradeResult, error)) (*UpgradeResult, error) {
	return s.writeIntent(ctx, pods, "upgrade", func(_ context.Context, pods []*corev1.Pod) (*UpgradeResult, map[string]any, error) {
		if gate != nil {
			if r, err := gate(pods); r != nil || err != nil {
				return r, nil, err
			}
		}
		return s.decideUpgrade(pods)
	})
}

// decideUpgrade is what an upgrade of the workspace of pods does: the answer and the intent to
// write (none when the answer needs no write).
func (s *Service) decideUpgrade(pods []*corev1.Pod) (*UpgradeResult, map[string]any, error) {
	active := workspace.Active(pods)
	id, owner := workspace.ID(active), workspace.Owner(active)
	res := &UpgradeResult{Namespace: active.Namespace, ID: id, Owner: owner, From: workspace.TemplateVersion(active)}
	if active.DeletionTimestamp != nil {
		return nil, nil, errorf(CodeConflict, "workspace %q is being deleted; it cannot be upgraded", id)
	}
	if up := upgradeInFlight(pods); up != nil {
		// The controller is upgrading it (e.g. a Recreate started with kubectl, whose old pod is
		// already gone): say so with the pod it creates, never "upToDate".
		res.Status, res.PodName, res.From, res.To = "upgrading", up.Name, up.Annotations[workspace.AnnUpgradeFromVersion], workspace.TemplateVersion(up)
		return res, nil, nil
	}
	if podName := active.Annotations[workspace.AnnUpgradePod]; active.Annotations[workspace.AnnUpgradeRequested] != "" {
		// Requested already (by someone else, e.g. an admin's rollback to the version it names):
		// that request stands.
		res.Status, res.PodName, res.To = "upgrading", podName, active.Annotations[workspace.AnnTargetVersion]
		return res, nil, nil
	}
	name := workspace.TemplateKey(active)
	t, ok := s.cfg.Templates.Get(name)
	if !ok || t == nil {
		return nil, nil, errorf(CodeConflict, "template %q of workspace %q is gone or not valid; fix the template before upgrading", name, id)
	}
	res.To = t.Version
	if t.Version == res.From {
		res.Status = "upToDate"
		return res, nil, nil
	}
	if updatepolicy.IsPinned(active) {
		return nil, nil, errorf(CodeConflict, "workspace %q is pinned to version %s: unpin it first, then upgrade it", id, res.From)
	}
	podName := workspace.NextPodName(active, t.Version)
	res.Status, res.PodName = "upgrading", podName
	// Every companion of the intent is named: a person who withdrew an earlier request could
	// remove only its intent, and its target version or policy mark would be read as this one's.
	return res, map[string]any{
		workspace.AnnUpgradeRequested: s.cfg.Now().UTC().Format(time.RFC3339),
		workspace.AnnUpgradePod:       podName,
		workspace.AnnTargetVersion:    nil,
		workspace.AnnAutoUpgrade:      nil,
	}, nil
}

// upgradeInFlight is the upgraded pod of an upgrade the controller has not concluded, or nil.
func upgradeInFlight(pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if p.Annotations[workspace.AnnUpgradeFrom] != "" && workspace.UpgradeInFlight(p, pods) {
			return p
		}
	}
	return nil
}

// everyWorkspace returns every user's workspaces (each its pods) of the namespace ctx names, or
// of every watched namespace when ctx names none: what upgrade-all and a template's rollback act
// on. The caller must be an admin.
func (s *Service) everyWorkspace(ctx context.Context) ([][]*corev1.Pod, error) {
	only, _ := ctx.Value(namespaceKey{}).(string)
	if only != "" {
		var err error
		if only, err = s.namespace(ctx); err != nil {
			return nil, err
		}
	}
	var groups [][]*corev1.Pod
	for _, ns := range s.Namespaces() {
		if only != "" && ns != only {
			continue
		}
		if ns == s.cfg.Namespace && s.views != nil && s.views.synced() {
			entries, _ := s.views.snapshot("", true, "", 0)
			for _, e := range entries {
				groups = append(groups, e.podList())
			}
			continue
		}
		pods, err := s.listPods(WithNamespace(ctx, ns))
		if err != nil {
			return nil, err
		}
		for _, g := range workspace.GroupByID(pods) {
			groups = append(groups, g)
		}
	}
	return groups, nil
}

// UpgradeAll requests an upgrade of every outdated workspace of every user in every watched
// namespace (admins only; one namespace when ctx names one). It returns one entry per outdated
// workspace; those in maintenance are skipped (status "skipped", with the reason): an admin
// upgrades them one by one if needed.
func (s *Service) UpgradeAll(ctx context.Context) ([]UpgradeResult, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if !c.IsAdmin {
		return nil, errorf(CodeForbidden, "%s", MsgUpgradeAllForAdmin)
	}
	groups, err := s.everyWorkspace(ctx)
	if err != nil {
		return nil, err
	}
	memo := map[string]string{}
	var todo [][]*corev1.Pod
	for _, g := range groups {
		active := workspace.Active(g)
		latest := s.latestVersion(memo, g)
		if latest != "" && workspace.TemplateVersion(active) != latest && active.DeletionTimestamp == nil {
			todo = append(todo, g)
		}
	}
	// skip is the entry of a workspace upgrade-all leaves alone: asked here on the cache's pods,
	// and again on the API server's when a write finds its pod changed (a pin or a maintenance
	// set a moment ago).
	skip := func(g []*corev1.Pod) (*UpgradeResult, error) {
		latest := s.templateVersion(workspace.TemplateKey(workspace.Active(g)))
		if r, ok := pinnedSkip(g, latest); ok {
			return &r, nil
		}
		if reason, ok := workspace.InMaintenance(g); ok {
			a := workspace.Active(g)
			return &UpgradeResult{Namespace: a.Namespace, ID: workspace.ID(a), Owner: workspace.Owner(a), Status: "skipped",
				From: workspace.TemplateVersion(a), To: latest,
				Error: fmt.Sprintf("workspace %q is in maintenance (%q) and was not upgraded: lift the maintenance first, or upgrade it on its own", workspace.ID(a), reason)}, nil
		}
		return nil, nil
	}
	var skipped []UpgradeResult
	kept := todo[:0]
	for _, g := range todo {
		if r, _ := skip(g); r != nil {
			skipped = append(skipped, *r)
			continue
		}
		kept = append(kept, g)
	}
	todo = kept
	out := make([]UpgradeResult, len(todo), len(todo)+len(skipped))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(s.cfg.UpgradeAllWorkers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r, err := s.upgrade(ctx, todo[i], skip)
				if err != nil {
					a := workspace.Active(todo[i])
					r = &UpgradeResult{Namespace: a.Namespace, ID: workspace.ID(a), Owner: workspace.Owner(a), Status: "failed", Error: err.Error()}
				}
				out[i] = *r
			}
		}()
	}
	for i := range todo {
		work <- i
	}
	close(work)
	wg.Wait()
	out = append(out, skipped...)
	sortResults(out)
	return out, nil
}

// sortResults sorts the answer of upgrade-all and of a template's rollback by namespace, then id.
func sortResults(out []UpgradeResult) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
}

// SetMaintenance takes a workspace out of service with reason, or (reason "") back into it.
// Admins only.
//
// Taking it out of service withdraws an upgrade requested before that the controller has not
// started (it waits behind --max-concurrent-upgrades, say): accepted while the workspace was in
// service, it must not be carried out during the maintenance. The maintenance and the withdrawal
// go to the active pod in one write, decided on the pods the API server has and conditional on
// the version decided on (writeIntent): a request written a moment before is seen, and one written
// after is refused (the owner's) or made under the maintenance (an admin's). An upgrade in flight
// is never touched: it completes or rolls back, and the maintenance goes on with it. The answer's
// message says when a request was withdrawn.
func (s *Service) SetMaintenance(ctx context.Context, id, reason string) (*Workspace, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if !c.IsAdmin {
		return nil, errorf(CodeForbidden, "Forbidden: only admin users can set maintenance")
	}
	if err := ValidateMaintenanceReason(reason); err != nil {
		return nil, err
	}
	_, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	var val any
	var withdrawn *UpgradeResult
	if reason != "" {
		val = reason
		if withdrawn, pods, err = s.takeOutOfService(ctx, pods, reason); err != nil {
			return nil, err
		}
	}
	// Every live pod, the ones the cache does not show yet included (patchLive): a maintenance
	// written only to a pod that an upgrade is deleting would be lost.
	after, err := s.patchLive(ctx, pods, map[string]any{workspace.AnnMaintenance: val})
	if err != nil {
		return nil, err
	}
	// The answer describes the workspace after this write (phase Unavailable, or back in
	// service), not the cache's copy from before it.
	w := s.describeNow(after)
	if withdrawn != nil {
		to := ""
		if withdrawn.To != "" {
			to = " to version " + withdrawn.To
		}
		w.Message += fmt.Sprintf("; the upgrade%s requested before, not started yet, was withdrawn: an admin may upgrade it during the maintenance, its owner once it is lifted", to)
	}
	return w, nil
}

// MaxMaintenanceReason bounds a maintenance reason (nogoo9/maintenance), in bytes: a sentence or
// two for the pages and lists that show it, far below the 256 KiB the API server allows all of a
// pod's annotations together.
const MaxMaintenanceReason = 1024

// ValidateMaintenanceReason reports why reason cannot be a maintenance reason, or nil: "" (back
// into service) or at most MaxMaintenanceReason bytes of valid UTF-8 without control characters
// that is not only blanks (as workspace.ValidateName for a display name).
func ValidateMaintenanceReason(reason string) error {
	switch {
	case reason == "":
		return nil
	case len(reason) > MaxMaintenanceReason:
		return errorf(CodeInvalid, "maintenance reason %s is %d bytes long: use at most %d, a sentence saying why the workspace is out of service", workspace.Quote(reason), len(reason), MaxMaintenanceReason)
	case !utf8.ValidString(reason):
		return errorf(CodeInvalid, "maintenance reason %s is not valid UTF-8: use plain text", workspace.Quote(reason))
	case strings.TrimSpace(reason) == "":
		return errorf(CodeInvalid, "maintenance reason %s is blank: say why the workspace is out of service, or give an empty reason to put it back into service", workspace.Quote(reason))
	}
	if i := strings.IndexFunc(reason, unicode.IsControl); i >= 0 {
		return errorf(CodeInvalid, "maintenance reason %s has a control character at byte %d: use printable text on one line (no line breaks or tabs)", workspace.Quote(reason), i)
	}
	return nil
}

// takeOutOfService writes maintenance reason to the active pod of the workspace of pods (the
// cache's) as the API server has it, withdrawing in the same write a requested upgrade the
// controller has not started (see SetMaintenance). It returns that request (nil: none), and the
// workspace's pods as the write left them. A workspace already in maintenance is left to
// patchLive: a request made since is an admin's, made under the maintenance.
func (s *Service) takeOutOfService(ctx context.Context, pods []*corev1.Pod, reason string) (*UpgradeResult, []*corev1.Pod, error) {
	live, err := s.livePodsOf(ctx, pods)
	if err != nil {
		return nil, nil, err
	}
	var decided []*corev1.Pod
	var withdrawn *UpgradeResult
	_, err = s.writeIntent(ctx, live, "maintenance", func(_ context.Context, pods []*corev1.Pod) (*UpgradeResult, map[string]any, error) {
		decided, withdrawn = pods, nil
		if _, ok := workspace.InMaintenance(pods); ok {
			return nil, nil, nil
		}
		active := workspace.Active(pods)
		res := &UpgradeResult{Namespace: active.Namespace, ID: workspace.ID(active), Owner: workspace.Owner(active), From: workspace.TemplateVersion(active)}
		ann := map[string]any{workspace.AnnMaintenance: reason}
		if _, requested := active.Annotations[workspace.AnnUpgradeRequested]; requested && upgradeInFlight(pods) == nil {
			for _, k := range upgrade.IntentKeys() {
				ann[k] = nil
			}
			res.Status, res.PodName, res.To = "withdrawn", active.Annotations[workspace.AnnUpgradePod], active.Annotations[workspace.AnnTargetVersion]
			if res.To == "" {
				res.To = s.templateVersion(workspace.TemplateKey(active))
			}
			withdrawn = res
		}
		return res, ann, nil
	})
	if err != nil {
		return nil, nil, err
	}
	if withdrawn == nil {
		return nil, decided, nil
	}
	after := slices.Clone(decided)
	active := workspace.Active(decided)
	for i, p := range after {
		if p == active {
			after[i] = p.DeepCopy()
			for _, k := range upgrade.IntentKeys() {
				delete(after[i].Annotations, k)
			}
		}
	}
	return withdrawn, after, nil
}
