package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	unlock, err := s.locks.lock(ctx, owner)
	if err != nil {
		return nil, err // nothing written: no reservation to release
	}
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

// ledgerStopsKey holds the stop reservations in the ledger: workspace (claimKey) -> the tokens of
// the stops that hold it -> when each joined. Versions without it keep it: they rewrite the whole
// ledger they read.
const ledgerStopsKey = "stops"

// ReserveStop holds a stopped slot in owner's quota ledger for stopping workspace id (in
// namespace ns), or refuses with QuotaExceeded when owner already has MaxStoppedPerUser stopped
// or stopping workspaces, stops in flight included (id does not count itself twice). The caller
// writes the stop intent, then calls release with the outcome: the slot is released, as the
// workspace, stopped now, counts itself; when the write's answer was lost it is left to expire
// after ReservationTTL, since the write may still land. Counting the pods alone let concurrent
// stops each see the last free slot: three stops with a limit of one left three stopped.
// Admins are not limited.
func (s *Spawner) ReserveStop(ctx context.Context, owner, ns, id string, isAdmin bool) (release func(stopErr error), err error) {
	none := func(error) {}
	if s.opts.MaxStoppedPerUser <= 0 || isAdmin {
		return none, nil
	}
	rid := s.claimKey(ns, id)
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", ns, "workspace", id, "owner", owner)
	unlock, err := s.locks.lock(ctx, owner)
	if err != nil {
		return nil, err // nothing written: no reservation to release
	}
	token, err := s.reserveStop(ctx, owner, rid)
	unlock()
	if err != nil {
		if mayHaveHappened(err) {
			go s.releaseStopLater(ctx, owner, rid, token, log) // the ledger write may have happened
		}
		return nil, err
	}
	return func(stopErr error) {
		if stopErr != nil && mayHaveHappened(stopErr) {
			log.Info("keeping the stopped-quota reservation of a stop whose write got no answer; it expires by itself", "ttl", s.opts.ReservationTTL)
			return
		}
		if ctx.Err() != nil {
			go s.releaseStopLater(ctx, owner, rid, token, log)
			return
		}
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if err := s.releaseStop(cctx, owner, rid, token); err != nil {
			log.Error(err, "cannot release the stopped-quota reservation; it expires by itself", "ttl", s.opts.ReservationTTL)
		}
	}, nil
}

// reserveStop records the stop token's hold on a stopped slot for workspace rid (a claimKey) in
// owner's ledger, or refuses with QuotaExceeded. As reserveSlot does for running slots, it reads
// the ledger, then lists owner's pods from the API server, and writes with the ledger's
// resourceVersion: of two stops that read the same ledger only one can write it, and the other
// reads again and counts it. The token is returned on error too (a write whose answer was lost
// may have taken effect).
func (s *Spawner) reserveStop(ctx context.Context, owner, rid string) (string, error) {
	token := string(uuid.NewUUID())
	key := client.ObjectKey{Namespace: s.opts.Namespace, Name: LedgerName(owner)}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			if err := sleepJitter(ctx, attempt); err != nil {
				return token, err
			}
		}
		var cm corev1.ConfigMap
		exists := true
		if err := s.apiReader.Get(ctx, key, &cm); apierrors.IsNotFound(err) {
			exists = false
		} else if err != nil {
			return token, fmt.Errorf("read quota ledger %s: %w", key.Name, err)
		}
		stops := readStops(&cm)
		_, stopped, err := s.tally(ctx, owner, rid)
		if err != nil {
			return token, err
		}
		now := s.opts.Now()
		counted := map[string]bool{}
		for _, k := range stopped {
			counted[k] = true
		}
		// A reservation whose workspace is stopped now counts through its pods; one whose
		// stop died (a crashed replica) expires.
		pruneStops(stops, counted, now, s.opts.ReservationTTL)
		for k := range stops {
			if k != rid {
				counted[k] = true
			}
		}
		if len(counted) >= s.opts.MaxStoppedPerUser {
			ids := make([]string, 0, len(counted))
			for k := range counted {
				ids = append(ids, k)
			}
			sort.Strings(ids)
			return token, errorf(QuotaExceeded, nil, "%s already has %d stopped %s (%s) and the limit is %d per user: delete one before stopping %s",
				owner, len(ids), plural(len(ids), "workspace", "workspaces"), strings.Join(ids, ", "), s.opts.MaxStoppedPerUser, rid)
		}
		if stops[rid] == nil {
			stops[rid] = map[string]time.Time{}
		}
		stops[rid][token] = now
		if !exists {
			cm.ObjectMeta = ledgerMeta(key, owner)
		}
		writeStops(&cm, stops)
		if again, err := s.writeLedger(ctx, &cm, exists); !again {
			return token, err
		}
	}
	return token, fmt.Errorf("quota ledger %s of %s stayed busy after %d attempts: retry the stop", key.Name, owner, maxAttempts)
}

// pruneStops drops the stop reservations of workspaces that count themselves as stopped now
// (stopped) and the tokens that joined more than ttl ago; a reservation goes with its last token.
func pruneStops(stops map[string]map[string]time.Time, stopped map[string]bool, now time.Time, ttl time.Duration) {
	pruneTokens(stops, func(rid string) bool { return !stopped[rid] }, now, ttl)
}

// releaseStop removes the stop token's hold on owner's stop reservation of rid, reading the
// ledger again on a conflict. A ledger or a hold that is gone is left alone.
func (s *Spawner) releaseStop(ctx context.Context, owner, rid, token string) error {
	key := client.ObjectKey{Namespace: s.opts.Namespace, Name: LedgerName(owner)}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			if err := sleepJitter(ctx, attempt); err != nil {
				return err
			}
		}
		var cm corev1.ConfigMap
		if err := s.apiReader.Get(ctx, key, &cm); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read quota ledger %s: %w", key.Name, err)
		}
		stops := readStops(&cm)
		if _, ok := stops[rid][token]; !ok {
			return nil
		}
		delete(stops[rid], token)
		if len(stops[rid]) == 0 {
			delete(stops, rid)
		}
		writeStops(&cm, stops)
		err := s.client.Update(ctx, &cm)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("write quota ledger %s: %w", key.Name, err)
		}
	}
	return fmt.Errorf("quota ledger %s of %s stayed busy after %d attempts", key.Name, owner, maxAttempts)
}

// releaseStopLater is releaseStop in the background, retrying while the API server cannot be
// reached (bounded by SettleTimeout; the reservation expires by itself after ReservationTTL).
func (s *Spawner) releaseStopLater(parent context.Context, owner, rid, token string, log logr.Logger) {
	s.retryLater(parent, func(ctx context.Context) error { return s.releaseStop(ctx, owner, rid, token) },
		log, "cannot release the stopped-quota reservation; it expires by itself")
}

func readStops(cm *corev1.ConfigMap) map[string]map[string]time.Time {
	out := map[string]map[string]time.Time{}
	if raw := cm.Data[ledgerStopsKey]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &out) // broken by hand: no stop holds anything; the pods still count
	}
	return out
}

func writeStops(cm *corev1.ConfigMap, stops map[string]map[string]time.Time) {
	b, _ := json.Marshal(stops)
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[ledgerStopsKey] = string(b)
}
