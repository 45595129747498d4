// Package namespaces resolves which namespaces nogoo9 watches (--namespaces): its own namespace
// always, plus a list of names or every namespace a label selector picks.
package namespaces

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
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
// a namespace labelled later is watched after a restart.
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
