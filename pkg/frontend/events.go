package frontend

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
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

// DefaultMaxFollowsPerUser is how many event streams one user may follow at once when
// Config.MaxFollowsPerUser is 0. Each follow holds one API-server watch per pod of the workspace.
const DefaultMaxFollowsPerUser = 5

// podRescan is how often a follow looks in the cache for a new pod of its workspace (the pod an
// upgrade creates), whose events it then lists and watches too.
const podRescan = time.Second

// eventSelector selects the events of one pod on the API server: each call reads only its
// workspace's events, never the namespace's.
func eventSelector(pod string) string {
	return fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod}.AsSelector().String()
}

// EventStream is an open follow of a workspace's events: one watch per pod of the workspace.
type EventStream struct {
	events  chan Event
	errc    chan error
	cancel  context.CancelFunc
	release func()
	once    sync.Once
}

// Events returns the events of a workspace's pods (every pod the cache holds for it, the
// upgraded one included), oldest first. With follow, it also returns a stream of the events that
// come next, on the pods it has and on pods the workspace gets while following; the caller must
// Stop it. A user may follow at most Config.MaxFollowsPerUser streams at once.
func (s *Service) Events(ctx context.Context, id string, follow bool) ([]Event, *EventStream, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	var release func()
	if follow {
		if release, err = s.follows.acquire(c.Subject); err != nil {
			return nil, nil, err
		}
	}
	names := podNames(pods)
	var out []Event
	rvs := map[string]string{}
	for _, name := range names {
		evs, rv, err := s.listPodEvents(ctx, name)
		if err != nil {
			if release != nil {
				release()
			}
			return nil, nil, err
		}
		out = append(out, evs...)
		rvs[name] = rv
	}
	sortEvents(out)
	if !follow {
		return out, nil, nil
	}
	sctx, cancel := context.WithCancel(ctx)
	es := &EventStream{events: make(chan Event, 64), errc: make(chan error, 1), cancel: cancel, release: release}
	for _, name := range names {
		if err := s.watchPodEvents(sctx, es, name, rvs[name]); err != nil {
			es.Stop()
			return nil, nil, err
		}
	}
	go s.followNewPods(sctx, es, id, workspace.Owner(workspace.Active(pods)), names)
	return out, es, nil
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

func sortEvents(evs []Event) {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
}

// listPodEvents lists one pod's events with a field selector, so the API server sends only those.
func (s *Service) listPodEvents(ctx context.Context, pod string) ([]Event, string, error) {
	list, err := s.cfg.Events.Events(s.nsOf(ctx)).List(ctx, metav1.ListOptions{FieldSelector: eventSelector(pod)})
	if err != nil {
		return nil, "", &Error{Code: CodeInternal, Message: "reading events failed; try again", Err: err}
	}
	var out []Event
	for i := range list.Items {
		if e, ok := toEvent(&list.Items[i], pod); ok {
			out = append(out, e)
		}
	}
	return out, list.ResourceVersion, nil
}

// watchPodEvents watches one pod's events from resourceVersion and feeds them into es until ctx
// ends.
func (s *Service) watchPodEvents(ctx context.Context, es *EventStream, pod, resourceVersion string) error {
	w, err := s.cfg.Events.Events(s.nsOf(ctx)).Watch(ctx, metav1.ListOptions{
		FieldSelector: eventSelector(pod), ResourceVersion: resourceVersion, AllowWatchBookmarks: true,
	})
	if err != nil {
		return &Error{Code: CodeInternal, Message: "watching events failed; try again", Err: err}
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					es.fail(fmt.Errorf("event watch closed by the API server"))
					return
				}
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				if k, ok := ev.Object.(*corev1.Event); ok {
					if e, ok := toEvent(k, pod); ok {
						select {
						case es.events <- e:
						case <-ctx.Done():
							return
						}
					}
				}
			}
		}
	}()
	return nil
}

