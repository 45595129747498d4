package templates

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Start watches template ConfigMaps (and rescans --template-dir) until ctx ends. It is the
// manager runnable added by Setup.
func (r *Registry) Start(ctx context.Context) error {
	inf, err := r.informers.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("watch template ConfigMaps: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onConfigMap(obj) },
		UpdateFunc: func(_, obj any) { r.onConfigMap(obj) },
		DeleteFunc: func(obj any) { r.onDelete(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch template ConfigMaps: %w", err)
	}
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return reg.HasSynced(), nil
	}); err != nil {
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

func (r *Registry) wanted(cm *corev1.ConfigMap) bool {
	return cm.Labels[workspace.LabelPodTemplate] == "true" && (r.opts.Namespace == "" || cm.Namespace == r.opts.Namespace)
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
	r.mu.RLock()
	e := r.cms[cm.Name]
	same := e != nil && e.rv == cm.ResourceVersion && cm.ResourceVersion != ""
	r.mu.RUnlock()
	if same {
		return // a resync: nothing changed
	}
	source := "configmap:" + cm.Namespace + "/" + cm.Name
	t, err := FromConfigMap(cm, source)
	changed, newErr := r.apply(r.cms, cm.Name, source, t, err, cm.Annotations)
	r.mu.Lock()
	r.cms[cm.Name].rv = cm.ResourceVersion
	r.mu.Unlock()
	switch {
	case err != nil && newErr:
		serving := "no version is served"
		if info := r.info(r.cms, cm.Name); info.ServingVersion != "" {
			serving = "version " + info.ServingVersion + " keeps serving"
		}
		r.log.Info("template is invalid", "configMap", klog.KObj(cm), "version", cm.Annotations[workspace.AnnTemplateVersion], "error", err.Error())
		r.event(cm, corev1.EventTypeWarning, ReasonTemplateInvalid, "Template %s version %q is invalid and not served (%s): %v", cm.Name, cm.Annotations[workspace.AnnTemplateVersion], serving, err)
	case changed:
		r.log.Info("template loaded", "configMap", klog.KObj(cm), "version", t.Version)
		r.event(cm, corev1.EventTypeNormal, ReasonTemplateLoaded, "Template %s version %q is served", cm.Name, t.Version)
		r.notify(cm.Name)
	}
}

func (r *Registry) onDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	if r.opts.Namespace != "" && cm.Namespace != r.opts.Namespace {
		return
	}
	r.mu.RLock()
	_, known := r.cms[cm.Name]
	r.mu.RUnlock()
	if !known {
		return
	}
	r.remove(r.cms, cm.Name)
	r.log.Info("template removed", "configMap", klog.KObj(cm))
	r.notify(cm.Name)
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
	if r.recorder == nil {
		return
	}
	r.recorder.Eventf(cm, nil, typ, reason, "Load", note, args...)
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
		changed, newErr := r.apply(r.files, l.Name, l.Source, l.Template, l.Err, ann)
		switch {
		case l.Err != nil && newErr:
			r.log.Info("template is invalid", "template", l.Name, "source", l.Source, "error", l.Err.Error())
		case changed:
			r.log.Info("template loaded", "template", l.Name, "source", l.Source, "version", l.Template.Version)
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
	}
	return nil
}
