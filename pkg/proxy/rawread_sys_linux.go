//go:build linux && !386

package proxy

import "syscall"

// readFD and writeFD make recvfrom(2) and sendto(2) with MSG_NOSIGNAL, as nginx's recv and send
// (docs/proxy.md, "recv and send, not read and write").
const (
	sysRecv     = syscall.SYS_RECVFROM
	sysSend     = syscall.SYS_SENDTO
	msgNoSignal = syscall.MSG_NOSIGNAL
)
