package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Event reasons on template ConfigMaps.
const (
	ReasonTemplateLoaded  = "TemplateLoaded"
	ReasonTemplateInvalid = "TemplateInvalid"
	// ReasonTemplateNameClash: a ConfigMap has the name of a --template-dir file; the file is
	// served and the ConfigMap ignored until one of them is renamed or removed.
	ReasonTemplateNameClash = "TemplateNameClash"
)

// Options configures the registry.
type Options struct {
	// Namespace is nogoo9's namespace: its template ConfigMaps (and the --template-dir files)
	// serve workspaces of every namespace. Empty: every ConfigMap the cache sees counts as one of
	// nogoo9's namespace (tests).
	Namespace string
	// NamespaceTemplates (--namespace-templates) also serves the template ConfigMaps of the other
	// namespaces the cache holds (the watched ones), each only to workspaces of its own namespace
	// (LookupNamespace). False: templates come from Namespace only.
	NamespaceTemplates bool
	// TemplateDir holds local YAML templates (--template-dir); empty for none.
	TemplateDir string
	// FileRescan is how often TemplateDir is read again (default 10s; negative: read once).
	FileRescan time.Duration
	// Policy is what a template's pod may ask for (--template-policy and friends); nil means
	// DefaultPolicy. A version that violates it is invalid like any other broken version.
	Policy *Policy
}

// Registry holds the last valid version of every template from both sources. A name defined by
// both a --template-dir file and a ConfigMap of nogoo9's namespace is a clash: the file (written
// by whoever runs nogoo9) is served, the ConfigMap is reported and ignored. Templates are keyed
// by workspace.JoinTemplateKey: the name for nogoo9's namespace and the files, "<ns>/<name>" for
// a team template of a watched namespace. It is safe for concurrent use.
type Registry struct {
	opts     Options
	log      logr.Logger
	recorder events.EventRecorder
	// informers is the manager's cache; nil for NewStatic.
	informers cache.Informers
	// reg is the ConfigMap handler Setup registered (nil: Start registers it).
	reg toolscache.ResourceEventHandlerRegistration

	mu    sync.RWMutex
	cms   map[string]*entry // by key (workspace.JoinTemplateKey)
	files map[string]*entry // by template name
	subs  []func(name string)

	synced atomic.Bool
	// syncedCh is closed once the ConfigMap informer has delivered its initial list.
	syncedCh chan struct{}
}

type entry struct {
	info    Info
	valid   *Template
	hash    string
	lastErr string
	rv      string
	// obj is the last ConfigMap seen (ConfigMap entries only), for Events.
	obj *corev1.ConfigMap
	// clash is set on a ConfigMap entry while a file template has the same name.
	clash bool
}

func newRegistry(opts Options, log logr.Logger, rec events.EventRecorder) *Registry {
	if opts.FileRescan == 0 {
		opts.FileRescan = 10 * time.Second
	}
	if opts.Policy == nil {
		p := DefaultPolicy()
		opts.Policy = &p
	}
	return &Registry{opts: opts, log: log, recorder: rec, cms: map[string]*entry{}, files: map[string]*entry{}, syncedCh: make(chan struct{})}
}

// NewStatic is a registry serving fixed templates, already synced: for tests of packages that
// need a Registry without an API server.
func NewStatic(ts ...*Template) *Registry {
	r := newRegistry(Options{FileRescan: -1}, logr.Discard(), nil)
	r.opts.NamespaceTemplates = true
	for _, t := range ts {
		r.cms[workspace.JoinTemplateKey(t.Namespace, t.Name)] = &entry{valid: t.DeepCopy(), hash: hashTemplate(t), info: Info{Name: t.Name, Namespace: t.Namespace, Version: t.Version, Description: t.Description, Source: t.Source, Valid: true, ServingVersion: t.Version}}
	}
	r.markSynced()
	return r
}

