package spawner

import (
	"context"
	"errors"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// stoppedKeys are the claimKeys (the id, or namespace/id elsewhere) among pods (one owner's) of
// workspaces that are stopped or stopping: they do not count as running.
func (s *Spawner) stoppedKeys(pods []corev1.Pod) map[string]bool {
	groups := map[string][]*corev1.Pod{}
	for i := range pods {
		k := s.claimKey(pods[i].Namespace, workspace.ID(&pods[i]))
		groups[k] = append(groups[k], &pods[i])
	}
	out := map[string]bool{}
	for k, group := range groups {
		if workspace.IsStopped(group) {
			out[k] = true
		}
	}
	return out
}

// tally counts owner's running and stopped workspaces from the API server, without id.
func (s *Spawner) tally(ctx context.Context, owner, id string) (running, stopped []string, err error) {
	pods, err := s.ownerPods(ctx, owner)
	if err != nil {
		return nil, nil, err
	}
	st := s.stoppedKeys(pods)
	seen := map[string]bool{}
	for i := range pods {
		wid := s.claimKey(pods[i].Namespace, workspace.ID(&pods[i]))
		if wid == id || seen[wid] || !counts(&pods[i]) {
			continue
		}
		seen[wid] = true
		if st[wid] {
			stopped = append(stopped, wid)
		} else {
			running = append(running, wid)
		}
	}
	sort.Strings(running)
	sort.Strings(stopped)
	return running, stopped, nil
}

// ReserveStart holds a running slot in owner's quota ledger for starting workspace id (in
// namespace ns), as a spawn does, or refuses with QuotaExceeded when owner already has MaxPerUser
// running or pending workspaces, spawns and starts in flight included (stopped ones do not
// count, nor does id twice). The caller lifts the stop intent, then calls release with the
// outcome: the slot is released, as the workspace, no longer stopped, now counts itself; when
// the lift's answer was lost it is left to expire after ReservationTTL, since the lift may still
// land. Checking the pods alone let concurrent starts and spawns each see the last free slot.
// Admins are not limited.
func (s *Spawner) ReserveStart(ctx context.Context, owner, ns, id string, isAdmin bool) (release func(startErr error), err error) {
	none := func(error) {}
	if s.opts.MaxPerUser <= 0 || isAdmin {
		return none, nil
	}
	rid := s.claimKey(ns, id)
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", ns, "workspace", id, "owner", owner)
	unlock := s.locks.lock(owner)
	token, err := s.reserveSlot(ctx, owner, rid, forStart)
	unlock()
	switch {
	case errors.Is(err, errStarted):
		return none, nil // started by someone else meanwhile: its pods count themselves
	case err != nil:
		if mayHaveHappened(err) {
			go s.releaseLater(ctx, owner, rid, token, log) // the ledger write may have happened
		}
		return nil, err
	}
	return func(startErr error) {
		if startErr != nil && mayHaveHappened(startErr) {
			log.Info("keeping the quota reservation of a start whose write got no answer; it expires by itself", "ttl", s.opts.ReservationTTL)
			return
		}
		s.releaseWhenDone(ctx, owner, rid, token, log)
	}, nil
}

// CheckStop refuses to stop workspace id of owner when owner already has MaxStoppedPerUser
// stopped workspaces. Admins are not limited.
func (s *Spawner) CheckStop(ctx context.Context, owner, id string, isAdmin bool) error {
	if s.opts.MaxStoppedPerUser <= 0 || isAdmin {
		return nil
	}
	_, stopped, err := s.tally(ctx, owner, id)
	if err != nil {
		return err
	}
	if len(stopped) >= s.opts.MaxStoppedPerUser {
		return errorf(QuotaExceeded, nil, "%s already has %d stopped %s (%s) and the limit is %d per user: delete one before stopping %s",
			owner, len(stopped), plural(len(stopped), "workspace", "workspaces"), strings.Join(stopped, ", "), s.opts.MaxStoppedPerUser, id)
	}
	return nil
}
