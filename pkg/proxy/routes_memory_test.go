package proxy

import (
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/workspace"
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

// TestServedRoutesHoldNoMessage checks that a served workspace's routes hold only its phase (its
// reason and message, which name the pod, are read only to explain a 503), and that a workspace
// that is not served keeps both for that answer.
func TestServedRoutesHoldNoMessage(t *testing.T) {
	now := podcachetest.T0.Add(time.Hour)
	for _, ws := range podcachetest.Workspaces() {
		pods := ws.Pods
		key := wsKey{pods[0].Namespace, workspace.ID(pods[0])}
		full := workspace.Phase(workspace.NewestFirst(append([]*corev1.Pod(nil), pods...)), now)
		targets, _ := routesFor(key, pods, now)
		for _, tg := range targets {
			switch {
			case tg.status.Phase != full.Phase:
				t.Errorf("%s: route phase %s, workspace phase %s", ws.Name, tg.status.Phase, full.Phase)
			case full.Phase.Served() && (tg.status.Reason != "" || tg.status.Message != ""):
				t.Errorf("%s: served route holds %+v", ws.Name, tg.status)
			case !full.Phase.Served() && *tg.status != full:
				t.Errorf("%s: route status %+v, want %+v (its 503 explains it)", ws.Name, tg.status, full)
			}
		}
	}
}
