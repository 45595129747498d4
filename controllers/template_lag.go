package controllers

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// maxTemplateLag bounds how long an upgrade intent waits for the template cache to catch up with
// the template's ConfigMap before it is answered UpgradeNotNeeded.
const maxTemplateLag = 5 * time.Second

// templateLag remembers, per workspace, since when an intent has been waiting for the template
// cache (templateBehind).
type templateLag struct {
	mu    sync.Mutex
	since map[types.NamespacedName]time.Time
}

// templateBehind reports whether move would drop an upgrade intent as UpgradeNotNeeded while the
// template's ConfigMap on the API server already says another version than the cache: a person
// who raises the template and writes the intent right after (kubectl apply, then kubectl annotate)
// must get the upgrade, not "already runs version 1". It reads the ConfigMap only in that case,
// and waits at most maxTemplateLag per workspace (a newer version that does not decode never
// reaches the cache; its intent is then answered as before).
func (r *WorkspaceReconciler) templateBehind(ctx context.Context, key types.NamespacedName, move upgrade.Move, tmpl *templates.Template, now time.Time) (bool, error) {
	notNeeded := false
	for _, a := range move.Actions {
		if a.Kind == upgrade.Event && a.Reason == upgrade.ReasonUpgradeNotNeeded {
			notNeeded = true
		}
	}
	if !notNeeded || tmpl == nil || !strings.HasPrefix(tmpl.Source, "configmap:") {
		r.lag.forget(key)
		return false, nil
	}
	ns, name, ok := strings.Cut(strings.TrimPrefix(tmpl.Source, "configmap:"), "/")
	if !ok {
		return false, nil
	}
	// The read is made without the lock: the lock is every pass's (the forget above), and a
	// read waits on the API server, up to the request's timeout.
	var cm corev1.ConfigMap
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); client.IgnoreNotFound(err) != nil {
		return false, err
	}
	if strings.TrimSpace(cm.Annotations[workspace.AnnTemplateVersion]) == tmpl.Version {
		r.lag.forget(key)
		return false, nil
	}
	r.lag.mu.Lock()
	defer r.lag.mu.Unlock()
	if r.lag.since == nil {
		r.lag.since = map[types.NamespacedName]time.Time{}
	}
	first, waiting := r.lag.since[key]
	if !waiting {
		r.lag.since[key] = now
		return true, nil
	}
	if now.Sub(first) < maxTemplateLag {
		return true, nil
	}
	delete(r.lag.since, key)
	return false, nil
}

// forget drops key's wait, if any.
func (l *templateLag) forget(key types.NamespacedName) {
	l.mu.Lock()
	delete(l.since, key)
	l.mu.Unlock()
}
