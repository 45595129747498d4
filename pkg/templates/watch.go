package templates

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Start watches template ConfigMaps (and rescans --template-dir) until ctx ends. It is the
// manager runnable added by Setup.
func (r *Registry) Start(ctx context.Context) error {
	reg := r.reg
	if reg == nil {
		var err error
		if reg, err = r.addHandler(ctx); err != nil {
			return err
		}
	}
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-ctx.Done():
		return nil // ctx ended before the first list: shutting down
	}
	r.markSynced()
	r.log.Info("template registry synced", "templates", len(r.List()))
	if r.opts.TemplateDir == "" || r.opts.FileRescan < 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(r.opts.FileRescan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.rescanFiles(); err != nil {
				r.log.Error(err, "cannot read template directory", "dir", r.opts.TemplateDir)
			}
		}
	}
}

// addHandler registers the registry on the ConfigMap informer. Setup calls it before the cache
// starts, so that the registry has the templates when the cache has synced (readiness waits for
// them): registered later, from Start, it waited for the informer to replay the ConfigMaps while
// the controllers' first pass took the CPU (about 0.1 s of the cold start at 10,000 workspaces,
// bench/history.md).
func (r *Registry) addHandler(ctx context.Context) (toolscache.ResourceEventHandlerRegistration, error) {
	inf, err := r.informers.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return nil, fmt.Errorf("watch template ConfigMaps: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onConfigMap(obj) },
		UpdateFunc: func(_, obj any) { r.onConfigMap(obj) },
		DeleteFunc: func(obj any) { r.onDelete(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("watch template ConfigMaps: %w", err)
	}
	return reg, nil
}

func (r *Registry) wanted(cm *corev1.ConfigMap) bool {
	return cm.Labels[workspace.LabelPodTemplate] == "true" && (r.opts.NamespaceTemplates || r.home(cm.Namespace))
}

// home reports whether ConfigMaps of namespace ns count as nogoo9's namespace.
func (r *Registry) home(ns string) bool { return r.opts.Namespace == "" || ns == r.opts.Namespace }

// keyOf is the registry key of template ConfigMap cm.
func (r *Registry) keyOf(cm *corev1.ConfigMap) string {
	if r.home(cm.Namespace) {
		return cm.Name
	}
	return workspace.JoinTemplateKey(cm.Namespace, cm.Name)
}

func (r *Registry) onConfigMap(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	if !r.wanted(cm) {
		// The label was removed: the ConfigMap is no template any more.
		r.onDelete(cm)
		return
	}
	key := r.keyOf(cm)
	r.mu.RLock()
	e := r.cms[key]
	same := e != nil && e.rv == cm.ResourceVersion && cm.ResourceVersion != ""
	r.mu.RUnlock()
	if same {
		return // a resync: nothing changed
	}
	source := "configmap:" + cm.Namespace + "/" + cm.Name
	t, err := r.decode(FromConfigMap(cm, source))
	if t != nil && !r.home(cm.Namespace) {
		t.Namespace = cm.Namespace
	}
	changed, newErr := r.apply(r.cms, key, source, t, err, cm.Annotations)
	r.mu.Lock()
	r.cms[key].rv = cm.ResourceVersion
	r.cms[key].obj = cm
	r.mu.Unlock()
	if began, _ := r.syncClash(key); began {
		return // reported by syncClash
	}
	if fileSource, clash := r.clashWith(key); clash {
		// Still clashing: whatever the ConfigMap now says is not served; say so again.
		r.event(cm, corev1.EventTypeWarning, ReasonTemplateNameClash, "%s", clashMessage(cm.Name, fileSource))
		return
	}
	switch {
	case err != nil && newErr:
		serving := "no version is served"
		if info := r.info(r.cms, key); info.ServingVersion != "" {
			serving = "version " + info.ServingVersion + " keeps serving"
		}
		r.log.Info("template is invalid", "configMap", klog.KObj(cm), "version", cm.Annotations[workspace.AnnTemplateVersion], "error", err.Error())
		r.event(cm, corev1.EventTypeWarning, ReasonTemplateInvalid, "Template %s version %q is invalid and not served (%s): %s", cm.Name, cm.Annotations[workspace.AnnTemplateVersion], serving, eventError(err))
	case changed:
		r.log.Info("template loaded", "configMap", klog.KObj(cm), "version", t.Version)
		r.event(cm, corev1.EventTypeNormal, ReasonTemplateLoaded, "Template %s version %q is served", cm.Name, t.Version)
		r.notify(key)
	}
}

// decode applies the template policy to a decoded template: a violation makes the version
// invalid, with every violation in the error.
func (r *Registry) decode(t *Template, err error) (*Template, error) {
	if err != nil {
		return nil, err
	}
	if err := r.opts.Policy.Check(t); err != nil {
		return nil, err
	}
	return t, nil
}

// clashWith reports whether a file template has the name of ConfigMap template name, and its
// source.
func (r *Registry) clashWith(name string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.cms[name]; !ok {
		return "", false
	}
	f, ok := r.files[name]
	if !ok {
		return "", false
	}
	return f.info.Source, true
}

// syncClash brings the clash state of template name up to date after either source changed, and
// reports a clash that begins (Warning Event on the ConfigMap, log line naming both sources) or
// ends (the ConfigMap is served again). It says whether a clash began or ended.
func (r *Registry) syncClash(name string) (began, ended bool) {
	r.mu.Lock()
	e, ok := r.cms[name]
	if !ok {
		r.mu.Unlock()
		return false, false
	}
	f, clash := r.files[name]
	was := e.clash
	e.clash = clash
	cm, served := e.obj, e.valid
	var fileSource string
	if clash {
		fileSource = f.info.Source
	}
	r.mu.Unlock()
	switch {
	case clash && !was:
		r.log.Info("template name clash: a ConfigMap has the name of a template file; the file is served and the ConfigMap ignored",
			"template", name, "configMap", klog.KObj(cm), "file", fileSource)
		r.event(cm, corev1.EventTypeWarning, ReasonTemplateNameClash, "%s", clashMessage(name, fileSource))
		r.notify(name)
		return true, false
	case !clash && was:
		r.log.Info("template name clash resolved: the ConfigMap is served", "template", name, "configMap", klog.KObj(cm))
		if served != nil {
			r.event(cm, corev1.EventTypeNormal, ReasonTemplateLoaded, "Template %s version %q is served (no template file has its name any more)", name, served.Version)
		}
		r.notify(name)
		return false, true
	}
	return false, false
}

func (r *Registry) onDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	key := r.keyOf(cm)
	r.mu.RLock()
	_, known := r.cms[key]
	r.mu.RUnlock()
	if !known {
		return
	}
	r.remove(r.cms, key)
	r.log.Info("template removed", "configMap", klog.KObj(cm))
	r.syncClash(key)
	r.notify(key)
}

func (r *Registry) info(m map[string]*entry, name string) Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := m[name]; ok {
		return e.info
	}
	return Info{}
}

