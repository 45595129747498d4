package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// HistoryTemplates is what the history recorder needs of the registry (templates.Shared: it
// reads each version it keeps and writes into none).
type HistoryTemplates interface {
	TemplateSource
	List() []templates.Info
	WaitForSync(ctx context.Context) bool
}

// HistoryRecorder keeps the versions of every template (docs/templates.md, "History"): when the
// registry serves a new version, it creates the ConfigMap that keeps it (templates.HistoryName,
// so a repeat is an AlreadyExists) and deletes the oldest past Keep. The versions of a team
// template are kept beside it, in its namespace, so two templates of one name never collide. Leader only; the state is
// the ConfigMaps, so a crash between the two writes is repaired by the next change or restart.
type HistoryRecorder struct {
	Client    client.Client
	APIReader client.Reader
	Templates HistoryTemplates
	Namespace string
	// Keep is --template-history-limit (templates.DefaultHistoryLimit when 0).
	Keep int

	mu      sync.Mutex
	pending map[string]bool
	signal  chan struct{}
}

// SetupHistoryRecorder adds the history recorder to mgr.
func SetupHistoryRecorder(mgr ctrl.Manager, reg HistoryTemplates, namespace string, keep int) error {
	return mgr.Add(&HistoryRecorder{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Templates: reg, Namespace: namespace, Keep: keep})
}

func (h *HistoryRecorder) enqueue(name string) {
	h.mu.Lock()
	h.pending[name] = true
	h.mu.Unlock()
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

// Start records every template once, then each one that changes, until ctx ends.
func (h *HistoryRecorder) Start(ctx context.Context) error {
	if h.Keep <= 0 {
		h.Keep = templates.DefaultHistoryLimit
	}
	h.pending, h.signal = map[string]bool{}, make(chan struct{}, 1)
	h.Templates.Subscribe(h.enqueue)
	if !h.Templates.WaitForSync(ctx) {
		return nil
	}
	for _, i := range h.Templates.List() {
		h.enqueue(templates.Key(i.Namespace, i.Name, h.Namespace))
	}
	log := ctrl.Log.WithName("template-history")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.signal:
		}
		h.mu.Lock()
		names := h.pending
		h.pending = map[string]bool{}
		h.mu.Unlock()
		for key := range names {
			if err := h.record(ctx, key); err != nil {
				log.Error(err, "Keep template version", "template", key)
				// Try again later: a later change or this retry brings it back.
				time.AfterFunc(10*time.Second, func() { h.enqueue(key) })
			}
		}
	}
}

// record keeps the served version of the template at key and prunes the oldest.
func (h *HistoryRecorder) record(ctx context.Context, key string) error {
	t, ok := h.Templates.Get(key)
	if !ok {
		return nil
	}
	ns := h.Namespace
	if t.Namespace != "" {
		ns = t.Namespace // a team template's versions live beside it
	}
	cm, err := templates.HistoryConfigMap(ns, t)
	if err != nil {
		return err
	}
	if err := h.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	} else if err == nil {
		ctrl.Log.WithName("template-history").Info("Kept template version", "template", key, "version", t.Version, "configMap", klog.KObj(cm))
	}
	var list corev1.ConfigMapList
	if err := h.APIReader.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{workspace.LabelTemplateHistory: t.Name}); err != nil {
		return err
	}
	for _, old := range templates.Prune(list.Items, t.Name, h.Keep, t.Version) {
		if err := h.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}
