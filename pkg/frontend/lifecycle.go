package frontend

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// LifecycleQuota bounds stops and starts (*spawner.Spawner satisfies it): a start within the
// running limit, a stop within the stopped limit.
type LifecycleQuota interface {
	// ReserveStart holds a running slot for starting workspace id of owner in namespace ns, as a
	// spawn holds one, or refuses; release is called once the start's writes are done, with
	// their error.
	ReserveStart(ctx context.Context, owner, ns, id string, isAdmin bool) (release func(startErr error), err error)
	// ReserveStop holds a stopped slot for stopping workspace id of owner in namespace ns, or
	// refuses; release is called once the stop's writes are done, with their error.
	ReserveStop(ctx context.Context, owner, ns, id string, isAdmin bool) (release func(stopErr error), err error)
}

// Stop records the stop intent on the workspace's live pods and returns at once: the controller
// replaces the running pod with a stopped pod of the same identity (phase Stopped). Claims,
// paths and place in lists stay.
//
// Whether there is anything to do is decided on the pods the API server has (livePodsOf), not on
// the cache's: a start a moment ago that the cache has not seen yet would otherwise read as
// "stopped already", and the stop would answer 202 and write nothing.
//
// Its reads, the quota reservation and the write are bounded by WriteTimeout, as a spawn's are:
// the reservation holds the owner's lock (which the owner's spawns and starts wait for) while it
// reads and writes the ledger, and neither a REST request (kept until the client goes) nor an MCP
// tool call (detached from its request) brings a deadline of its own.
func (s *Service) Stop(ctx context.Context, id string) (*Workspace, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	c, cached, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	pods, err := s.livePodsOf(ctx, cached)
	if err != nil {
		return nil, err
	}
	active := workspace.Active(pods)
	if active.DeletionTimestamp != nil {
		return nil, errorf(CodeConflict, "workspace %q is being deleted; it cannot be stopped", id)
	}
	if _, ok := workspace.StopIntent(pods); ok {
		return s.describeNow(pods), nil
	}
	owner := workspace.Owner(active)
	release := func(error) {}
	if s.cfg.Quota != nil {
		r, err := s.cfg.Quota.ReserveStop(ctx, owner, active.Namespace, id, c.IsAdmin)
		if err != nil {
			return nil, quotaError(err)
		}
		release = r
	}
	who := "its owner"
	if c.Subject != owner {
		who = "an admin (" + c.Subject + ")"
	}
	reason := fmt.Sprintf("stopped by %s at %s", who, s.cfg.Now().UTC().Format("2006-01-02 15:04 UTC"))
	after, err := s.patchLive(ctx, pods, map[string]any{workspace.AnnStopRequested: reason})
	// The slot is released only now that the pods carry the intent: the workspace counts itself.
	release(err)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("stop requested", "workspace", id, "owner", owner, "by", c.Subject)
	return s.describeNow(after), nil
}

// Start removes the stop intent from the workspace's live pods and returns at once: the
// controller starts it (same version, or the latest with the update policy on-start).
//
// As Stop, it decides on the pods the API server has: a stop a moment ago that the cache has not
// seen yet would otherwise read as "running already", and the workspace would stay stopped. It is
// bounded by WriteTimeout as Stop is.
func (s *Service) Start(ctx context.Context, id string) (*Workspace, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	c, cached, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	pods, err := s.livePodsOf(ctx, cached)
	if err != nil {
		return nil, err
	}
	active := workspace.Active(pods)
	if active.DeletionTimestamp != nil {
		return nil, errorf(CodeConflict, "workspace %q is being deleted; it cannot be started", id)
	}
	if _, ok := workspace.StopIntent(pods); !ok {
		return s.describeNow(pods), nil
	}
	owner := workspace.Owner(active)
	release := func(error) {}
	if s.cfg.Quota != nil {
		r, err := s.cfg.Quota.ReserveStart(ctx, owner, active.Namespace, id, c.IsAdmin)
		if err != nil {
			return nil, quotaError(err)
		}
		release = r
	}
	after, err := s.liftStop(ctx, pods)
	// The slot is released only now that no pod carries the intent: the workspace counts itself.
	release(err)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("start requested", "workspace", id, "owner", owner, "by", c.Subject)
	return s.describeNow(after), nil
}

// liftStop removes the stop intent from pods and from every live pod of the workspace the API
// server lists (patchLive: while any live pod carries the intent the workspace stays stopped, and
// the cache may not show every pod yet, e.g. a stopped copy made a moment ago), and returns pods
// as they are after the write.
func (s *Service) liftStop(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	return s.patchLive(ctx, pods, map[string]any{workspace.AnnStopRequested: nil})
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
