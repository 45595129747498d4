package lifecycle

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// IdleTimeout is the idle timeout of a template: its nogoo9/idle-timeout, else def. A value that
// does not parse (or is negative) gives def and an error naming the annotation.
func IdleTimeout(ann map[string]string, def time.Duration) (time.Duration, error) {
	v, ok := ann[workspace.AnnIdleTimeout]
	if !ok {
		return def, nil
	}
	d, err := parseDuration(v)
	if err != nil {
		return def, fmt.Errorf("template annotation %s=%q: %w", workspace.AnnIdleTimeout, v, err)
	}
	return d, nil
}

// WebSocketMaxAge is how long an open WebSocket counts as activity after it opened: the
// template's nogoo9/websocket-max-age, or 0 for "as long as it is open".
func WebSocketMaxAge(ann map[string]string) (time.Duration, error) {
	v, ok := ann[workspace.AnnWebSocketMaxAge]
	if !ok {
		return 0, nil
	}
	d, err := parseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("template annotation %s=%q: %w", workspace.AnnWebSocketMaxAge, v, err)
	}
	return d, nil
}

func parseDuration(v string) (time.Duration, error) {
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("not a duration: write it like 30m or 2h")
	}
	if d < 0 {
		return 0, fmt.Errorf("negative: write a positive duration like 30m, or 0 to turn it off")
	}
	return d, nil
}

// IdleSince is when pod was last known to be in use: the latest of its nogoo9/last-activity, its
// nogoo9/started-at and its creation. A start is activity (a workspace just started is not idle,
// however old its last activity is), and each is measured by a time only nogoo9 and the API server
// write: the creation for a pod a spawn, an upgrade or a start on the latest version made, the
// controller's nogoo9/started-at for a stopped pod released from its gate. Not the Ready
// condition: its transition time moves whenever the workspace's own process fails a readiness
// probe once, or its container restarts, so the workspace could keep itself from ever being
// idle; nor the status's start time, which the kubelet writes only once the pod is scheduled,
// so the pass right after a start would still see the stop's time and cull it again.
func IdleSince(pod *corev1.Pod) time.Time {
	since := pod.CreationTimestamp.Time
	for _, k := range []string{workspace.AnnLastActivity, workspace.AnnStartedAt} {
		if t, err := time.Parse(time.RFC3339, pod.Annotations[k]); err == nil && t.After(since) {
			since = t
		}
	}
	return since
}

// WebSocketCounts reports whether a WebSocket opened at opened is activity at now, for a
// template whose maximum WebSocket age is maxAge (0: no maximum).
func WebSocketCounts(opened, now time.Time, maxAge time.Duration) bool {
	return maxAge <= 0 || now.Sub(opened) < maxAge
}

// ShouldRecord reports whether a proxy replica that saw activity at seen writes
// nogoo9/last-activity, given the value the pod carries (recorded, as any replica wrote it) and
// the last write this replica made itself (wrote, zero if none): at most one write per interval
// per workspace across replicas, and never a value older than the recorded one.
func ShouldRecord(seen, recorded, wrote time.Time, interval time.Duration) bool {
	last := recorded
	if wrote.After(last) {
		last = wrote
	}
	return seen.Sub(last) >= interval
}

// ParseActivity reads a pod's nogoo9/last-activity (zero when absent or malformed).
func ParseActivity(pod *corev1.Pod) time.Time {
	t, _ := time.Parse(time.RFC3339, pod.Annotations[workspace.AnnLastActivity])
	return t
}
