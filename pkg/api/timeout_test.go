package api

import (
	"strings"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// An events follow's timeout is what docs/api.md says: absent, 60s; else from 1s to 5m. A value
// outside is refused with a message that gives the same bounds the check applies (it said
// "between 1s and 5m0s" and took 500ms).
func TestFollowTimeoutAcceptsWhatItsMessageSays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration // 0: refused
	}{
		{"", time.Minute},
		{"1s", time.Second},
		{"90s", 90 * time.Second},
		{"5m", 5 * time.Minute},
		{"500ms", 0},
		{"999ms", 0},
		{"0s", 0},
		{"-1s", 0},
		{"5m1s", 0},
		{"1h", 0},
		{"90", 0},
		{strings.Repeat("9", 500_000) + "s", 0},
	} {
		t.Run(tc.in[:min(len(tc.in), 20)], func(t *testing.T) {
			got, err := followTimeout(tc.in)
			if tc.want != 0 {
				if err != nil || got != tc.want {
					t.Fatalf("followTimeout(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("followTimeout(%.40q) = %v, want refused", tc.in, got)
			}
			msg := err.Error()
			if frontend.CodeOf(err) != frontend.CodeInvalid || !strings.Contains(msg, "from 1s to 5m0s") || !strings.Contains(msg, "default, 1m0s") || len(msg) > 300 {
				t.Errorf("followTimeout(%.40q) = %q, want a short Invalid error giving the bounds and the default", tc.in, msg)
			}
		})
	}
}
