package spawner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
const (
	ledgerPrefix  = "nogoo9-quota-"
	ledgerDataKey = "reservations"
	maxAttempts   = 100
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

// reserve records a reservation of id for owner in the ledger, or refuses with QuotaExceeded.
func (s *Spawner) reserve(ctx context.Context, owner, id string) error {
	key := client.ObjectKey{Namespace: s.opts.Namespace, Name: LedgerName(owner)}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			if err := sleepJitter(ctx, attempt); err != nil {
				return err
			}
		}
		var cm corev1.ConfigMap
		exists := true
		if err := s.apiReader.Get(ctx, key, &cm); apierrors.IsNotFound(err) {
			exists = false
		} else if err != nil {
			return fmt.Errorf("read quota ledger %s: %w", key.Name, err)
		}
		res := readReservations(&cm)
		pods, err := s.ownerPods(ctx, owner)
		if err != nil {
			return err
		}
		now := s.opts.Now()
		live := map[string]bool{}
		present := map[string]bool{}
		stopped := s.stoppedKeys(pods)
		for i := range pods {
			k := s.claimKey(pods[i].Namespace, workspace.ID(&pods[i])) // the id, or namespace/id elsewhere
			present[k] = true
			if counts(&pods[i]) && !stopped[k] {
				live[k] = true
			}
		}
		for rid, at := range res {
			if present[rid] || now.Sub(at) > s.opts.ReservationTTL {
				delete(res, rid)
				continue
			}
			live[rid] = true
		}
		if live[id] {
			return errorf(Conflict, nil, "workspace %q is already being created by another request: wait for it, or choose another id", id)
		}
		if len(live) >= s.opts.MaxPerUser {
			ids := make([]string, 0, len(live))
			for k := range live {
				ids = append(ids, k)
			}
			sort.Strings(ids)
			return errorf(QuotaExceeded, nil, "%s already has %d running or pending %s (%s) and the limit is %d per user: delete or stop one before creating another",
				owner, len(live), plural(len(live), "workspace", "workspaces"), strings.Join(ids, ", "), s.opts.MaxPerUser)
		}
		res[id] = now
		writeReservations(&cm, res)
		if exists {
			err = s.client.Update(ctx, &cm)
		} else {
			cm.ObjectMeta = ledgerMeta(key, owner)
			writeReservations(&cm, res)
			err = s.client.Create(ctx, &cm)
		}
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			continue // someone else wrote the ledger first: read it again
		default:
			return fmt.Errorf("write quota ledger %s: %w", key.Name, err)
		}
	}
	return fmt.Errorf("quota ledger %s of %s stayed busy after %d attempts: retry the spawn", key.Name, owner, maxAttempts)
}

// release removes owner's reservation of id. It runs when the spawn ends, created or not; if it
// fails, the reservation expires after the TTL.
func (s *Spawner) release(ctx context.Context, owner, id string) error {
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
			return err
		}
		res := readReservations(&cm)
		if _, ok := res[id]; !ok {
			return nil
		}
		delete(res, id)
		writeReservations(&cm, res)
		err := s.client.Update(ctx, &cm)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("quota ledger %s stayed busy", key.Name)
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
