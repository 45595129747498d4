package upgrade

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// ChooseStrategy picks Recreate when any claim cur mounts is ReadWriteOnce or ReadWriteOncePod
// (two pods cannot both use it) or is not known (the safe reading), else SideBySide. why says which
// claim decided, for the Event.
func ChooseStrategy(cur *corev1.Pod, claims map[string]*corev1.PersistentVolumeClaim) (Strategy, string) {
	for _, v := range cur.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		if single, why := singleWriter(v.PersistentVolumeClaim.ClaimName, claims); single {
			return Recreate, why
		}
	}
	return SideBySide, "no single-writer claim"
}

// singleWriter reports whether claim name is ReadWriteOnce or ReadWriteOncePod, or not known (the
// safe reading), and says which.
func singleWriter(name string, claims map[string]*corev1.PersistentVolumeClaim) (bool, string) {
	c := claims[name]
	if c == nil {
		return true, fmt.Sprintf("claim %s was not found, assumed single-writer", name)
	}
	modes := append(append([]corev1.PersistentVolumeAccessMode{}, c.Spec.AccessModes...), c.Status.AccessModes...)
	for _, m := range modes {
		if m == corev1.ReadWriteOnce || m == corev1.ReadWriteOncePod {
			return true, fmt.Sprintf("claim %s is %s", name, m)
		}
	}
	return false, ""
}

// planRecreate drives an upgrade whose new pod (head) needs the old pod's volume: the old pod is
// deleted as soon as head exists (head carries the old spec to roll back to); head Ready concludes
// it (the rollback spec is dropped); head failed brings the old spec back as a new pod.
func planRecreate(head *corev1.Pod, live, all []*corev1.Pod, claims map[string]*corev1.PersistentVolumeClaim, now time.Time, cfg Config) Move {
	old := OldPod(head, live)
	started := StartedAt(head)
	ready := workspace.IsReady(head)
	if old != nil {
		if f, failed := Failed(head, now, cfg); failed && !ready {
			// The old pod is still here: it keeps serving, exactly as side-by-side.
			return failSideBySide(head, old, f, now, started)
		}
		if _, err := cfg.Keys.VerifyRecord(head); err != nil && !ready {
			// Deleting the old pod before the new one is Ready is what a Recreate upgrade does,
			// and what a forged nogoo9/upgrade-strategy would make nogoo9 do: only on a record
			// nogoo9 signed.
			if claim := heldSingleWriter(head, all, claims); claim != "" {
				// Nor may the new pod start next to the old one: a ReadWriteOnce claim admits two
				// pods on one node, and both would write it. Without --integrity-key-file every
				// restart leaves the records of the upgrades in flight unverifiable, so this is no
				// rare case: the upgrade fails at once, as side-by-side does (the old pod keeps
				// serving; the new pod, which the gate has kept from running, goes).
				return failSideBySide(head, old, Failure{At: now, Reason: ReasonRecordNotVerified,
					Message: fmt.Sprintf("%v; pod %s still mounts claim %s, which pod %s cannot share: request the upgrade again (with --integrity-key-file, upgrades in flight survive a restart)",
						err, old.Name, claim, head.Name)}, now, started)
			}
			// No single-writer claim is shared: it proceeds as side-by-side (the old pod goes
			// once the new one is Ready, or stays if it fails).
			m := Move{State: StateUpgrading, RequeueAfter: Deadline(head, cfg).Sub(now), Actions: []Action{{
				Kind: Event, Pod: head, EventType: corev1.EventTypeWarning, Reason: ReasonUntrustedAnnotations,
				Message: fmt.Sprintf("Pod %s is marked as a Recreate upgrade of pod %s, but %v; pod %s stays until pod %s is Ready.",
					head.Name, old.Name, err, old.Name, head.Name)}}}
			if gated(head) {
				// As side-by-side, the new pod must be able to become Ready next to the old one.
				m.Actions = append(m.Actions, ungate(head, now))
				m.RequeueAfter = cfg.timeout()
			}
			return m
		}
		return Move{State: StateUpgrading, Actions: cutover(head, old, Action{})}
	}
	if ready {
		d := nonNegative(now.Sub(started))
		return Move{State: StateUpgrading, Actions: []Action{{
			Kind: PatchPod, Pod: head,
			Remove: []string{workspace.AnnRollbackSpec, workspace.AnnUpgradeStartedAt},
			Result: ResultSucceeded, Duration: d, Strategy: Recreate,
			EventType: corev1.EventTypeNormal, Reason: ReasonUpgradeSucceeded,
			Message: fmt.Sprintf("Upgraded workspace %s from pod %s (version %s) to pod %s (version %s) in %s.",
				workspace.ID(head), head.Annotations[workspace.AnnUpgradeFrom], head.Annotations[workspace.AnnUpgradeFromVersion],
				head.Name, workspace.TemplateVersion(head), d.Round(time.Second)),
		}}}
	}
	deadline := Deadline(head, cfg)
	if gated(head) {
		// The new pod has not run yet: it waits for the old pod to release the volume, and the
		// old pod's graceful termination (a preStop hook, a terminationGracePeriodSeconds of up
		// to an hour) is no fault of the new version.
		if !volumesHeld(head, all) {
			return Move{State: StateUpgrading, RequeueAfter: cfg.timeout(), Actions: []Action{ungate(head, now)}}
		}
		until, holder := releaseDeadline(head, all, deadline)
		if now.Before(until) {
			return Move{State: StateUpgrading, RequeueAfter: until.Sub(now)}
		}
		if holder != nil {
			// Stuck terminating (a lost node, say): the wait is bounded, never endless.
			return rollBack(head, Failure{At: until, Reason: ReasonVolumeNotReleased,
				Message: fmt.Sprintf("pod %s still held claim %s after the deadline and its grace period of %s, so pod %s never started",
					holder.Name, sharedClaims(head, holder)[0], gracePeriod(holder), head.Name)}, now, started)
		}
	}
	f, failed := Failed(head, now, cfg)
	if !failed {
		return Move{State: StateUpgrading, RequeueAfter: deadline.Sub(now)}
	}
	return rollBack(head, f, now, started)
}

