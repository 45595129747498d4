package namespaces

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		wantNames []string
		selector  string
		wantErr   string
	}{
		{name: "empty keeps the single-namespace default", in: ""},
		{name: "a list of names, spaces and duplicates ignored", in: "team-a, team-b,,team-a", wantNames: []string{"team-a", "team-b"}},
		{name: "an equality selector", in: "nogoo9/enabled=true", selector: "nogoo9/enabled=true"},
		{name: "a set selector", in: "team in (a,b)", selector: "team in (a,b)"},
		{name: "a name that is no DNS label is refused with the field", in: "team-a,Team_B", wantErr: `--namespaces: "Team_B" is not a namespace name`},
		{name: "a broken selector is refused", in: "team in (a", wantErr: "is not a valid label selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Names, tc.wantNames) {
				t.Errorf("names %v, want %v", s.Names, tc.wantNames)
			}
			if got := ""; s.Selector != nil {
				got = s.Selector.String()
				if got != tc.selector {
					t.Errorf("selector %q, want %q", got, tc.selector)
				}
			} else if tc.selector != "" {
				t.Errorf("no selector, want %q", tc.selector)
			}
		})
	}
}

// scriptedReader answers each List of namespaces with the next set of its script (nil: an
// error); past the end it ends the watcher's context. looks counts the Lists.
type scriptedReader struct {
	client.Reader
	script [][]string
	looks  int
	end    context.CancelFunc
}

func (r *scriptedReader) List(ctx context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if r.looks == len(r.script) {
		r.end()
		return ctx.Err()
	}
	names := r.script[r.looks]
	r.looks++
	if names == nil {
		return errors.New("the API server is unavailable")
	}
	nl := list.(*corev1.NamespaceList)
	for _, n := range names {
		nl.Items = append(nl.Items, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return nil
}

// A namespace set has to be seen changed, the same, on two consecutive looks before a replica
// exits: a label that flips and flips back between two looks restarts nothing. Each look waits a
// jittered interval (the test's After fires at once and records the waits: no real time passes).
func TestWatcherRestartsOnlyOnAChangeSeenTwice(t *testing.T) {
	const home = "nogoo9-system"
	watched := []string{"team-a"}
	labelled := []string{"team-a", "team-c"}
	for _, tc := range []struct {
		name      string
		script    [][]string
		wantLooks int
		wantErr   string // "" for no ErrChanged
	}{
		{"nothing changes: no restart", [][]string{watched, watched, watched}, 3, ""},
		{"a namespace labelled for one look only (the label flipped back before the next): no restart",
			[][]string{watched, labelled, watched, watched}, 4, ""},
		{"a namespace unlabelled for one look only: no restart", [][]string{watched, {}, watched}, 3, ""},
		{"a lasting change: ErrChanged on the second look that finds it", [][]string{watched, labelled, labelled, labelled}, 3, "team-c"},
		{"two different changes in a row do not confirm each other", [][]string{labelled, {"team-a", "team-c", "team-d"}, {"team-a", "team-c", "team-d"}}, 3, "team-d"},
		{"a change, then back, then the change again: two looks of it in a row are needed again",
			[][]string{labelled, watched, labelled, watched}, 4, ""},
		{"a failed look between two looks of the same change neither confirms nor forgets it",
			[][]string{labelled, nil, labelled}, 3, "team-c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sel, _ := Parse("nogoo9/enabled=true")
			r := &scriptedReader{script: tc.script, end: cancel}
			var waits []time.Duration
			fired := make(chan time.Time, 1)
			w := &Watcher{Spec: sel, Home: home, Watched: append([]string{home}, watched...), Reader: r, Interval: 10 * time.Second,
				After: func(d time.Duration) <-chan time.Time {
					waits = append(waits, d)
					fired <- time.Time{}
					return fired
				}}
			err := w.Start(ctx)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Start = %v after %d looks, want no restart", err, r.looks)
			case tc.wantErr != "" && (!errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Start = %v after %d looks, want ErrChanged naming %s", err, r.looks, tc.wantErr)
			}
			if r.looks != tc.wantLooks {
				t.Errorf("looks = %d, want %d", r.looks, tc.wantLooks)
			}
			for _, d := range waits {
				if d < w.Interval || d > w.Interval*3/2 {
					t.Errorf("waited %s before a look, want between Interval (%s) and 1.5 Interval", d, w.Interval)
				}
			}
		})
	}
}

// Replicas started together look at different moments: each wait is drawn anew.
func TestWatcherJittersItsLooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sel, _ := Parse("nogoo9/enabled=true")
	script := make([][]string, 20)
	for i := range script {
		script[i] = []string{}
	}
	seen := map[time.Duration]bool{}
	fired := make(chan time.Time, 1)
	w := &Watcher{Spec: sel, Home: "nogoo9-system", Watched: []string{"nogoo9-system"}, Reader: &scriptedReader{script: script, end: cancel},
		After: func(d time.Duration) <-chan time.Time {
			if d < 30*time.Second || d > 45*time.Second {
				t.Errorf("waited %s before a look, want the default 30s to 45s", d)
			}
			seen[d] = true
			fired <- time.Time{}
			return fired
		}}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 2 {
		t.Fatalf("21 waits of %v: every look at the same interval, so replicas started together restart together", seen)
	}
}

