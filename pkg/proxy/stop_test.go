package proxy

import (
	"testing"
	"time"
)

// waitStopped waits at most waitBound for a proxy's Start to return (done carries its result,
// after its context was cancelled) and reports an error it returned, or that it did not return.
// It does not stop the test (t.Error): it also runs in cleanups.
func waitStopped(t testing.TB, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(waitBound):
		t.Errorf("the proxy did not stop within %v", waitBound)
	}
}
