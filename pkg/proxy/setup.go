package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/nogoo9/no-crd/pkg/connlimit"
	"github.com/nogoo9/no-crd/pkg/podcache"
)

// Setup adds the proxy to mgr: an event handler on the manager's (workspace-only) Pod informer
// keeps the route table current, and a Runnable serves on opts.BindAddress on every replica (no
// leader election).
func Setup(mgr ctrl.Manager, authn Authenticator, opts Options) error {
	p, err := New(authn, opts)
	if err != nil {
		return err
	}
	inf, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("proxy: get the pod informer: %w", err)
	}
	reg, err := inf.AddEventHandler(p.EventHandler())
	if err != nil {
		return fmt.Errorf("proxy: watch pods: %w", err)
	}
	p.synced = reg.HasSyncedChecker()
	// The replica is not ready before its proxy listens: the start-up gate opens once the read
	// path's handlers (this one included) have the initial list, which is when Start begins to
	// bind, so without this check /readyz could pass a moment before the port is open.
	if err := mgr.AddReadyzCheck("proxy", p.listeningCheck); err != nil {
		return fmt.Errorf("proxy: readiness check: %w", err)
	}
	return mgr.Add(p)
}

// listeningCheck is a readiness check: nil once the proxy's listener is bound.
func (p *Proxy) listeningCheck(*http.Request) error {
	select {
	case <-p.listening:
		return nil
	default:
		return errors.New("the proxy is not listening yet")
	}
}

// EventHandler feeds pod events into the route table. An update hands the router the pod's old
// version too: a pod relabelled out of its workspace (its nogoo9/workspace-id label changed or
// removed, its nogoo9/type label removed) is taken out of the workspace it was filed under, not
// left routed there until the proxy restarts.
func (p *Proxy) EventHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    p.PodChanged,
		UpdateFunc: p.podUpdated,
		DeleteFunc: p.PodDeleted,
	}
}

// podUpdated is PodChanged of an informer's update, from the pod's old version (old) to obj.
func (p *Proxy) podUpdated(old, obj any) {
	c := podcache.Of(obj)
	if c == nil {
		return
	}
	p.router.update(old, c)
	p.activity.observe(c)
}

// NeedLeaderElection is false: every replica serves the proxy.
func (p *Proxy) NeedLeaderElection() bool { return false }

var _ manager.LeaderElectionRunnable = (*Proxy)(nil)

// Timeouts of the proxy's own server: a client that holds a connection without sending a
// request, or keeps one idle, loses it.
const (
	ServerReadHeaderTimeout = 10 * time.Second
	ServerIdleTimeout       = 2 * time.Minute
)

// Start serves until ctx ends, after the pod informer has synced.
func (p *Proxy) Start(ctx context.Context) error {
	if p.synced != nil {
		select {
		case <-p.synced.Done():
		case <-ctx.Done():
			return nil // stopped before the cache synced
		}
	}
	ln := p.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", p.opts.BindAddress); err != nil {
			return fmt.Errorf("proxy: listen on %s: %w", p.opts.BindAddress, err)
		}
	}
	p.listeningOnce.Do(func() { close(p.listening) })
	if p.opts.MaxConnsPerClient > 0 {
		ln = connlimit.NewListener(ln, p.opts.MaxConnsPerClient)
	}
	srv := &http.Server{
		Handler: p,
		// A client must send its request headers within ReadHeaderTimeout and may keep an idle
		// connection for IdleTimeout; no write timeout: terminals and event streams stay open for
		// hours.
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          p.errorLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	p.log.Info("proxy listening", "address", ln.Addr().String())
	// Requests are served by the lean loop (server.go), which hands the connections it does not
	// serve itself to srv; with StandardServer, srv serves them all.
	var lean *leanServer
	errc := make(chan error, 2)
	if p.opts.StandardServer {
		go func() { errc <- srv.Serve(ln) }()
	} else {
		lean = newLeanServer(p, srv, ln.Addr())
		if p.watchAfter > 0 {
			lean.watchAfter = p.watchAfter
		}
		p.lean.Store(lean)
		go func() { errc <- lean.serve(ctx, ln) }()
		go func() {
			if err := srv.Serve(lean.handoff); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	go p.activity.run(ctx)
	select {
	case err := <-errc:
		if lean != nil {
			_ = ln.Close()
			_ = srv.Close()
		}
		return fmt.Errorf("proxy: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lean != nil {
		lean.shutdown.Store(true)
		_ = ln.Close()
		_ = lean.close(shutdownCtx)
	}
	err := srv.Shutdown(shutdownCtx)
	p.conns.closeAll()
	p.transport.CloseIdleConnections()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("proxy: shut down: %w", err)
	}
	return nil
}
