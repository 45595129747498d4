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

// TestUpgradeNodePods: the node holds every pod figures 1 and 2 set up, the earlier binary's
// workspaces included, and a side-by-side rollout's second pods.
func TestUpgradeNodePods(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    config
		want int
	}{
		// 2 + 4 sets of 1,000, 2 sets of workspaces, 1,000 surging, 1,000 spare.
		{"N=1000, one binary", config{n: 1000, scale: 2000, other: 5000}, 10000},
		// The earlier binary's 2,000 workspaces on top: the twelfth round's stalled set-up had 10,000.
		{"N=1000, earlier binary too", config{n: 1000, scale: 2000, other: 5000, before: "/tmp/nogoo9-old"}, 12000},
		// At N=100 the old room (figures 4-5's sizes) stays: the same cluster as earlier rounds.
		{"N=100, earlier binary too", config{n: 100, scale: 2000, other: 5000, before: "/tmp/nogoo9-old"}, 8200},
	} {
		if got := upgradeNodePods(tt.c); got != tt.want {
			t.Errorf("%s: %d pods, want %d", tt.name, got, tt.want)
		}
	}
}
