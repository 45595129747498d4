//go:build !linux || 386

package proxy

import "syscall"

// Elsewhere (linux/386 has no recvfrom system call of its own; other systems have no
// MSG_NOSIGNAL), readFD and writeFD make read(2) and write(2), as before; their extra arguments
// are ignored. Go ignores a SIGPIPE raised by a write to a socket.
const (
	sysRecv     = syscall.SYS_READ
	sysSend     = syscall.SYS_WRITE
	msgNoSignal = 0
)
