package main

import (
	"slices"
	"testing"
)

// TestRotatedOrder: each round starts one subject further along, every subject once per round.
func TestRotatedOrder(t *testing.T) {
	subjects := []rollout{{subject: "floor"}, {subject: "nogoo9"}, {subject: "before"}}
	want := [][]string{
		{"floor", "nogoo9", "before"},
		{"nogoo9", "before", "floor"},
		{"before", "floor", "nogoo9"},
		{"floor", "nogoo9", "before"},
	}
	for r := 1; r <= len(want); r++ {
		var got []string
		for _, s := range rotated(subjects, r) {
			got = append(got, s.subject)
		}
		if !slices.Equal(got, want[r-1]) {
			t.Errorf("round %d: order %q, want %q", r, got, want[r-1])
		}
	}
	if got := rotated(nil, 2); len(got) != 0 {
		t.Errorf("rotated(nil) = %v, want nothing", got)
	}
	if got := rotated(subjects[:1], 5); len(got) != 1 || got[0].subject != "floor" {
		t.Errorf("one subject: %v", got)
	}
}
