package podcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/podcache"
)

type syncedCache bool

func (s syncedCache) WaitForCacheSync(ctx context.Context) bool {
	if !s {
		<-ctx.Done()
	}
	return bool(s)
}

// TestReleaseAfterSyncEnds checks that the runnable ends on its own once the cache has synced
// and the process is quiet (a manager runnable must not hang), and when the cache never syncs
// but the manager stops.
func TestReleaseAfterSyncEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		synced bool
	}{{"synced and quiet", true}, {"never synced, manager stopping", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- podcache.ReleaseAfterSync{Cache: syncedCache(tc.synced), Poll: time.Millisecond, Quiet: 1 << 40, Max: 20 * time.Second}.Start(ctx)
			}()
			if !tc.synced {
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(25 * time.Second):
				t.Fatal("ReleaseAfterSync did not end")
			}
		})
	}
}
