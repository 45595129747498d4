package spawner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/templates"
)

// TestASpawnWhileTemplatesLoadIsUnavailable: a spawn that comes before the template registry has
// loaded (a replica just started) and names a template it does not know yet is refused as
// Unavailable (503, retry), not as an internal failure (500): the template may well exist.
func TestASpawnWhileTemplatesLoadIsUnavailable(t *testing.T) {
	s := New(nil, nil, &templates.Registry{}, Options{Namespace: "ns", SyncTimeout: 10 * time.Millisecond})
	_, err := s.Spawn(context.Background(), Request{ID: "a", Template: "python", Caller: Caller{Subject: "jane"}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("spawn before the templates loaded: %v (code %q), want code Unavailable", err, CodeOf(err))
	}
}
