package spawner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The quota ledger. Counting pods alone cannot enforce a quota under concurrency: fifty requests
// that each list two pods all see room. So each owner has one ConfigMap, the ledger, holding
// reservations (workspace id -> time). A spawn reads the ledger, then lists the owner's pods with
// a consistent read, counts the distinct ids of Running/Pending pods plus the live reservations,
// and writes its own reservation with the ledger's resourceVersion. Two spawns that read the same
// ledger cannot both write it: the second gets a Conflict and starts over, now seeing the first.
// Any workspace is therefore either in the ledger a spawn read or, released before that read,
// already a pod in its list. This holds across replicas, since the API server is the only shared
// state. A reservation is removed when its spawn ends; one whose spawn died (a crashed replica)
// expires after Options.ReservationTTL.
//
// A start of a stopped workspace reserves its id the same way (ReserveStart) and releases it once
// the stop intent is lifted: a stopped workspace takes no slot, so until then its reservation is
// what counts it, and a reservation is not pruned for a workspace whose pods are stopped.
//
// Each spawn try holds its reservation by a token of its own (the ledger's "tries" key: id ->
// token -> time). A retry of the same owner and id joins the reservation a failed try left behind
// (that try may still be settling in the background, settle.go) instead of waiting for it to
// expire: the workspace keeps one slot, and only one of the tries can create its pod, whose name
// is deterministic. A release removes only its own token, and the reservation goes with its last
// token, so a failed try's late release never frees the slot a retry still needs.
const (
	ledgerPrefix  = "nogoo9-quota-"
	ledgerDataKey = "reservations"
	// ledgerTriesKey holds, per reservation, the tokens of the spawn tries that hold it.
	ledgerTriesKey = "tries"
	maxAttempts    = 100
)

// LedgerName is the quota ledger ConfigMap of owner.
func LedgerName(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return ledgerPrefix + hex.EncodeToString(sum[:])[:20]
}

// counts reports whether pod takes a quota slot: Running or Pending (phase not yet set counts as
// Pending) and not being deleted.
func counts(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	switch pod.Status.Phase {
	case corev1.PodRunning, corev1.PodPending, "":
		return true
	}
	return false
}

// ownerPods lists owner's workspace pods from the API server (not the cache, which may lag).
func (s *Spawner) ownerPods(ctx context.Context, owner string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, ns := range s.quotaNamespaces() {
		var list corev1.PodList
		if err := s.apiReader.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
			workspace.LabelType: workspace.TypeWorkspace, workspace.LabelUserSub: workspace.UserLabel(owner),
		}); err != nil {
			return nil, fmt.Errorf("list workspace pods of %s in namespace %s: %w", owner, ns, err)
		}
		for _, p := range list.Items {
			if workspace.Owner(&p) == owner {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// quotaNamespaces are the namespaces whose workspaces and claims count toward an owner's quota.
func (s *Spawner) quotaNamespaces() []string {
	if len(s.opts.Namespaces) == 0 {
		return []string{s.opts.Namespace}
	}
	return s.opts.Namespaces
}

// reserve records a reservation of id for owner in the ledger, or refuses with QuotaExceeded. It
// returns the try's token, which names this try's hold on the reservation (release removes only
// it); the token is returned on error too, since a ledger write whose answer was lost may have
// taken effect.
//
// A reservation of id that is live already (another try of the same workspace of this owner, in
// flight or left by a try that failed while the API server did not answer) is joined, not
// refused: the workspace holds one quota slot however many tries hold it, and its pod's name is
// deterministic, so of two tries only one can create it. The reservation lasts until its last
// try releases it (or until ReservationTTL after the last try joined, for a crashed replica).
func (s *Spawner) reserve(ctx context.Context, owner, id string) (string, error) {
	return s.reserveSlot(ctx, owner, id, forSpawn)
}

// slotFor is what a running slot is reserved for; it words the refusals.
type slotFor int

const (
	forSpawn slotFor = iota
	// forStart: a stopped workspace is being started (ReserveStart).
	forStart
)

// errStarted: the workspace a start reserves for is not stopped (any more); its pods count
// themselves.
var errStarted = errors.New("the workspace is not stopped")

// reserveSlot is reserve for a spawn or a start. A start's workspace has pods, but they are
// stopped and take no slot, so its reservation is what counts it until the start is done.
func (s *Spawner) reserveSlot(ctx context.Context, owner, id string, why slotFor) (string, error) {
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
		res, tries := readReservations(&cm), readTries(&cm)
		pods, err := s.ownerPods(ctx, owner)
		if err != nil {
			return token, err
		}
		now := s.opts.Now()
		live := map[string]bool{}
		present := map[string]bool{}
		stopped := s.stoppedKeys(pods)
		for i := range pods {
			k := s.claimKey(pods[i].Namespace, workspace.ID(&pods[i])) // the id, or namespace/id elsewhere
			if stopped[k] {
				// A stopped workspace takes no slot and does not count itself: a reservation
				// of it (a start's) stays until its start is done and releases it.
				continue
			}
			present[k] = true
			if counts(&pods[i]) {
				live[k] = true
			}
		}
		if live[id] {
			if why == forStart {
				return token, errStarted
			}
			return token, errorf(Conflict, nil, "workspace %q already exists: choose another id or delete it first", id)
		}
		pruneReservations(res, tries, present, now, s.opts.ReservationTTL)
		joined := false
		for rid := range res {
			live[rid] = true
			joined = joined || rid == id
		}
		if !joined && len(live) >= s.opts.MaxPerUser {
			ids := make([]string, 0, len(live))
			for k := range live {
				ids = append(ids, k)
			}
			sort.Strings(ids)
			if why == forStart {
				return token, errorf(QuotaExceeded, nil, "%s already has %d running or pending %s (%s) and the limit is %d per user: stop or delete one before starting %s",
					owner, len(live), plural(len(live), "workspace", "workspaces"), strings.Join(ids, ", "), s.opts.MaxPerUser, id)
			}
			return token, errorf(QuotaExceeded, nil, "%s already has %d running or pending %s (%s) and the limit is %d per user: delete or stop one before creating another",
				owner, len(live), plural(len(live), "workspace", "workspaces"), strings.Join(ids, ", "), s.opts.MaxPerUser)
		}
		if tries[id] == nil {
			tries[id] = map[string]time.Time{}
		}
		if _, ok := res[id]; ok && len(tries[id]) == 0 {
			// A reservation written without tries, by an older version during a rolling
			// upgrade: its release deletes the reservation whatever tries joined it, so this
			// try would then hold no slot and quota could admit one more. Refused, as that
			// version refuses it.
			return token, errorf(Conflict, nil, "workspace %q is already being created by another request: wait for it, or choose another id", id)
		}
		res[id] = now
		tries[id][token] = now
		if !exists {
			cm.ObjectMeta = ledgerMeta(key, owner)
		}
		writeReservations(&cm, res)
		writeTries(&cm, tries)
		if again, err := s.writeLedger(ctx, &cm, exists); !again {
			return token, err
		}
	}
	return token, fmt.Errorf("quota ledger %s of %s stayed busy after %d attempts: retry the spawn", key.Name, owner, maxAttempts)
}

// writeLedger writes the quota ledger cm (creates it when !exists). again reports that someone
// else wrote it first (a conflict, or a create that lost): read it again and decide again.
func (s *Spawner) writeLedger(ctx context.Context, cm *corev1.ConfigMap, exists bool) (again bool, err error) {
	if exists {
		err = s.client.Update(ctx, cm)
	} else {
		err = s.client.Create(ctx, cm)
	}
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return true, nil
	default:
		return false, fmt.Errorf("write quota ledger %s: %w", cm.Name, err)
	}
}

