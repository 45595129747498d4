//go:build !linux || 386

package proxy

import (
	"errors"
	"syscall"
)

// Elsewhere there are no relay loops (epoll is Linux's): WebSockets are copied by copyRaw.
const relayLoopsBuilt = false

type relayPair struct{}

func newRelayPair(client, pod syscall.RawConn) (*relayPair, error) { return nil, errors.ErrUnsupported }
func (p *relayPair) run(c2p bool) (int64, error)                   { return 0, errors.ErrUnsupported }
func (p *relayPair) close()                                        {}
func shutdownRaw(raw syscall.RawConn)                              {}