// ungate is the RemoveGate that lets a Recreate's new pod up go to the scheduler, and the start of
// its deadline (nogoo9/upgrade-started-at, written in the same patch: no extra write). Until now the
// pod has not run; however long it waited (the old pod's graceful termination, nogoo9 down), the
// new version gets the whole timeout to become Ready from here, not what is left of it. The gate
// is removed once per pod (the API server admits no new gate on an existing pod), so this restart
// of the deadline cannot repeat.
func ungate(up *corev1.Pod, now time.Time) Action {
	return Action{Kind: RemoveGate, Pod: up, Gate: workspace.GateVolumeRelease,
		Annotations: map[string]string{workspace.AnnUpgradeStartedAt: now.UTC().Format(time.RFC3339)}}
}

// rollBack is the move that ends the Recreate upgrade whose new pod (head) failed with f, its old
// pod gone: a pod from the stored previous spec.
func rollBack(head *corev1.Pod, f Failure, now, started time.Time) Move {
	name := RollbackPodName(head)
	return Move{State: StateRollingBack, Actions: []Action{{
		Kind: CreateRollbackPod, Pod: head, Name: name, Strategy: Rollback,
		Annotations: map[string]string{
			workspace.AnnUpgradeFrom:        head.Name,
			workspace.AnnUpgradeFromUID:     string(head.UID),
			workspace.AnnUpgradeFromVersion: workspace.TemplateVersion(head),
			workspace.AnnUpgradeStrategy:    string(Rollback),
			workspace.AnnLastUpgradeError:   FailureText(f.At, f.Reason, f.Message),
		},
		Result: ResultFailed, Duration: nonNegative(now.Sub(started)),
		EventType: corev1.EventTypeWarning, Reason: ReasonUpgradeFailed,
		Message: fmt.Sprintf("Upgrade of workspace %s to version %s failed: %s: %s; bringing it back on version %s as pod %s.",
			workspace.ID(head), workspace.TemplateVersion(head), f.Reason, f.Message, head.Annotations[workspace.AnnUpgradeFromVersion], name),
	}}}
}

