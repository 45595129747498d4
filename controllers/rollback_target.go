package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// HistorySource reads kept earlier versions of templates (*templates.History satisfies it).
type HistorySource interface {
	Version(ctx context.Context, name, version string) (*templates.Template, error)
}

// wantedVersion is the nogoo9/target-version of the workspace's only live pod when it carries a
// valid upgrade intent: the upgrade then goes to that kept version instead of the latest. An
// upgrade in flight is planned from its pods, not from the target, so it is not looked at.
func wantedVersion(pods []*corev1.Pod) (*corev1.Pod, string) {
	var live *corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if live != nil {
			return nil, ""
		}
		live = p
	}
	if live == nil || !upgrade.ParseIntent(live.Annotations[workspace.AnnUpgradeRequested]).Valid {
		return nil, ""
	}
	return live, live.Annotations[workspace.AnnTargetVersion]
}

// resolveTemplate is the template version this pass upgrades to: the latest, or the kept version
// an admin asked for (nogoo9/target-version). A version that is not kept, or no longer meets the
// template policy, ends the request the way a failed start does (error on the pod, intent
// cleared), and done is true: the pass is over.
func (r *WorkspaceReconciler) resolveTemplate(ctx context.Context, key types.NamespacedName, obs upgrade.Observed, name string, now time.Time) (tmpl *templates.Template, found, done bool, err error) {
	cur, want := wantedVersion(obs.Pods)
	latest, ok := r.Templates.Get(name)
	if want == "" || (ok && latest.Version == want) {
		return latest, ok, false, nil
	}
	var t *templates.Template
	if r.Opts.History == nil {
		err = &templates.ErrVersionNotKept{Name: name, Version: want}
	} else {
		t, err = r.Opts.History.Version(ctx, name, want)
	}
	if err == nil {
		return t, true, false, nil
	}
	var notKept *templates.ErrVersionNotKept
	if !errors.As(err, &notKept) && !isPolicyError(err) && !isDecodeError(err) {
		return nil, false, false, err // transient: retry
	}
	mv := &moveState{}
	for _, a := range upgrade.FailStart(cur, "TemplateVersionNotKept", fmt.Sprintf("%v; pick a kept version of template %s or upgrade to its latest", err, name), now) {
		if _, aerr := r.apply(ctx, key, mv, a, nil, now); aerr != nil {
			return nil, false, true, aerr
		}
	}
	return nil, false, true, nil
}

func isPolicyError(err error) bool {
	var pe *templates.PolicyError
	return errors.As(err, &pe)
}

// isDecodeError: FromHistory's refusals (not written by nogoo9, does not decode) are permanent.
func isDecodeError(err error) bool {
	var e *templates.HistoryError
	return errors.As(err, &e)
}
