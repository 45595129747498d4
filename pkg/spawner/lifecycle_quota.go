package spawner

import (
	"context"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

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

// CheckStart refuses to start workspace id of owner when owner already has MaxPerUser running
// workspaces (stopped ones do not count). Admins are not limited.
func (s *Spawner) CheckStart(ctx context.Context, owner, id string, isAdmin bool) error {
	if s.opts.MaxPerUser <= 0 || isAdmin {
		return nil
	}
	running, _, err := s.tally(ctx, owner, id)
	if err != nil {
		return err
	}
	if len(running) >= s.opts.MaxPerUser {
		return errorf(QuotaExceeded, nil, "%s already has %d running %s (%s) and the limit is %d per user: stop or delete one before starting %s",
			owner, len(running), plural(len(running), "workspace", "workspaces"), strings.Join(running, ", "), s.opts.MaxPerUser, id)
	}
	return nil
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