// mountsClaims reports whether p mounts a PersistentVolumeClaim.
func mountsClaims(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil })
}

// gated reports whether up still waits behind nogoo9's scheduling gate.
func gated(up *corev1.Pod) bool {
	for _, g := range up.Spec.SchedulingGates {
		if g.Name == workspace.GateVolumeRelease {
			return true
		}
	}
	return false
}

// volumesHeld reports whether another pod of the workspace, live or still terminating, mounts a
// claim that up mounts: the volume is not free yet. A pod is gone for the scheduler only once the
// API server has removed it.
func volumesHeld(up *corev1.Pod, all []*corev1.Pod) bool {
	for _, p := range all {
		if !samePod(p, up) && len(sharedClaims(up, p)) > 0 {
			return true
		}
	}
	return false
}

// heldSingleWriter is a claim up mounts that another pod of the workspace, live or terminating,
// mounts too and that is ReadWriteOnce or ReadWriteOncePod (or not known), or "": up must not run
// next to that pod.
func heldSingleWriter(up *corev1.Pod, all []*corev1.Pod, claims map[string]*corev1.PersistentVolumeClaim) string {
	for _, p := range all {
		if samePod(p, up) {
			continue
		}
		for _, c := range sharedClaims(up, p) {
			if single, _ := singleWriter(c, claims); single {
				return c
			}
		}
	}
	return ""
}

func samePod(p, up *corev1.Pod) bool { return p == up || p.UID == up.UID && p.UID != "" }

