package spawner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A write whose answer was lost. When the API server does not answer a create in time (its etcd
// is down, the caller's deadline passed), the create may still take effect: the API server keeps
// the write until its own request timeout (60 s by default). The caller is answered at once
// (503: GET shows whether it took effect) and the spawn is settled in the background:
//
//   - no pod of the workspace's name appears within LostWriteWindow: nothing was created (claims
//     this spawn created are kept, like every claim; a spawn of the same id reuses them);
//   - the pod exists and another owner's pod has the id (two owners raced): it yields, as a spawn
//     does (a pod of the same owner is the workspace's own replacement: a stop or an upgrade);
//   - the pod exists: its claims are created (or reused), so the workspace is whole, unless they
//     would now exceed the owner's claim limit (checked again: the spawn's check is stale by
//     then); refused claims are left uncreated and the pod waits for them.
//
// While it waits for the pod it keeps its hold on the quota reservation fresh (the TTL is shorter
// than the window). Either way the reservation is released afterwards; a pod, once there, counts
// itself.
// Settling never deletes a claim it did not create and never a pod it did not find by its
// deterministic name with the same owner, id and template.

// settleInterval is the pause between two looks of a settling spawn.
const settleInterval = 2 * time.Second

// mayHaveHappened is MayHaveHappened for the spawner's own errors too: a spawner *Error is a
// refusal, so nothing it answers took effect.
func mayHaveHappened(err error) bool {
	var se *Error
	if errors.As(err, &se) {
		return false
	}
	return MayHaveHappened(err)
}

// MayHaveHappened reports whether a write to the API server that failed with err may still have
// taken effect: the API server gave no answer (a transport error after the request was sent, the
// caller's deadline) or said it did not finish in time. A refusal (a 4xx status) did not happen,
// nor did a request whose connection was never made. The upgrade controller asks it too: a
// delete whose answer was lost may have removed the very pod it would look at next.
func MayHaveHappened(err error) bool {
	if err == nil {
		return false
	}
	// A request that never reached the API server (the connection was refused, the dial
	// failed) did not happen; settling it, as if it might still land, would only poll an API
	// server that is down.
	var oe *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &oe) && oe.Op == "dial") {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		switch st.Status().Reason {
		case metav1.StatusReasonTimeout, metav1.StatusReasonServerTimeout, metav1.StatusReasonInternalError,
			metav1.StatusReasonServiceUnavailable, metav1.StatusReasonUnknown:
			return true
		}
		return false
	}
	return true
}

// lostSpawn is a spawn whose write's answer was lost, as settle needs it.
type lostSpawn struct {
	// pod is the pod as built (its name is the workspace's).
	pod *corev1.Pod
	// pvcs are its claims; created those this spawn is known to have created.
	pvcs, created []*corev1.PersistentVolumeClaim
	owner, id     string
	// quota: the spawn holds a quota reservation, by token.
	quota bool
	token string
	// limitClaims: MaxClaimsPerUser applies to the spawn (its caller is no admin).
	limitClaims bool
	// since is when the lost write was sent.
	since time.Time
}

// settle finishes or undoes, in the background, a spawn whose write's answer was lost (see
// above).
func (s *Spawner) settle(parent context.Context, l lostSpawn, log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.opts.SettleTimeout)
	defer cancel()
	if l.quota {
		defer s.releaseLater(parent, l.owner, s.claimKey(l.pod.Namespace, l.id), l.token, log)
	}
	key := client.ObjectKeyFromObject(l.pod)
	for {
		done, err := s.settleOnce(ctx, l, log)
		if done {
			return
		}
		t := time.NewTimer(settleInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			log.Error(err, "gave up settling a spawn whose answer was lost; GET the workspace to see whether it exists", "pod", key.Name, "after", s.opts.SettleTimeout)
			return
		case <-t.C:
		}
	}
}

