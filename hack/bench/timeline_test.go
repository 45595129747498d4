package bench

import (
	"testing"
	"time"
)

func TestTimelineKeepsTheFirstSightingAndSummarisesInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	tl := NewTimeline(start, "created", "Ready", "gone")
	for i, d := range []time.Duration{100, 300, 200, 400} {
		u := string(rune('a' + i))
		tl.Mark("created", u, start.Add(d*time.Millisecond))
		tl.Mark("created", u, start.Add(5*time.Second)) // seen again later: ignored
		tl.Mark("Ready", u, start.Add(time.Second+d*time.Millisecond))
	}
	tl.Mark("unknown", "a", start) // not a milestone of this timeline: ignored
	want := "created p50 0.30 p90 0.40 max 0.40 s (4); Ready p50 1.30 p90 1.40 max 1.40 s (4); gone -"
	if got := tl.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	var nilTimeline *Timeline
	nilTimeline.Mark("created", "a", start)
	if got := nilTimeline.String(); got != "" {
		t.Errorf("nil timeline String() = %q, want empty", got)
	}
}
