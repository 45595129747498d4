package proxy

import (
	"net"
	"time"
)

// readDeadline is a connection's read deadline as its one reading goroutine last set it, so that
// a deadline still far enough away can be kept instead of re-armed: the lean server's idle
// deadline (leanConn) and the pod transport's header deadline (persistConn) both use it.
type readDeadline struct {
	conn net.Conn
	at   time.Time // zero: none
}

func (d *readDeadline) set(t time.Time) {
	d.at = t
	_ = d.conn.SetReadDeadline(t)
}

// clear removes the deadline if one is set.
func (d *readDeadline) clear() {
	if !d.at.IsZero() {
		d.set(time.Time{})
	}
}

// arm makes a read fail after timeout (> 0). Re-arming the timer on every request costs about
// as much as parsing the request or the answer, so a deadline set less than timeout/8 ago is
// kept: the read gets between 7/8 of timeout and timeout.
// It reads only the monotonic clock (clock.go; at.Sub(monoEpoch) reads none).
func (d *readDeadline) arm(timeout time.Duration) {
	now := monoNow()
	if d.at.IsZero() || d.at.Sub(monoEpoch)-now < timeout-timeout/8 {
		d.set(monoTime(now + timeout))
	}
}
