package frontend

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Event is one Kubernetes Event about a pod of a workspace.
type Event struct {
	Time    string `json:"time" jsonschema:"RFC 3339 time of the last occurrence"`
	Type    string `json:"type" jsonschema:"Normal or Warning"`
	Reason  string `json:"reason" jsonschema:"e.g. UpgradeStarted, UpgradeSucceeded, UpgradeFailed, Scheduled, Pulling"`
	Message string `json:"message"`
	Pod     string `json:"pod"`
	Count   int32  `json:"count,omitempty"`
}

// MaxFollow bounds how long an events stream stays open.
const MaxFollow = 5 * time.Minute

// podEventSelector narrows the Event list on the server to events about pods.
const podEventSelector = "involvedObject.kind=Pod"

// EventStream is an open watch on a workspace's events.
type EventStream struct {
	w      watch.Interface
	prefix string
}

// Events returns the events of a workspace's pods (every pod whose name starts with the
// workspace's pod name, upgraded ones included), oldest first. With follow, it also returns a
// stream of the events that come next; the caller must Stop it.
func (s *Service) Events(ctx context.Context, id string, follow bool) ([]Event, *EventStream, error) {
	_, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	prefix := workspace.PodName(workspace.Owner(workspace.Active(pods)), id)
	list, err := s.cfg.Events.CoreV1().Events(s.cfg.Namespace).List(ctx, metav1.ListOptions{FieldSelector: podEventSelector})
	if err != nil {
		return nil, nil, &Error{Code: CodeInternal, Message: "reading events failed; try again", Err: err}
	}
	var out []Event
	for i := range list.Items {
		if e, ok := toEvent(&list.Items[i], prefix); ok {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time < out[j].Time })
	if !follow {
		return out, nil, nil
	}
	w, err := s.cfg.Events.CoreV1().Events(s.cfg.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: podEventSelector, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true,
	})
	if err != nil {
		return nil, nil, &Error{Code: CodeInternal, Message: "watching events failed; try again", Err: err}
	}
	return out, &EventStream{w: w, prefix: prefix}, nil
}

// Next blocks until the next event of the workspace, ctx's end (ctx.Err()) or the watch's end.
func (es *EventStream) Next(ctx context.Context) (Event, error) {
	for {
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case ev, ok := <-es.w.ResultChan():
			if !ok {
				return Event{}, fmt.Errorf("event watch closed by the API server")
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if k, ok := ev.Object.(*corev1.Event); ok {
				if e, ok := toEvent(k, es.prefix); ok {
					return e, nil
				}
			}
		}
	}
}

// Stop ends the watch.
func (es *EventStream) Stop() { es.w.Stop() }

func toEvent(k *corev1.Event, prefix string) (Event, bool) {
	if k.InvolvedObject.Kind != "Pod" || !isWorkspacePodName(k.InvolvedObject.Name, prefix) {
		return Event{}, false
	}
	t := k.LastTimestamp.Time
	if t.IsZero() {
		t = k.EventTime.Time
	}
	if t.IsZero() {
		t = k.CreationTimestamp.Time
	}
	return Event{
		Time: t.UTC().Format(time.RFC3339), Type: k.Type, Reason: k.Reason, Message: k.Message,
		Pod: k.InvolvedObject.Name, Count: k.Count,
	}, true
}

// isWorkspacePodName reports whether name is the workspace's first pod (base) or an upgraded pod
// (base + "-up-" + 5 characters, see workspace.UpgradePodName); a mere prefix match would also
// take in another workspace whose id extends this one's.
func isWorkspacePodName(name, base string) bool {
	if name == base {
		return true
	}
	rest, ok := strings.CutPrefix(name, base+"-up-")
	return ok && len(rest) == 5
}

// EndedUntil is the reason a follow ends with when an event whose reason was listed in "until"
// arrived (EndReason gives the others).
const EndedUntil = "until"

// Until is the set of event reasons that end a follow: a caller waiting for an upgrade passes
// UpgradeSucceeded and UpgradeFailed and gets its answer the moment one of them happens. Only
// events that arrive while following count; past ones (an earlier upgrade's) do not.
type Until map[string]bool

// ParseUntil reads reasons given as a list, each item possibly comma-separated. A reason is a
// CamelCase word such as UpgradeSucceeded.
func ParseUntil(items []string) (Until, error) {
	out := Until{}
	for _, item := range items {
		for _, r := range strings.Split(item, ",") {
			r = strings.TrimSpace(r)
			if r == "" {
				continue
			}
			for _, c := range r {
				if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
					return nil, errorf(CodeInvalid, "until: %q is not an event reason: give CamelCase reasons such as UpgradeSucceeded,UpgradeFailed", r)
				}
			}
			out[r] = true
		}
	}
	return out, nil
}

// Ends reports whether e ends the follow.
func (u Until) Ends(e Event) bool { return u[e.Reason] }

// EndReason names why a follow's Next failed: "timeout" (the caller's timeout), "cancelled"
// (the caller went away) or the watch's error.
func EndReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		return err.Error()
	}
}
