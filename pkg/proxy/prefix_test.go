package proxy

import (
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"unsafe"
)

// normalizePrefixSlow is normalizePrefix as it was before it returned an already-clean
// annotation unchanged: every path cleaned and copied.
func normalizePrefixSlow(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#%\\ ") {
		return "", fmt.Errorf("bad")
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("root")
	}
	c += "/"
	if strings.HasPrefix(c, ReservedPrefix) {
		return "", fmt.Errorf("reserved")
	}
	return c, nil
}

// TestNormalizePrefixKeepsTheAnnotationsString checks that an annotation that already is a clean
// prefix becomes the route's prefix without a copy, and that every path (random segments, dots,
// doubled and missing slashes, the reserved space) gets the prefix, or the refusal, that cleaning
// gives.
func TestNormalizePrefixKeepsTheAnnotationsString(t *testing.T) {
	p := "/ws/jane/demo/"
	got, err := normalizePrefix(p)
	if err != nil || got != p || unsafe.StringData(got) != unsafe.StringData(p) {
		t.Errorf("normalizePrefix(%q) = %q, %v: want the annotation's own string", p, got, err)
	}
	segs := []string{"", ".", "..", "ws", "jane", "_nogoo9", "a.b", "x"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		if rng.IntN(10) > 0 {
			b.WriteString("/")
		}
		for j, n := 0, rng.IntN(5); j < n; j++ {
			if j > 0 {
				b.WriteString("/")
			}
			b.WriteString(segs[rng.IntN(len(segs))])
		}
		if rng.IntN(2) == 0 {
			b.WriteString("/")
		}
		in := b.String()
		got, err := normalizePrefix(in)
		want, werr := normalizePrefixSlow(in)
		if got != want || (err == nil) != (werr == nil) {
			t.Fatalf("normalizePrefix(%q) = %q, %v; cleaning gives %q, %v", in, got, err, want, werr)
		}
	}
}