func (s *Spawner) settleOnce(ctx context.Context, l lostSpawn, log logr.Logger) (bool, error) {
	key := client.ObjectKeyFromObject(l.pod)
	template := l.pod.Labels[workspace.LabelTemplate]
	owner, id := l.owner, l.id
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var cur corev1.Pod
	err := s.apiReader.Get(cctx, key, &cur)
	switch {
	case apierrors.IsNotFound(err):
		if s.opts.Now().Sub(l.since) < s.opts.LostWriteWindow {
			// The create may still land: keep the quota slot until it no longer can. The
			// reservation was stamped before the create was sent, and the TTL alone would end
			// it while the create may still land (the TTL is 1 min, the window 70 s).
			if l.quota {
				if err := s.refresh(cctx, owner, s.claimKey(key.Namespace, id), l.token); err != nil {
					return false, fmt.Errorf("hold the quota reservation of a spawn whose answer was lost: %w", err)
				}
			}
			return false, nil
		}
		log.Info("a spawn whose answer was lost did not create its pod", "pod", key.Name)
		return true, nil
	case err != nil:
		return false, err
	}
	if cur.DeletionTimestamp != nil || workspace.ID(&cur) != id || workspace.Owner(&cur) != owner || cur.Labels[workspace.LabelTemplate] != template {
		return true, nil // being deleted, or another spawn's workspace: not ours to finish
	}
	// Only another owner's pod is a rival, as for a spawn (otherPodWithID).
	other, err := s.otherPodWithID(cctx, &cur, owner)
	if err != nil {
		return false, err
	}
	if other != "" {
		uid := cur.UID
		if err := s.client.Delete(cctx, &cur, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		for _, p := range l.created {
			if err := s.client.Delete(cctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		log.Info("a spawn whose answer was lost yielded: another owner's pod has the id", "pod", key.Name, "other", other)
		return true, nil
	}
	if l.limitClaims && len(l.pvcs) > 0 {
		// The spawn checked the claim limit under the owner's lock, but let go of it when its
		// answer was lost; the owner's other spawns may have created claims since. Check again
		// and hold the lock until the claims exist, as a spawn does.
		unlock, err := s.locks.lock(cctx, owner)
		if err != nil {
			return false, err // looked at again after settleInterval
		}
		defer unlock()
		if err := s.checkClaims(cctx, owner, l.pvcs); err != nil {
			if CodeOf(err) != "" {
				log.Error(err, "cannot finish a spawn whose answer was lost: its claims would exceed the owner's claim limit; the pod waits for them", "pod", key.Name)
				return true, nil
			}
			return false, err
		}
	}
	for _, p := range l.pvcs {
		q := p.DeepCopy() // p may hold a reused claim read back from the API server
		q.ResourceVersion, q.UID, q.ManagedFields, q.CreationTimestamp = "", "", nil, metav1.Time{}
		if _, err := s.createClaim(cctx, q, owner, id); err != nil {
			if CodeOf(err) != "" {
				log.Error(err, "cannot finish a spawn whose answer was lost: a claim was refused; the pod waits for it", "pod", key.Name)
				return true, nil
			}
			return false, err
		}
	}
	log.Info("finished a spawn whose answer was lost", "pod", key.Name)
	return true, nil
}

// releaseWhenDone releases the try token's hold on owner's reservation of id once a spawn or a
// start is done: at once, or in the background when the caller's deadline has passed (the API
// server is slow or its etcd down), so the answer does not wait for it.
func (s *Spawner) releaseWhenDone(ctx context.Context, owner, id, token string, log logr.Logger) {
	if ctx.Err() != nil {
		go s.releaseLater(ctx, owner, id, token, log)
		return
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := s.release(cctx, owner, id, token); err != nil {
		log.Error(err, "cannot release quota reservation; it expires by itself", "ttl", s.opts.ReservationTTL)
	}
}

// releaseLater releases the try token's hold on owner's reservation of id in the background,
// retrying while the API server cannot be reached (bounded by SettleTimeout; the reservation
// expires by itself after ReservationTTL anyway).
func (s *Spawner) releaseLater(parent context.Context, owner, id, token string, log logr.Logger) {
	s.retryLater(parent, func(ctx context.Context) error { return s.release(ctx, owner, id, token) },
		log, "cannot release quota reservation; it expires by itself")
}

// retryLater runs release until it succeeds, each try bounded by 10 s, all of them by
// SettleTimeout; when they run out it logs failed (the reservation expires by itself after
// ReservationTTL).
func (s *Spawner) retryLater(parent context.Context, release func(context.Context) error, log logr.Logger, failed string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.opts.SettleTimeout)
	defer cancel()
	for {
		cctx, c := context.WithTimeout(ctx, 10*time.Second)
		err := release(cctx)
		c()
		if err == nil {
			return
		}
		t := time.NewTimer(settleInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			log.Error(err, failed, "ttl", s.opts.ReservationTTL)
			return
		case <-t.C:
		}
	}
}
