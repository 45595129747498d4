package mcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// followBound bounds a follow that should end sooner: one that does not fails its test with
// ended "timeout" instead of hanging.
const followBound = 10 * time.Second

// queue is an event source that hands out what is sent into it. An event already queued is
// handed out even when ctx is done too: a select with both ready picks either, and a follow's
// short heartbeat wait can run out while its goroutine is descheduled, which would send one
// heartbeat more than a test expects before the event it queued is seen.
type queue chan frontend.Event

func (q queue) Next(ctx context.Context) (frontend.Event, error) {
	select {
	case e := <-q:
		return e, nil
	default:
	}
	select {
	case <-ctx.Done():
		return frontend.Event{}, ctx.Err()
	case e := <-q:
		return e, nil
	}
}

// failing is an event source whose watch ended.
type failing struct{}

func (failing) Next(context.Context) (frontend.Event, error) {
	return frontend.Event{}, errors.New("event watch closed by the API server")
}

// TestFollowEndsWhenTheClientCannotBeTold: a follow's notifications failed silently, so a
// follow whose client went away ran to its timeout. Now the first notification that cannot be
// delivered (a past event's, a new event's, a heartbeat's) ends it; a follow whose client is
// told everything ends as before (until, timeout, the stream's end), and one without a
// progress token sends no heartbeat.
func TestFollowEndsWhenTheClientCannotBeTold(t *testing.T) {
	gone := errors.New("undelivered message: stream not connected or already closed")
	scheduled, succeeded := frontend.Event{Reason: "Scheduled"}, frontend.Event{Reason: "UpgradeSucceeded"}
	until := frontend.Until{"UpgradeSucceeded": true}
	tests := []struct {
		name string
		// follow is how long the follow may run: a follow that should have ended earlier fails
		// the test with ended "timeout".
		follow     time.Duration
		past       []frontend.Event
		src        func(q queue) eventSource
		eventFails func(e frontend.Event) bool
		// beatFails, when not nil, is whether heartbeat n (from 1) fails; nil: no progress token.
		beatFails  func(n int, q queue) bool
		wantEnded  string
		wantEvents int
		wantBeats  func(n int) bool
	}{
		{
			name: "a past event's notification fails", follow: followBound, past: []frontend.Event{scheduled, scheduled},
			eventFails: func(frontend.Event) bool { return true }, beatFails: func(int, queue) bool { return false },
			wantEnded: endedDisconnected, wantEvents: 2, wantBeats: func(n int) bool { return n == 0 },
		},
		{
			name: "a new event's notification fails", follow: followBound,
			src:        func(q queue) eventSource { q <- scheduled; return q },
			eventFails: func(frontend.Event) bool { return true },
			wantEnded:  endedDisconnected, wantEvents: 1, wantBeats: func(n int) bool { return n == 0 },
		},
		{
			name: "a heartbeat fails after a quiet spell", follow: followBound, past: []frontend.Event{scheduled},
			eventFails: func(frontend.Event) bool { return false }, beatFails: func(n int, _ queue) bool { return n == 3 },
			wantEnded: endedDisconnected, wantEvents: 1, wantBeats: func(n int) bool { return n == 3 },
		},
		{
			name: "delivered heartbeats keep the follow open until an event in until", follow: followBound,
			eventFails: func(frontend.Event) bool { return false },
			beatFails: func(n int, q queue) bool {
				if n == 2 {
					q <- succeeded
				}
				return false
			},
			wantEnded: frontend.EndedUntil, wantEvents: 1, wantBeats: func(n int) bool { return n == 2 },
		},
		{
			name: "without a progress token no heartbeat is sent and the follow ends at its timeout", follow: 50 * time.Millisecond, past: []frontend.Event{scheduled},
			eventFails: func(frontend.Event) bool { return false },
			wantEnded:  "timeout", wantEvents: 1, wantBeats: func(n int) bool { return n == 0 },
		},
		{
			name: "the stream's end ends the follow", follow: followBound,
			src:        func(queue) eventSource { return failing{} },
			eventFails: func(frontend.Event) bool { return false }, beatFails: func(int, queue) bool { return false },
			wantEnded: "event watch closed by the API server", wantEvents: 0, wantBeats: func(n int) bool { return n == 0 },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.follow)
			defer cancel()
			q := make(queue, 1)
			var src eventSource = q
			if tc.src != nil {
				src = tc.src(q)
			}
			beats := 0
			n := followNotices{beatEvery: time.Millisecond, event: func(_ context.Context, e frontend.Event) error {
				if tc.eventFails(e) {
					return gone
				}
				return nil
			}}
			if tc.beatFails != nil {
				n.beat = func(context.Context) error {
					beats++
					if tc.beatFails(beats, q) {
						return gone
					}
					return nil
				}
			}
			events, ended := follow(ctx, src, until, append([]frontend.Event{}, tc.past...), n)
			if ended != tc.wantEnded || len(events) != tc.wantEvents || !tc.wantBeats(beats) {
				t.Errorf("the follow ended %q with %d events after %d heartbeats; want %q with %d events", ended, len(events), beats, tc.wantEnded, tc.wantEvents)
			}
		})
	}
}
