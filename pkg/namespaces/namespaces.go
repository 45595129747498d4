// Package namespaces resolves which namespaces nogoo9 watches (--namespaces): its own namespace
// always, plus a list of names or every namespace a label selector picks.
package namespaces

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Spec is a parsed --namespaces value: names, or a selector, never both. The zero Spec watches
// only nogoo9's own namespace, exactly as before the flag existed.
type Spec struct {
	Names    []string
	Selector labels.Selector
}

// IsSelector reports whether the Spec picks namespaces by label (resolved against the API).
func (s Spec) IsSelector() bool { return s.Selector != nil }

// Parse reads a --namespaces value: "" (only nogoo9's namespace), a comma-separated list of
// namespace names ("team-a,team-b"), or a label selector ("nogoo9/enabled=true",
// "team in (a,b)"). A value with '=', '!' or '(' is a selector; anything else is a list.
func Parse(v string) (Spec, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return Spec{}, nil
	}
	if strings.ContainsAny(v, "=!()") || strings.Contains(v, " in ") || strings.Contains(v, " notin ") {
		sel, err := labels.Parse(v)
		if err != nil {
			return Spec{}, fmt.Errorf("--namespaces %q is not a valid label selector: %v; write e.g. nogoo9/enabled=true, or list names: team-a,team-b", v, err)
		}
		if sel.Empty() {
			return Spec{}, fmt.Errorf("--namespaces %q selects every namespace: name the label, e.g. nogoo9/enabled=true", v)
		}
		return Spec{Selector: sel}, nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return Spec{}, fmt.Errorf("--namespaces: %q is not a namespace name (%s): give names separated by commas, or a label selector such as nogoo9/enabled=true", n, strings.Join(errs, "; "))
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return Spec{Names: names}, nil
}

// Resolve returns the namespaces to watch, sorted, always including home (nogoo9's namespace:
// its templates, quota ledgers and leader-election Lease live there). A selector is evaluated once,
// now, with reader (an uncached client: listing namespaces needs `list namespaces` on the cluster);
// a namespace labelled later is noticed by Watcher, which makes the process restart.
func Resolve(ctx context.Context, s Spec, home string, reader client.Reader) ([]string, error) {
	out := []string{home}
	names := s.Names
	if s.IsSelector() {
		var list corev1.NamespaceList
		if err := reader.List(ctx, &list, client.MatchingLabelsSelector{Selector: s.Selector}); err != nil {
			return nil, fmt.Errorf("list the namespaces --namespaces %q selects: %w", s.Selector, err)
		}
		for _, ns := range list.Items {
			if ns.DeletionTimestamp == nil {
				names = append(names, ns.Name)
			}
		}
	}
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ProtectionLabel=true is the label that binds, in a watched namespace, the admission policy that
// keeps nogoo9's bookkeeping annotations and labels nogoo9's (config/namespaces,
// bookkeeping_watched_binding.yaml; nogoo9's own namespace has its own binding, by name).
const ProtectionLabel = "nogoo9/enabled"

// Unprotected returns the namespaces of watched, home aside, that are not labelled
// ProtectionLabel=true, sorted: the admission policy does not apply there, so whoever may create
// or patch pods in one can forge a workspace's owner or claim a path the proxy serves
// (docs/deploy.md). A list of names, or a selector on another label, picks such namespaces
// without a word otherwise. reader lists namespaces (`list namespaces`, which selector mode
// needs anyway); one List, of the labelled namespaces only.
func Unprotected(ctx context.Context, reader client.Reader, watched []string, home string) ([]string, error) {
	var list corev1.NamespaceList
	if err := reader.List(ctx, &list, client.MatchingLabels{ProtectionLabel: "true"}); err != nil {
		return nil, fmt.Errorf("list the namespaces labelled %s=true: %w", ProtectionLabel, err)
	}
	labelled := map[string]bool{}
	for _, ns := range list.Items {
		labelled[ns.Name] = true
	}
	var out []string
	for _, n := range watched {
		if n != home && !labelled[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ErrChanged is returned by Watcher.Start when the namespaces a selector picks are no longer the
// ones resolved at start: the process should exit so that it starts again with the new set (the
// Deployment restarts it; leader election hands the controller over safely meanwhile).
var ErrChanged = errors.New("the namespaces --namespaces selects changed")

// Watcher notices namespaces labelled (or unlabelled, or deleted) after start in selector mode.
// It lists the selected namespaces about every Interval and stops with ErrChanged once two
// consecutive looks find the same set, different from Watched: a label that flips and flips back
// between two looks restarts nothing. It runs on every replica (the cache, proxy and API of each
// need the set); each replica's looks are jittered (Interval to 1.5 Interval apart), so replicas
// started together do not all exit at the same moment.
type Watcher struct {
	Spec    Spec
	Home    string
	Watched []string
	// Reader lists namespaces (an uncached client: `list namespaces`, as Resolve).
	Reader client.Reader
	// Interval is the least time between two looks (default 30s).
	Interval time.Duration
	// After, if set, replaces time.After for the wait before each look (tests).
	After func(time.Duration) <-chan time.Time
	// Log receives the change (and failed looks, which are retried).
	Log logr.Logger
}

// NeedLeaderElection is false: every replica watches its own set.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start looks until ctx ends (nil) or the set changes for good (ErrChanged, wrapped with both
// sets): the same changed set on two consecutive looks. A failed look is no look: it neither
// confirms nor forgets a change seen before it.
func (w *Watcher) Start(ctx context.Context) error {
	if !w.Spec.IsSelector() {
		return nil // a list of names does not change by itself
	}
	interval := w.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	after := w.After
	if after == nil {
		after = time.After
	}
	var seen []string // a changed set seen on the last look, to be confirmed by the next
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-after(wait.Jitter(interval, 0.5)):
		}
		now, err := Resolve(ctx, w.Spec, w.Home, w.Reader)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.Log.Error(err, "Cannot list the namespaces --namespaces selects; looking again later")
			continue
		}
		switch {
		case slices.Equal(now, w.Watched):
			if seen != nil {
				w.Log.Info("The namespaces --namespaces selects are the watched ones again: no restart", "watched", w.Watched, "selectedBefore", seen)
			}
			seen = nil
		case !slices.Equal(now, seen):
			w.Log.Info("The namespaces --namespaces selects changed: restarting if the next look finds the same", "watched", w.Watched, "selected", now)
			seen = now
		default:
			w.Log.Info("The namespaces --namespaces selects changed: exiting so that the restart watches the new set", "watched", w.Watched, "selected", now)
			return fmt.Errorf("%w: watching [%s], the selector now picks [%s]", ErrChanged, strings.Join(w.Watched, ", "), strings.Join(now, ", "))
		}
	}
}
