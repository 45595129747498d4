package spawner

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The owner's lock is held by a request waiting on a slow API server: another request of the same
// owner gives up when its context ends, with an error a front end answers 503 (it wraps
// context.DeadlineExceeded), leaves no entry behind, and another owner is not held up. Before,
// the lock was a mutex that ignored contexts: the waiter waited for as long as the holder held.
func TestOwnerLockWaitersGiveUpAtTheirDeadline(t *testing.T) {
	var o ownerLocks
	unlock, err := o.lock(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	const wait = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		u, err := o.lock(ctx, "alice")
		if err == nil {
			u()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errOwnerBusy) {
			t.Errorf("waiter's error %v, want one wrapping context.DeadlineExceeded and errOwnerBusy", err)
		}
		if took := time.Since(start); took > wait+2*time.Second {
			t.Errorf("waiter gave up after %s, want about its deadline (%s)", took, wait)
		}
	case <-time.After(wait + 5*time.Second):
		unlock()
		<-done
		t.Fatalf("a waiter with a %s deadline still waited after %s: the lock ignores contexts", wait, wait+5*time.Second)
	}
	// Another owner's lock is free.
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer bcancel()
	ub, err := o.lock(bctx, "bob")
	if err != nil {
		t.Fatalf("bob's lock while alice's is held: %v", err)
	}
	ub()
	if n := o.size(); n != 1 {
		t.Errorf("%d owner locks while alice's is held and the waiter gave up, want 1", n)
	}
	unlock()
	if n := o.size(); n != 0 {
		t.Errorf("%d owner locks left after every holder and waiter ended, want 0", n)
	}
	// Released, the lock is taken at once.
	u, err := o.lock(bctx, "alice")
	if err != nil {
		t.Fatalf("alice's lock after it was released: %v", err)
	}
	u()
}
