//go:build !linux

package localcluster

import "syscall"

// procAttr: outside Linux there is no Pdeathsig; attached children are stopped by Cluster.Stop only.
func procAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true}
}