// sharedClaims are the claims that both up and p mount.
func sharedClaims(up, p *corev1.Pod) []string {
	mine := map[string]bool{}
	for _, v := range up.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mine[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	var out []string
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && mine[v.PersistentVolumeClaim.ClaimName] {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// releaseDeadline is how long a Recreate's gated new pod up waits for the volume: the deadline,
// plus the longest grace period of the terminating pods that still hold a claim up mounts (holder:
// that pod; nil when none is terminating, and the deadline stands). A pod stuck terminating must
// not hold the workspace for ever.
func releaseDeadline(up *corev1.Pod, all []*corev1.Pod, deadline time.Time) (until time.Time, holder *corev1.Pod) {
	until = deadline
	for _, p := range all {
		if p.DeletionTimestamp == nil || samePod(p, up) || len(sharedClaims(up, p)) == 0 {
			continue
		}
		if t := deadline.Add(gracePeriod(p)); holder == nil || t.After(until) {
			until, holder = t, p
		}
	}
	return until, holder
}

// gracePeriod is how long p may take to terminate: the grace period of its deletion (which the API
// server records, from the pod's spec unless the delete named one), else its spec's (a cached pod
// has no spec), else Kubernetes' default.
func gracePeriod(p *corev1.Pod) time.Duration {
	switch {
	case p.DeletionGracePeriodSeconds != nil:
		return time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	case p.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// planRollback drives the pod that restores a failed Recreate upgrade (head): the failed pod goes
// at once, so the volume is free for head.
func planRollback(head *corev1.Pod, live []*corev1.Pod) Move {
	m := Move{State: StateRollingBack}
	if old := OldPod(head, live); old != nil {
		m.Actions = cutover(head, old, Action{})
	}
	return m
}

// rollbackDropped are the annotations a restored pod does not inherit from the pod it restores:
// the record of that pod's own upgrade and intent.
var rollbackDropped = []string{
	workspace.AnnUpgradeRequested, workspace.AnnUpgradePod, workspace.AnnUpgradeStartedAt,
	workspace.AnnTargetVersion, workspace.AnnAutoUpgrade, workspace.AnnUpgradeFrom, workspace.AnnUpgradeFromUID, workspace.AnnUpgradeFromVersion,
	workspace.AnnUpgradeStrategy, workspace.AnnRollbackSpec, workspace.AnnLastUpgradeError,
	workspace.AnnUpgradeHMAC, lastApplied,
}

// RollbackSpec is the nogoo9/rollback-spec value for old, which must be the full pod read from the
// API server (a cached pod is stripped): its labels, annotations and spec as JSON, without what
// the cluster filled in for the old pod (node, service-account token volume), compressed
// (EncodeRollbackSpec).
func RollbackSpec(old *corev1.Pod) (string, error) {
	keep := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Labels: old.Labels, Annotations: map[string]string{}},
		Spec:       workspace.RecreatableSpec(&old.Spec),
	}
	for k, v := range old.Annotations {
		keep.Annotations[k] = v
	}
	for _, k := range rollbackDropped {
		delete(keep.Annotations, k)
	}
	b, err := json.Marshal(keep)
	if err != nil {
		return "", fmt.Errorf("encode rollback spec of pod %s: %w", old.Name, err)
	}
	return EncodeRollbackSpec(b)
}

// rollbackSpecGzip starts a nogoo9/rollback-spec written compressed: the pod JSON, gzip, then
// base64 (an annotation is a string). A value that starts with "{" is the plain JSON that nogoo9
// wrote before (pods of an older replica, still in flight): both are read.
const rollbackSpecGzip = "gzip+base64:"

// maxRollbackSpecJSON bounds the decompressed rollback spec. Annotations hold at most 256 KiB in
// all, and a pod's JSON is a few KiB; the bound keeps a hostile value (the HMAC is checked first
// anyway) from inflating without limit.
const maxRollbackSpecJSON = 4 << 20

// EncodeRollbackSpec is the nogoo9/rollback-spec value for the pod JSON podJSON: compressed,
// because the spec rides on every write and watch event of the new pod until it is Ready (0.45x
// to 0.6x the JSON's size for the pods measured in bench/history.md, "Sixth round").
func EncodeRollbackSpec(podJSON []byte) (string, error) {
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(podJSON); err != nil {
		return "", fmt.Errorf("compress rollback spec: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("compress rollback spec: %w", err)
	}
	return rollbackSpecGzip + base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// gzipWriters are reused: a new writer allocates about 800 KB of tables, ten times the time of
// compressing a pod's JSON, and garbage the collector then works through in the middle of a bulk
// upgrade (the first build of this round spent 0.1 of nogoo9's 0.7 CPU-s per 100 Recreate starts
// there).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestCompression) // the level is valid: no error
	return zw
}}

// DecodeRollbackSpec returns the pod JSON of a nogoo9/rollback-spec value in either format
// (compressed, or the plain JSON of older replicas).
func DecodeRollbackSpec(raw string) ([]byte, error) {
	switch {
	case strings.HasPrefix(raw, "{"):
		return []byte(raw), nil
	case strings.HasPrefix(raw, rollbackSpecGzip):
	default:
		return nil, fmt.Errorf("%s starts with neither %q nor \"{\" (a pod JSON)", workspace.AnnRollbackSpec, rollbackSpecGzip)
	}
	z, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(raw, rollbackSpecGzip))
	if err != nil {
		return nil, fmt.Errorf("%s is not base64 after %q: %w", workspace.AnnRollbackSpec, rollbackSpecGzip, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("%s is not gzip: %w", workspace.AnnRollbackSpec, err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, maxRollbackSpecJSON+1))
	if err != nil {
		return nil, fmt.Errorf("%s does not decompress: %w", workspace.AnnRollbackSpec, err)
	}
	if len(b) > maxRollbackSpecJSON {
		return nil, fmt.Errorf("%s decompresses to more than %d bytes", workspace.AnnRollbackSpec, maxRollbackSpecJSON)
	}
	return b, nil
}

// RollbackPod rebuilds the previous pod from failed's nogoo9/rollback-spec (failed must be read
// from the API server), named name in failed's namespace, with annotations added.
func RollbackPod(failed *corev1.Pod, name string, annotations map[string]string) (*corev1.Pod, error) {
	raw := failed.Annotations[workspace.AnnRollbackSpec]
	if raw == "" {
		return nil, fmt.Errorf("pod %s has no %s to roll back to", failed.Name, workspace.AnnRollbackSpec)
	}
	js, err := DecodeRollbackSpec(raw)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", failed.Name, err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(js, &p); err != nil {
		return nil, fmt.Errorf("pod %s: %s is not a pod JSON: %w", failed.Name, workspace.AnnRollbackSpec, err)
	}
	if len(p.Spec.Containers) == 0 || p.Labels[workspace.LabelWorkspaceID] != workspace.ID(failed) {
		return nil, fmt.Errorf("pod %s: %s does not describe a pod of workspace %s", failed.Name, workspace.AnnRollbackSpec, workspace.ID(failed))
	}
	p.TypeMeta = metav1.TypeMeta{}
	p.Name, p.Namespace, p.GenerateName = name, failed.Namespace, ""
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for _, k := range rollbackDropped {
		delete(p.Annotations, k)
	}
	for k, v := range annotations {
		p.Annotations[k] = v
	}
	p.Spec.NodeName = ""
	p.Spec.EphemeralContainers = nil
	// The failed pod may still run on the same single-writer volume (a process that never turned
	// Ready, a grace period): the restored pod waits behind the gate until no other pod of the
	// workspace holds a claim it mounts (Plan removes it), as a Recreate-upgraded pod does.
	if mountsClaims(&p) && !gated(&p) {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: workspace.GateVolumeRelease})
	}
	// The restored pod must be the same workspace of the same owner as the failed one. Its other
	// labels and annotations are the ones of the pod it restores (the spec has them), not the
	// failed version's.
	preserveIdentityKeys(&p, failed)
	return &p, nil
}