// pruneReservations drops the reservations whose workspace has a pod now that is not stopped
// (present: the pod counts itself) or whose last try joined more than ttl ago, and the tries that
// expired or belong to no reservation. A reservation without tries (written by a version without
// them) stays as it is.
func pruneReservations(res map[string]time.Time, tries map[string]map[string]time.Time, present map[string]bool, now time.Time, ttl time.Duration) {
	for rid, at := range res {
		if present[rid] || now.Sub(at) > ttl {
			delete(res, rid)
		}
	}
	pruneTokens(tries, func(rid string) bool { _, ok := res[rid]; return ok }, now, ttl)
}

// pruneTokens drops the entries of holds that keep refuses, the tokens that joined more than ttl
// ago, and the entries left without a token.
func pruneTokens(holds map[string]map[string]time.Time, keep func(rid string) bool, now time.Time, ttl time.Duration) {
	for rid, ts := range holds {
		if !keep(rid) {
			delete(holds, rid)
			continue
		}
		for tok, at := range ts {
			if now.Sub(at) > ttl {
				delete(ts, tok)
			}
		}
		if len(ts) == 0 {
			delete(holds, rid)
		}
	}
}

// release removes the try token's hold on owner's reservation of id; the reservation goes with
// its last try. A reservation this try does not hold (it expired and another try reserved the id
// again, or it was removed already) is left alone, so a late release of a failed try never drops
// the reservation of a retry. It runs when the spawn ends, created or not; if it fails, the
// reservation expires after the TTL.
func (s *Spawner) release(ctx context.Context, owner, id, token string) error {
	return s.editHold(ctx, owner, id, token, func(res map[string]time.Time, tries map[string]map[string]time.Time) bool {
		delete(tries[id], token)
		if len(tries[id]) == 0 {
			delete(tries, id)
			delete(res, id)
		} else if _, ok := res[id]; ok {
			var last time.Time // the reservation lasts as long as its latest remaining try
			for _, at := range tries[id] {
				if at.After(last) {
					last = at
				}
			}
			res[id] = last
		}
		return true
	})
}

