package proxy

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// TestTargetFitsItsSizeClass keeps a route's target at 160 bytes, the size class it is allocated
// in (208 with its status by value and the router's newRP in each target, 232, in the 240-byte
// class, with its creation time as a time.Time and its flags apart).
func TestTargetFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(target{}); got > 160 {
		t.Errorf("target is %d bytes, want at most 160 (one per route)", got)
	}
}

// TestUnixNanosOrdersAsTimeDoes checks the order the older-workspace-wins rule reads, at the ends
// of int64's range too.
func TestUnixNanosOrdersAsTimeDoes(t *testing.T) {
	times := []time.Time{
		{}, time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, math.MinInt64), time.Unix(0, 0),
		time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 10, 0, 0, 1, time.UTC),
		time.Date(2026, 3, 1, 10, 0, 1, 0, time.FixedZone("x", 3600)), time.Unix(0, math.MaxInt64), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, a := range times {
		for _, b := range times {
			inRange := !a.Before(time.Unix(0, math.MinInt64)) && !a.After(time.Unix(0, math.MaxInt64)) &&
				!b.Before(time.Unix(0, math.MinInt64)) && !b.After(time.Unix(0, math.MaxInt64))
			if got := unixNanos(a) < unixNanos(b); got && !a.Before(b) || inRange && got != a.Before(b) {
				t.Errorf("unixNanos(%s) < unixNanos(%s) = %v, time says %v", a, b, got, a.Before(b))
			}
		}
	}
}