// identityLabels and identityAnnotations make a pod this workspace of this owner, routed the same
// way; an upgraded pod copies them from the pod it replaces, whoever asked for the upgrade.
var (
	identityLabels = []string{workspace.LabelType, workspace.LabelWorkspaceID, workspace.LabelUserSub}
	// The ports are not identity: they follow the template version the pod is built from (a new
	// version may move its server to another port); the paths, which users see, stay.
	// The workspace's update choices (pin, policy, window) are its owner's or admin's, not the
	// template's: they stay too.
	identityAnnotations = []string{workspace.AnnOwner, workspace.AnnWorkspaceName, workspace.AnnWorkspacePath,
		workspace.AnnPreviewPath, workspace.AnnPinned, workspace.AnnUpdatePolicy, workspace.AnnUpdateWindow}
)

// lastApplied is kubectl's copy of an applied object: it describes the old pod, not p.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// PreserveIdentity copies owner, workspace id, name and routing paths from old onto p, so that no
// template or caller can change who owns a workspace or where it is served by upgrading it. The
// owner of a pod of the original format (no nogoo9/owner) is stamped from workspace.Owner.
//
// It also copies old's labels that are not nogoo9's (no nogoo9/ prefix) and that p does not set
// itself: labels people added to the workspace's pod (a team, a cost centre) stay on the pod that
// replaces it, and the template wins on the keys it sets. p must already carry what it is built
// with (the template's keys). Annotations other than nogoo9's are not copied: admission webhooks
// write them too (a sidecar injector's status, a per-container profile), and on a pod built anew
// from another version they would suppress the webhook's work or name containers that are gone.
func PreserveIdentity(p, old *corev1.Pod) {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	for k, v := range old.Labels {
		if _, set := p.Labels[k]; set || strings.HasPrefix(k, workspace.Prefix) {
			continue
		}
		p.Labels[k] = v
	}
	preserveIdentityKeys(p, old)
}

// preserveIdentityKeys is PreserveIdentity's copy of nogoo9's identity keys alone.
func preserveIdentityKeys(p, old *corev1.Pod) {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for _, k := range identityLabels {
		if v, ok := old.Labels[k]; ok {
			p.Labels[k] = v
		}
	}
	for _, k := range identityAnnotations {
		if v, ok := old.Annotations[k]; ok {
			p.Annotations[k] = v
		}
	}
	if o := workspace.Owner(old); o != "" {
		p.Annotations[workspace.AnnOwner] = o
	}
	workspace.CarryCreatedAt(p, old) // the new pod is as old as the workspace, not as itself
}