// Setup creates the registry, loads --template-dir and adds a runnable (on every replica, not
// only the leader) that watches template ConfigMaps through the manager's cache. A new version is
// served as soon as the informer delivers it.
func Setup(mgr ctrl.Manager, opts Options) (*Registry, error) {
	r := newRegistry(opts, mgr.GetLogger().WithName("templates"), mgr.GetEventRecorder("nogoo9-templates"))
	r.informers = mgr.GetCache()
	var err error
	if r.reg, err = r.addHandler(context.Background()); err != nil {
		return nil, err
	}
	if opts.TemplateDir != "" {
		if err := r.rescanFiles(); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(r); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("templates", func(*http.Request) error {
		if !r.Synced() {
			return fmt.Errorf("template ConfigMaps not synced yet")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return r, nil
}

// NeedLeaderElection: every replica serves templates.
func (r *Registry) NeedLeaderElection() bool { return false }

// Get returns a copy of the last valid version of the template key names: a template of nogoo9's
// namespace by its name, a team template as "<ns>/<name>" (workspace.TemplateKey of a pod). A
// name a --template-dir file defines is served from the file only, even while the file is
// invalid: a ConfigMap of the same name never takes it over. Without NamespaceTemplates a team
// key finds nothing.
func (r *Registry) Get(key string) (*Template, bool) {
	if t, ok := r.served(key); ok {
		return t.DeepCopy(), true
	}
	return nil, false
}

// Shared is a view of r whose Get and Resolve hand out the registry's own value of each template
// instead of a copy, for callers that only read it: the upgrade controller asks on every pass of
// every workspace (six passes per side-by-side upgrade; a copy of the template per pass was about
// 4% of nogoo9's allocations in bulk upgrades), the update-policy runner for every workspace on
// every tick, the front end for every workspace list, and main.go gives it to every reader (the
// history recorder, the proxy, the spawner's BuildPod too). The value is shared by every caller
// and goroutine: a caller must not write into it (copy it first: Template.DeepCopy). The registry
// never changes a template it has handed out: a new version, or a new content, is a new value.
type Shared struct{ r *Registry }

// Shared returns the read-only view of r.
func (r *Registry) Shared() Shared { return Shared{r: r} }

// Get is Registry.Get without the copy: read only (see Shared).
func (s Shared) Get(key string) (*Template, bool) { return s.r.served(key) }

// Resolve is Registry.Resolve without the copy: read only (see Shared).
func (s Shared) Resolve(ns, name string) (*Template, string, bool) {
	key := s.r.resolveKey(ns, name)
	t, ok := s.r.served(key)
	return t, key, ok
}

// Subscribe is Registry.Subscribe.
func (s Shared) Subscribe(fn func(name string)) { s.r.Subscribe(fn) }

// Synced is Registry.Synced.
func (s Shared) Synced() bool { return s.r.Synced() }

// WaitForSync is Registry.WaitForSync.
func (s Shared) WaitForSync(ctx context.Context) bool { return s.r.WaitForSync(ctx) }

// List is Registry.List (its Infos are copies already).
func (s Shared) List() []Info { return s.r.List() }

// ListFor is Registry.ListFor.
func (s Shared) ListFor(ns string) []Info { return s.r.ListFor(ns) }

// served is the stored last valid version of the template key names (see Get); never written
// into once stored (apply replaces it).
func (r *Registry) served(key string) (*Template, bool) {
	ns, name := keyNamespace(key, r.opts.Namespace)
	r.mu.RLock()
	defer r.mu.RUnlock()
	var e *entry
	var ok bool
	switch {
	case ns == "":
		if e, ok = r.files[name]; !ok {
			e, ok = r.cms[name]
		}
	case r.opts.NamespaceTemplates:
		e, ok = r.cms[workspace.JoinTemplateKey(ns, name)]
	}
	if ok && e.valid != nil {
		return e.valid, true
	}
	return nil, false
}

// Resolve applies the lookup rule for a spawn of template name in namespace ns: ns's own
// template ConfigMap of that name if there is one (LookupNamespace), else nogoo9's. It returns
// the key it looked up (what the workspace will follow) with the template, if valid.
func (r *Registry) Resolve(ns, name string) (*Template, string, bool) {
	key := r.resolveKey(ns, name)
	t, ok := r.Get(key)
	return t, key, ok
}

// resolveKey is the key Resolve looks up for a spawn of template name in namespace ns.
func (r *Registry) resolveKey(ns, name string) string {
	r.mu.RLock()
	_, inNS := r.cms[workspace.JoinTemplateKey(ns, name)]
	r.mu.RUnlock()
	return workspace.JoinTemplateKey(LookupNamespace(ns, r.opts.Namespace, r.opts.NamespaceTemplates, inNS), name)
}

// ListFor is what a caller in namespace ns is offered (Visible): ns's templates and nogoo9's
// not shadowed by one of them, each with its Namespace. "" is nogoo9's namespace.
func (r *Registry) ListFor(ns string) []Info {
	if !r.opts.NamespaceTemplates {
		ns = r.opts.Namespace
	}
	return Visible(r.List(), ns, r.opts.Namespace)
}

// Home is nogoo9's namespace, whose templates serve every namespace.
func (r *Registry) Home() string { return r.opts.Namespace }

// List returns every template of both sources and every namespace, invalid ones included, sorted
// by name (ConfigMaps before files of the same name, then by namespace). A ConfigMap that clashes
// with a file is listed as invalid.
func (r *Registry) List() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Info, 0, len(r.cms)+len(r.files))
	for key, e := range r.cms {
		out = append(out, r.cmInfoLocked(key, e))
	}
	for _, e := range r.files {
		out = append(out, e.info)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		if out[i].Source != out[j].Source {
			return out[i].Source < out[j].Source
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out
}

// Subscribe registers fn, called with a template's key (see Get) after its served version or
// content changes (or it disappears). fn runs on the informer's goroutine: it must not block (enqueue and
// return).
func (r *Registry) Subscribe(fn func(name string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, fn)
}

// Synced reports whether the ConfigMap source has delivered its initial list.
func (r *Registry) Synced() bool { return r.synced.Load() }

// WaitForSync blocks until Synced or ctx ends, and reports Synced.
func (r *Registry) WaitForSync(ctx context.Context) bool {
	select {
	case <-r.syncedCh:
		return true
	case <-ctx.Done():
		return r.Synced()
	}
}

func (r *Registry) markSynced() {
	if r.synced.CompareAndSwap(false, true) {
		close(r.syncedCh)
	}
}

func (r *Registry) notify(key string) {
	r.mu.RLock()
	subs := append([]func(string){}, r.subs...)
	r.mu.RUnlock()
	for _, fn := range subs {
		fn(key)
	}
}

// apply records the outcome of decoding one source of the template at key (name in namespace
// ns, "" for nogoo9's) and says whether the served template changed and whether the error is
// new.
func (r *Registry) apply(m map[string]*entry, key, source string, t *Template, err error, ann map[string]string) (changed, newErr bool) {
	ns, name := keyNamespace(key, r.opts.Namespace)
	where := ns
	if ns == "" {
		where = r.opts.Namespace
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := m[key]
	if !ok {
		e = &entry{}
		m[key] = e
	}
	if err == nil {
		h := hashTemplate(t)
		changed = e.valid == nil || h != e.hash
		e.valid, e.hash, e.lastErr = t, h, ""
		e.info = Info{Name: name, Namespace: where, Version: t.Version, Description: t.Description, Source: source, Valid: true, ServingVersion: t.Version}
		return changed, false
	}
	msg := err.Error()
	newErr = msg != e.lastErr
	e.lastErr = msg
	e.info = Info{Name: name, Namespace: where, Version: ann[workspace.AnnTemplateVersion], Description: ann[workspace.AnnDescription], Source: source, Error: msg}
	if e.valid != nil {
		e.info.ServingVersion = e.valid.Version
	}
	return false, newErr
}

// cmInfoLocked is the Info of ConfigMap entry e at key as List shows it: invalid while a file
// template has the same name (nogoo9's namespace only: a team key holds a '/'). r.mu must be held.
func (r *Registry) cmInfoLocked(key string, e *entry) Info {
	info := e.info
	name := info.Name
	if f, ok := r.files[key]; ok {
		info.Valid, info.ServingVersion = false, ""
		info.Error = clashMessage(name, f.info.Source)
	}
	return info
}

func clashMessage(name, fileSource string) string {
	return fmt.Sprintf("template name %q is also defined by %s (--template-dir): the file is served and this ConfigMap is ignored; rename the ConfigMap or remove the file", name, fileSource)
}

func (r *Registry) remove(m map[string]*entry, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := m[key]
	delete(m, key)
	return ok && e.valid != nil
}

func hashTemplate(t *Template) string {
	b, _ := json.Marshal(struct {
		V, D string
		S    corev1.PodSpec
		C    []corev1.PersistentVolumeClaim
		A    map[string]string
	}{t.Version, t.Description, t.Spec, t.VolumeClaims, t.Annotations})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// DeepCopy returns a copy sharing nothing with t.
func (t *Template) DeepCopy() *Template {
	if t == nil {
		return nil
	}
	out := *t
	out.Spec = *t.Spec.DeepCopy()
	if t.VolumeClaims != nil {
		out.VolumeClaims = make([]corev1.PersistentVolumeClaim, len(t.VolumeClaims))
		for i := range t.VolumeClaims {
			t.VolumeClaims[i].DeepCopyInto(&out.VolumeClaims[i])
		}
	}
	out.Annotations = copyMap(t.Annotations)
	out.derived = newDerived(&out) // derived again from the copy, which its owner may change first
	return &out
}
