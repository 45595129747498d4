package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Timeline records, per unit of a rollout (a workspace, a floor slot), when each milestone was
// first seen through the benchmark's watch, relative to the start of the clock, and summarises
// them as percentiles: the per-step breakdown that shows where one subject's path is longer than
// another's. It is filled from the watch loop only (one goroutine); it never asserts anything.
type Timeline struct {
	start time.Time
	order []string
	seen  map[string]map[string]time.Duration // milestone -> unit -> first seen
}

// NewTimeline starts a timeline whose milestones are reported in the order given.
func NewTimeline(start time.Time, milestones ...string) *Timeline {
	t := &Timeline{start: start, order: milestones, seen: map[string]map[string]time.Duration{}}
	for _, m := range milestones {
		t.seen[m] = map[string]time.Duration{}
	}
	return t
}

// Mark records milestone m of unit u at now, unless it was seen before.
func (t *Timeline) Mark(m, u string, now time.Time) {
	if t == nil {
		return
	}
	s := t.seen[m]
	if s == nil {
		return
	}
	if _, ok := s[u]; !ok {
		s[u] = now.Sub(t.start)
	}
}

// String is one line: each milestone's p50 / p90 / max over the units that reached it (seconds
// after the start), with how many did.
func (t *Timeline) String() string {
	if t == nil {
		return ""
	}
	var parts []string
	for _, m := range t.order {
		var d []time.Duration
		for _, v := range t.seen[m] {
			d = append(d, v)
		}
		if len(d) == 0 {
			parts = append(parts, m+" -")
			continue
		}
		slices.Sort(d)
		q := func(p float64) float64 { return d[min(len(d)-1, int(p*float64(len(d))))].Seconds() }
		parts = append(parts, fmt.Sprintf("%s p50 %.2f p90 %.2f max %.2f s (%d)", m, q(0.5), q(0.9), d[len(d)-1].Seconds(), len(d)))
	}
	return strings.Join(parts, "; ")
}
