package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/connlimit"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/mcp"
)

// Options configure the front end.
type Options struct {
	// Addr is the listen address (--api-bind-address).
	Addr      string
	Namespace string
	// Namespaces are the watched namespaces (--namespaces); requests may address any of them.
	Namespaces []string
	// Access decides who may spawn outside Namespace (pkg/authz); nil: admins only.
	Access  frontend.SpawnAccess
	Version string
	// Auth verifies bearer tokens.
	Auth      auth.Authenticator
	Templates frontend.Templates
	Spawner   frontend.Spawner
	// PublicURL, when set (e.g. https://nogoo9.example.com), is the externally visible base URL:
	// it names the resources in the protected-resource metadata and its host is an allowed Host
	// of /mcp. Without it both are derived from each request's Host.
	PublicURL string
	// Issuer is the authorization server listed in the protected-resource metadata (the OIDC
	// issuer, or the API server's service-account issuer); empty lists none.
	Issuer string
	// AllowedHosts are extra Host names (host or host:port; "*" allows any) that /mcp accepts in
	// Host and Origin, besides loopback names, cluster-internal Service names and PublicURL's host.
	AllowedHosts []string
	// MaxFollowsPerUser caps one user's concurrent event follows (frontend.DefaultMaxFollowsPerUser when 0).
	MaxFollowsPerUser int
	// FollowHeartbeat is how long an event follow (REST's SSE stream, MCP's with a progress
	// token) waits without news before it writes a heartbeat (DefaultFollowHeartbeat when 0): the
	// write to a client that vanished fails, which ends the follow and frees its slot.
	FollowHeartbeat time.Duration
	// MaxMCPSessionsPerUser caps one user's open MCP sessions (mcp.DefaultMaxSessionsPerUser when 0).
	MaxMCPSessionsPerUser int
	// WriteTimeout bounds a spawn's and an upgrade intent's writes (frontend.DefaultWriteTimeout when 0).
	WriteTimeout time.Duration
	// Quota bounds stops and starts (the spawner's running and stopped limits); nil: none.
	Quota frontend.LifecycleQuota
	// UI, when set, builds the web UI over the front end's service; it is served at /.
	UI func(*frontend.Service) (http.Handler, error)
	// History reads kept template versions (rollback, list_templates); nil: none.
	History frontend.HistoryReader
	// MaxConnsPerClient caps the connections one client (pkg/connlimit) may hold open to the
	// listener: connlimit.DefaultMaxPerClient when 0, no cap when negative (behind an ingress that
	// limits clients itself, where every client has the ingress's address).
	MaxConnsPerClient int

	ui http.Handler
}

// NewHandler serves /api/v1/... (REST), /mcp (MCP Streamable HTTP) and the RFC 9728
// protected-resource metadata at /.well-known/oauth-protected-resource[/mcp]. REST and MCP
// accept only bearer tokens (never a cookie), refuse state-changing cross-origin browser
// requests (http.CrossOriginProtection), and answer every 401 with WWW-Authenticate naming the
// metadata; /mcp also checks Host and Origin against the allowed hosts (DNS rebinding). Every
// answer of REST and MCP is Cache-Control: no-store; the public metadata stays cacheable.
func NewHandler(svc *frontend.Service, authn auth.Authenticator, o Options) http.Handler {
	md := newMetadata(o.PublicURL, o.Issuer)
	hosts := newHostPolicy(o.PublicURL, o.AllowedHosts)
	mux := http.NewServeMux()
	// noStore outermost: refusals (401, 403) are not kept either.
	mux.Handle("/api/", noStore(crossOrigin(auth.Middleware(authn, md.url(""), newREST(svc, o.FollowHeartbeat)))))
	mux.Handle("/mcp", noStore(hosts.protect(crossOrigin(auth.Middleware(authn, md.url("/mcp"),
		mcp.NewHandler(svc, mcp.Options{Version: o.Version, ResourceMetadataURL: md.url("/mcp"), MaxSessionsPerUser: o.MaxMCPSessionsPerUser, FollowHeartbeat: o.FollowHeartbeat}))))))
	mux.Handle("/.well-known/oauth-protected-resource", md.handler(""))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", md.handler("/mcp"))
	if o.ui != nil {
		mux.Handle("/", o.ui)
	}
	return mux
}

// Setup registers the cache indexes the front end reads through and adds its HTTP server to mgr
// as a runnable that runs on every replica (no leader election).
func Setup(ctx context.Context, mgr manager.Manager, o Options) (http.Handler, error) {
	if o.Auth == nil || o.Templates == nil || o.Spawner == nil {
		return nil, errors.New("api: Auth, Templates and Spawner are required")
	}
	if err := frontend.AddIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	cs, err := corev1client.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("api: events client: %w", err)
	}
	pods, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("api: pod informer: %w", err)
	}
	svc, err := frontend.New(frontend.Config{
		Namespace: o.Namespace, Namespaces: o.Namespaces, Access: o.Access, Cache: mgr.GetCache(), Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: cs,
		Templates: o.Templates, Spawner: o.Spawner, Pods: pods, MaxFollowsPerUser: o.MaxFollowsPerUser,
		Quota:   o.Quota,
		History: o.History, WriteTimeout: o.WriteTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if o.UI != nil {
		if o.ui, err = o.UI(svc); err != nil {
			return nil, fmt.Errorf("api: ui: %w", err)
		}
	}
	h := NewHandler(svc, o.Auth, o)
	if o.Addr != "" && o.Addr != "0" {
		maxConns := o.MaxConnsPerClient
		if maxConns == 0 {
			maxConns = connlimit.DefaultMaxPerClient
		}
		if err := mgr.Add(&server{addr: o.Addr, handler: h, maxConns: maxConns}); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// server is the front end's listener; it runs on every replica.
type server struct {
	addr     string
	handler  http.Handler
	maxConns int // per client; 0 or less: no cap
	// ln, when set (tests), is listened on instead of addr.
	ln net.Listener
}

func (s *server) NeedLeaderElection() bool { return false }

func (s *server) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("api")
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: event streams stay open up to frontend.MaxFollow.
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctrl.LoggerInto(context.Background(), log) },
	}
	ln := s.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.addr); err != nil {
			return fmt.Errorf("api: listen on %s: %w", s.addr, err)
		}
	}
	ln = connlimit.NewListener(ln, s.maxConns)
	log.Info("serving REST and MCP", "address", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}
