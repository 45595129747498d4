package proxy

import (
	"net"
	"testing"
	"time"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

func TestReadDeadlineKeepsADeadlineAtLeastSevenEighthsAway(t *testing.T) {
	const timeout = time.Hour
	tests := []struct {
		name    string
		current time.Duration // from now; 0: no deadline set
		rearm   bool
	}{
		{"no deadline yet: armed", 0, true},
		{"a deadline set just now: kept", timeout, false},
		{"a deadline a little over 7/8 of the timeout away: kept", timeout - timeout/8 + time.Minute, false},
		{"a deadline under 7/8 of the timeout away: re-armed", timeout - timeout/8 - time.Minute, true},
		{"a deadline already passed: re-armed", -time.Minute, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &deadlineConn{}
			d := readDeadline{conn: c}
			if tc.current != 0 {
				d.at = time.Now().Add(tc.current)
			}
			before := d.at
			start := time.Now()
			d.arm(timeout)
			if !tc.rearm {
				if len(c.set) != 0 || !d.at.Equal(before) {
					t.Fatalf("deadline re-armed (%v), want %v kept", c.set, before)
				}
				return
			}
			if len(c.set) != 1 || !c.set[0].Equal(d.at) {
				t.Fatalf("set on the connection %v, recorded %v: want one deadline, the recorded one", c.set, d.at)
			}
			if d.at.Before(start.Add(timeout)) || d.at.After(time.Now().Add(timeout)) {
				t.Errorf("deadline %v, want a timeout from now (%v)", d.at, start.Add(timeout))
			}
		})
	}
}

func TestReadDeadlineClearTouchesTheConnectionOnlyWhenADeadlineIsSet(t *testing.T) {
	c := &deadlineConn{}
	d := readDeadline{conn: c}
	d.clear()
	if len(c.set) != 0 {
		t.Fatalf("clear with no deadline set the connection's deadline: %v", c.set)
	}
	d.set(time.Now().Add(time.Minute))
	d.clear()
	if len(c.set) != 2 || !c.set[1].IsZero() || !d.at.IsZero() {
		t.Fatalf("after set and clear: connection saw %v, recorded %v; want the deadline removed", c.set, d.at)
	}
}