// Resolve against a real API server: the selector is evaluated by kube-apiserver's label matching.
// Names are unique per run, so -count=3 passes.
func TestResolveAlwaysIncludesHomeAndPicksLabelledNamespaces(t *testing.T) {
	c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1000000)
	label := "nogoo9-test/" + run
	home, a, b, c3 := run+"-home", run+"-team-a", run+"-team-b", run+"-team-c"
	for name, l := range map[string]map[string]string{
		home: nil, a: {label: "true", ProtectionLabel: "true"}, b: {label: "true"}, c3: {label: "false"},
	} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", []string{home}},
		{b + "," + a, []string{home, a, b}},
		{home + "," + a, []string{home, a}},
		{label + "=true", []string{home, a, b}},
		{label + "=nowhere", []string{home}},
	} {
		s, err := Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Resolve(ctx, s, home, c)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Resolve(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// Of the watched namespaces, b lacks the label that binds the admission policy there; home
	// has a binding of its own.
	if got, err := Unprotected(ctx, c, []string{home, a, b}, home); err != nil || !slices.Equal(got, []string{b}) {
		t.Errorf("Unprotected = %v (%v), want [%s]", got, err, b)
	}
	// A namespace labelled after start: the Watcher stops with ErrChanged naming both sets; while
	// nothing changes it keeps running (it is still running after several looks).
	sel, _ := Parse(label + "=true")
	w := &Watcher{Spec: sel, Home: home, Watched: []string{home, a, b}, Reader: c, Interval: 50 * time.Millisecond}
	done := make(chan error, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { done <- w.Start(wctx) }()
	select {
	case err := <-done:
		t.Fatalf("the Watcher stopped although nothing changed: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: c3}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels[label] = "true"
	if err := c.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), c3) {
			t.Errorf("Watcher.Start() = %v, want ErrChanged naming %s", err, c3)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Watcher did not notice a namespace labelled after start within 30s")
	}
	// A list of names never changes: the Watcher returns nil at once.
	names, _ := Parse(a)
	if err := (&Watcher{Spec: names, Home: home, Watched: []string{home, a}, Reader: c}).Start(ctx); err != nil {
		t.Errorf("Watcher over a list of names: %v", err)
	}
}

// ProtectionLabel is the label the watched namespaces' admission binding selects: the start-up
// warning (Unprotected) checks the label that really binds the policy.
func TestProtectionLabelIsTheOneTheAdmissionBindingSelects(t *testing.T) {
	raw, err := os.ReadFile("../../config/namespaces/bookkeeping_watched_binding.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	sel := b.Spec.MatchResources.NamespaceSelector
	if sel == nil || sel.MatchLabels[ProtectionLabel] != "true" || len(sel.MatchLabels) != 1 || len(sel.MatchExpressions) != 0 {
		t.Errorf("the binding selects %+v, want exactly %s=true", sel, ProtectionLabel)
	}
}

// startAPIServer starts a kube-apiserver (envtest) for the test, stopped when it ends, and gives
// a client of it; under -short the test skips itself.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest did not start (KUBEBUILDER_ASSETS=%s): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