// refresh stamps the try token's hold on owner's reservation of id with the current time, so it
// lasts another ReservationTTL. A settling spawn (settle.go) calls it while its pod may still
// appear, so its slot is held for as long as that is possible, however the TTL compares with the
// lost-write window. A hold that is gone (released, or pruned by another spawn) is not made
// again: that spawn may have taken the slot.
func (s *Spawner) refresh(ctx context.Context, owner, id, token string) error {
	return s.editHold(ctx, owner, id, token, func(res map[string]time.Time, tries map[string]map[string]time.Time) bool {
		if _, ok := res[id]; !ok {
			return false
		}
		now := s.opts.Now()
		tries[id][token] = now
		if res[id].Before(now) {
			res[id] = now
		}
		return true
	})
}

// editHold reads owner's ledger and, when the try token still holds a reservation of id, applies
// edit to its reservations and tries and writes them back (nothing when edit returns false),
// reading again on a conflict. A ledger or a hold that is gone is left alone.
func (s *Spawner) editHold(ctx context.Context, owner, id, token string, edit func(res map[string]time.Time, tries map[string]map[string]time.Time) bool) error {
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
		res, tries := readReservations(&cm), readTries(&cm)
		if _, ok := tries[id][token]; !ok {
			return nil
		}
		if !edit(res, tries) {
			return nil
		}
		writeReservations(&cm, res)
		writeTries(&cm, tries)
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

func ledgerMeta(key client.ObjectKey, owner string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: key.Namespace,
		Name:      key.Name,
		Labels: map[string]string{
			workspace.LabelQuotaLedger: "true",
			workspace.LabelUserSub:     workspace.UserLabel(owner),
		},
		Annotations: map[string]string{workspace.AnnOwner: owner},
	}
}

func readReservations(cm *corev1.ConfigMap) map[string]time.Time {
	out := map[string]time.Time{}
	if raw := cm.Data[ledgerDataKey]; raw != "" {
		// A ledger someone broke by hand is treated as empty; the pods still count.
		_ = json.Unmarshal([]byte(raw), &out)
	}
	return out
}

// readTries reads which tries hold each reservation (reservation -> try token -> when it joined).
// The reservations themselves stay in their own key, in the format of versions without tries,
// which therefore still count them.
func readTries(cm *corev1.ConfigMap) map[string]map[string]time.Time {
	out := map[string]map[string]time.Time{}
	if raw := cm.Data[ledgerTriesKey]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &out) // broken by hand: no try holds anything; the TTL cleans up
	}
	return out
}

func writeTries(cm *corev1.ConfigMap, tries map[string]map[string]time.Time) {
	b, _ := json.Marshal(tries)
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[ledgerTriesKey] = string(b)
}

func writeReservations(cm *corev1.ConfigMap, res map[string]time.Time) {
	b, _ := json.Marshal(res)
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[ledgerDataKey] = string(b)
}

// sleepJitter backs off a little more on every attempt, randomised so that competing writers
// spread out.
func sleepJitter(ctx context.Context, attempt int) error {
	max := time.Duration(min(attempt, 10)) * 10 * time.Millisecond
	d := time.Duration(rand.Int64N(int64(max))) + time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// checkClaims refuses a spawn that would give owner more than MaxClaimsPerUser claims: the
// claims owner has (read from the API server; those of deleted workspaces count, they keep their
// data until someone deletes them) plus the ones this spawn creates (a claim it reuses is not
// new).
func (s *Spawner) checkClaims(ctx context.Context, owner string, pvcs []*corev1.PersistentVolumeClaim) error {
	have := map[string]bool{} // claimKey
	for _, ns := range s.quotaNamespaces() {
		var list corev1.PersistentVolumeClaimList
		if err := s.apiReader.List(ctx, &list, client.InNamespace(ns),
			client.MatchingLabels{workspace.LabelUserSub: workspace.UserLabel(owner)}); err != nil {
			return fmt.Errorf("list volume claims of %s in namespace %s: %w", owner, ns, err)
		}
		for i := range list.Items {
			if c := &list.Items[i]; c.Annotations[workspace.AnnOwner] == owner && c.DeletionTimestamp == nil {
				have[s.claimKey(ns, c.Name)] = true
			}
		}
	}
	added := 0
	for _, p := range pvcs {
		if !have[s.claimKey(p.Namespace, p.Name)] {
			added++
		}
	}
	if added == 0 || len(have)+added <= s.opts.MaxClaimsPerUser {
		return nil
	}
	names := make([]string, 0, len(have))
	for n := range have {
		names = append(names, n)
	}
	sort.Strings(names)
	return errorf(QuotaExceeded, nil, "%s has %d volume %s (%s), this workspace needs %d more, and the limit is %d per user: ask an admin to delete the volumes of workspaces you no longer need (kubectl delete pvc <name>), or reuse the id of a deleted workspace to get its volumes back",
		owner, len(have), plural(len(have), "claim", "claims"), strings.Join(names, ", "), added, s.opts.MaxClaimsPerUser)
}

// claimKey names a claim (or a workspace id) in quota counts and messages: the name in the
// spawner's namespace, namespace/name in another watched namespace.
func (s *Spawner) claimKey(ns, name string) string {
	if ns == s.opts.Namespace {
		return name
	}
	return ns + "/" + name
}
