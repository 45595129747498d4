package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// LifecycleQuota bounds stops and starts (*spawner.Spawner satisfies it): a start within the
// running limit, a stop within the stopped limit.
type LifecycleQuota interface {
	CheckStart(ctx context.Context, owner, id string, isAdmin bool) error
	CheckStop(ctx context.Context, owner, id string, isAdmin bool) error
}

// Stop records the stop intent on the workspace's live pods and returns at once: the controller
// replaces the running pod with a stopped pod of the same identity (phase Stopped). Claims,
// paths and place in lists stay.
func (s *Service) Stop(ctx context.Context, id string) (*Workspace, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	if workspace.Active(pods).DeletionTimestamp != nil {
		return nil, errorf(CodeConflict, "workspace %q is being deleted; it cannot be stopped", id)
	}
	if _, ok := workspace.StopIntent(pods); ok {
		return s.after(pods, nil), nil
	}
	owner := workspace.Owner(workspace.Active(pods))
	if s.cfg.Quota != nil {
		if err := s.cfg.Quota.CheckStop(ctx, owner, id, c.IsAdmin); err != nil {
			return nil, quotaError(err)
		}
	}
	who := "its owner"
	if c.Subject != owner {
		who = "an admin (" + c.Subject + ")"
	}
	reason := fmt.Sprintf("stopped by %s at %s", who, s.cfg.Now().UTC().Format("2006-01-02 15:04 UTC"))
	if err := s.patchLive(ctx, pods, reason); err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("stop requested", "workspace", id, "owner", owner, "by", c.Subject)
	v := reason
	return s.after(pods, &v), nil
}

// Start removes the stop intent from the workspace's live pods and returns at once: the
// controller starts it (same version, or the latest with the update policy on-start).
func (s *Service) Start(ctx context.Context, id string) (*Workspace, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	if workspace.Active(pods).DeletionTimestamp != nil {
		return nil, errorf(CodeConflict, "workspace %q is being deleted; it cannot be started", id)
	}
	if _, ok := workspace.StopIntent(pods); !ok {
		return s.after(pods, nil), nil
	}
	owner := workspace.Owner(workspace.Active(pods))
	if s.cfg.Quota != nil {
		if err := s.cfg.Quota.CheckStart(ctx, owner, id, c.IsAdmin); err != nil {
			return nil, quotaError(err)
		}
	}
	empty := ""
	if err := s.patchLive(ctx, pods, ""); err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("start requested", "workspace", id, "owner", owner, "by", c.Subject)
	return s.after(pods, &empty), nil
}

// patchLive sets (reason != "") or removes the stop intent on every live pod, so that an upgrade
// in flight, which keeps one of two pods, cannot drop it.
func (s *Service) patchLive(ctx context.Context, pods []*corev1.Pod, reason string) error {
	var val any
	if reason != "" {
		val = reason
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{workspace.AnnStopRequested: val}}})
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		target := &corev1.Pod{}
		target.Name, target.Namespace = p.Name, p.Namespace
		if err := s.cfg.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			return &Error{Code: CodeInternal, Message: fmt.Sprintf("recording the stop or start on pod %s failed; try again", p.Name), Err: err}
		}
	}
	return nil
}

// after describes the workspace as it is after setting the stop intent to *intent ("" removes
// it; nil: unchanged), not as the cache had it before.
func (s *Service) after(pods []*corev1.Pod, intent *string) *Workspace {
	out := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		q := p
		if intent != nil && p.DeletionTimestamp == nil {
			q = p.DeepCopy()
			if q.Annotations == nil {
				q.Annotations = map[string]string{}
			}
			if *intent != "" {
				q.Annotations[workspace.AnnStopRequested] = *intent
			} else {
				delete(q.Annotations, workspace.AnnStopRequested)
			}
		}
		out[i] = q
	}
	w := describe(out, s.latestVersion(map[string]string{}, out), s.cfg.Now())
	return &w
}

func quotaError(err error) error {
	var se *spawner.Error
	if errors.As(err, &se) {
		code, ok := spawnerCodes[se.Code]
		if !ok {
			code = CodeInvalid
		}
		return &Error{Code: code, Message: se.Message, Err: err}
	}
	return &Error{Code: CodeInternal, Message: "checking the workspace quota failed; try again", Err: err}
}
