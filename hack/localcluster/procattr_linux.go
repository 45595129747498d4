package localcluster

import "syscall"

// procAttr puts the child in its own process group (so a stop reaches everything it forks and a
// terminal's Ctrl-C reaches only the caller, which then stops the cluster in order). Attached
// children also get SIGKILL when the caller dies, however it dies; detached ones get a session
// of their own and outlive it.
func procAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
