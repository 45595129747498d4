package frontend

import (
	"context"
	"errors"
	"testing"

	"github.com/nogoo9/no-crd/pkg/spawner"
)

// TestSpawnerRefusalsKeepTheirStatus: each code the spawner refuses with reaches the caller as
// its front-end code (its HTTP status), and an untyped failure is an internal one. A spawn while
// the templates still load is Unavailable (503, retry), not Internal (500).
func TestSpawnerRefusalsKeepTheirStatus(t *testing.T) {
	for code, want := range map[spawner.Code]Code{
		spawner.NotFound: CodeNotFound, spawner.Invalid: CodeInvalid, spawner.Conflict: CodeConflict,
		spawner.QuotaExceeded: CodeQuotaExceeded, spawner.Forbidden: CodeForbidden, spawner.Unavailable: CodeUnavailable,
		"": CodeInternal,
	} {
		refusal := error(&spawner.Error{Code: code, Message: "refused"})
		if code == "" {
			refusal = errors.New("connection reset")
		}
		_, err := FromSpawner(func(context.Context, spawner.Request) (*spawner.Result, error) { return nil, refusal }).
			Spawn(context.Background(), SpawnRequest{Template: "python", ID: "a"})
		var fe *Error
		if !errors.As(err, &fe) || fe.Code != want {
			t.Errorf("spawner code %q: got %v, want front-end code %s", code, err, want)
		}
	}
}