func (r *Registry) event(cm *corev1.ConfigMap, typ, reason, note string, args ...any) {
	if r.recorder == nil || cm == nil {
		return
	}
	r.recorder.Eventf(cm, nil, typ, reason, "Load", "%s", fitEventNote(fmt.Sprintf(note, args...)))
}

// eventError is err as an Event says it: a policy error as its short summary.
func eventError(err error) string {
	var pe *PolicyError
	if errors.As(err, &pe) {
		return pe.Summary()
	}
	return err.Error()
}

// maxEventNote is the longest note the API server accepts on an events.k8s.io Event.
const maxEventNote = 1024

// fitEventNote cuts note to what an Event may carry (a policy error listing many violations is
// longer), saying where the whole message is.
func fitEventNote(note string) string {
	if len(note) <= maxEventNote {
		return note
	}
	const more = " [cut: the whole message is in nogoo9's log and in the template list of the API]"
	cut := maxEventNote - len(more)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + more
}

// rescanFiles reads TemplateDir again and applies what changed.
func (r *Registry) rescanFiles() error {
	all, err := LoadDir(r.opts.TemplateDir)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, l := range all {
		if seen[l.Name] {
			r.log.Info("template defined twice in the template directory; the first definition is used", "template", l.Name, "source", l.Source)
			continue
		}
		seen[l.Name] = true
		var ann map[string]string
		if l.Template != nil {
			ann = l.Template.Annotations
		}
		t, err := r.decode(l.Template, l.Err)
		changed, newErr := r.apply(r.files, l.Name, l.Source, t, err, ann)
		r.syncClash(l.Name)
		switch {
		case err != nil && newErr:
			r.log.Info("template is invalid", "template", l.Name, "source", l.Source, "error", err.Error())
		case changed:
			r.log.Info("template loaded", "template", l.Name, "source", l.Source, "version", t.Version)
			r.notify(l.Name)
		}
	}
	r.mu.RLock()
	var gone []string
	for name := range r.files {
		if !seen[name] {
			gone = append(gone, name)
		}
	}
	r.mu.RUnlock()
	for _, name := range gone {
		if r.remove(r.files, name) {
			r.notify(name)
		}
		r.syncClash(name)
	}
	return nil
}