// followNewPods looks in the cache for pods the workspace gets while it is followed; each new
// pod's events so far are sent (they are new to the follower) and its watch starts.
//
// The follow is of one workspace, whose owner the caller was checked against when it opened. Ids
// are unique only among the workspaces that exist: after a delete, another user may spawn one with
// the same id. A new pod of another owner is therefore another workspace, and ends the follow.
func (s *Service) followNewPods(ctx context.Context, es *EventStream, id, owner string, known []string) {
	seen := map[string]bool{}
	for _, n := range known {
		seen[n] = true
	}
	t := time.NewTicker(podRescan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pods, err := s.listPods(ctx, client.MatchingFields{podcache.IndexWorkspaceID: id})
		if err != nil {
			continue
		}
		for _, p := range workspace.GroupByID(pods)[id] {
			if seen[p.Name] {
				continue
			}
			if workspace.Owner(p) != owner {
				es.fail(errorf(CodeNotFound, "workspace %q was deleted while it was followed, and its id now names another workspace: the follow ends", id))
				return
			}
			seen[p.Name] = true
			evs, rv, err := s.listPodEvents(ctx, p.Name)
			if err != nil {
				es.fail(err)
				return
			}
			sortEvents(evs)
			for _, e := range evs {
				select {
				case es.events <- e:
				case <-ctx.Done():
					return
				}
			}
			if err := s.watchPodEvents(ctx, es, p.Name, rv); err != nil {
				es.fail(err)
				return
			}
		}
	}
}

func (es *EventStream) fail(err error) {
	select {
	case es.errc <- err:
	default:
	}
}

// Next blocks until the next event of the workspace, ctx's end (ctx.Err()) or a watch's end.
func (es *EventStream) Next(ctx context.Context) (Event, error) {
	select {
	case <-ctx.Done():
		return Event{}, ctx.Err()
	case e := <-es.events:
		return e, nil
	case err := <-es.errc:
		return Event{}, err
	}
}

// Stop ends the watches and frees the caller's follow slot. It may be called more than once.
func (es *EventStream) Stop() {
	es.once.Do(func() {
		es.cancel()
		if es.release != nil {
			es.release()
		}
	})
}

// followSlots counts each user's open follows.
type followSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newFollowSlots(max int) *followSlots {
	if max <= 0 {
		max = DefaultMaxFollowsPerUser
	}
	return &followSlots{max: max, n: map[string]int{}}
}

// acquire takes one of subject's follow slots, or refuses with CodeTooManyRequests.
func (f *followSlots) acquire(subject string) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[subject] >= f.max {
		return nil, errorf(CodeTooManyRequests, "you already follow %d event streams, the most one user may have open at once: end one (close it, or wait for its timeout) and try again", f.max)
	}
	f.n[subject]++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.n[subject]--; f.n[subject] <= 0 {
				delete(f.n, subject)
			}
		})
	}, nil
}

// toEvent converts an event about pod (the field selector asked for exactly that pod; checked
// again here).
func toEvent(k *corev1.Event, pod string) (Event, bool) {
	if k.InvolvedObject.Kind != "Pod" || k.InvolvedObject.Name != pod {
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
					return nil, errorf(CodeInvalid, "until: %s is not an event reason: give CamelCase reasons such as UpgradeSucceeded,UpgradeFailed", workspace.Quote(r))
				}
			}
			out[r] = true
		}
	}
	return out, nil
}

// FollowOnly refuses options that shape a follow (given: their names, as the caller spelled
// them, e.g. "until", "timeout") on a request that does not follow: they would be ignored, and
// the caller who meant to wait for an event would read the past ones and go. followName is the
// follow option as the caller writes it ("follow=true", "follow: true").
func FollowOnly(follow bool, followName string, given ...string) error {
	if follow || len(given) == 0 {
		return nil
	}
	opts := strings.Join(given, " and ")
	return errorf(CodeInvalid, "%s given without %s: add %s to follow the workspace's events, or leave %s out to read the past ones", opts, followName, followName, opts)
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
