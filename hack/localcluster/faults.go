package localcluster

import (
	"context"
	"fmt"
)

// StopProcess stops the running etcd or kube-apiserver (SIGTERM, SIGKILL after
// Options.StopTimeout), for fault tests; StartProcess brings it back. Other components keep
// running and reconnect on their own.
func (c *Cluster) StopProcess(name string) error {
	p, err := c.current(name)
	if err != nil {
		return err
	}
	return p.stop(c.opts.StopTimeout)
}

// StartProcess starts etcd or kube-apiserver again with the arguments, data and certificates it
// had, and returns once it serves (/health, /readyz) or ctx ends.
func (c *Cluster) StartProcess(ctx context.Context, name string) error {
	if p, err := c.current(name); err == nil && !p.exited() {
		return fmt.Errorf("%s (pid %d) is still running: stop it first", name, p.pid())
	}
	l, o := c.layout, c.opts
	switch name {
	case Etcd:
		p, err := c.run(Etcd, etcdArgs(l, o.ExtraEtcdFlags))
		if err != nil {
			return err
		}
		return waitHTTP(ctx, p, l.etcdURL()+"/health", nil)
	case KubeAPIServer:
		p, err := c.run(KubeAPIServer, apiServerArgs(l, o.ExtraAPIServerFlags))
		if err != nil {
			return err
		}
		return waitHTTP(ctx, p, l.apiServerURL()+"/readyz", c.httpClient())
	}
	return fmt.Errorf("StartProcess: %q is not %s or %s", name, Etcd, KubeAPIServer)
}

// current is the newest process started under name.
func (c *Cluster) current(name string) (*process, error) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == name {
			return c.procs[i], nil
		}
	}
	return nil, fmt.Errorf("no %s in this cluster", name)
}
