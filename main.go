// Command nogoo9 runs the nogoo9 workspace controller, its REST/MCP front end and its proxy.
//
// main only wires: flags, logger, manager and cache, component setup, probes, signals.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"
	// CA roots compiled in: the image is built from scratch and has no /etc/ssl (hack/image).
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/controllers"
	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/authz"
	"github.com/nogoo9/no-crd/pkg/connlimit"
	"github.com/nogoo9/no-crd/pkg/envvar"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/health"
	"github.com/nogoo9/no-crd/pkg/lazylog"
	"github.com/nogoo9/no-crd/pkg/mcp"
	"github.com/nogoo9/no-crd/pkg/namespaces"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/proxy"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/ui"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// version is stamped by `make build` through -ldflags.
var version = "dev"

// processStarted is when the process's packages were initialised (a few ms after exec): the
// start-up's log lines count from it (bench/history.md, "Tenth round: cold start").
var processStarted = time.Now()

type options struct {
	namespace         string
	metricsAddr       string
	probeAddr         string
	pprofAddr         string
	leaderElect       bool
	leaderElectionID  string
	leaseDuration     time.Duration
	renewDeadline     time.Duration
	qps               float64
	burst             int
	components        string
	templateDir       string
	nsTemplates       bool
	maxPerUser        int
	maxClaimsPerUser  int
	integrityKeyFile  string
	upgradeTimeout    time.Duration
	maxConcurrentUpgr int
	maxPendingUpgr    int
	upgradeWorkers    int
	controllersDelay  time.Duration
	apiAddr           string
	proxyAddr         string
	proxyOrigins      string
	workspaceDomain   string
	proxyGrace        time.Duration
	insecureCookie    bool
	proxyLimits       proxyLimits
	publicURL         string
	mcpAllowedHosts   string
	maxFollows        int
	maxMCPSessions    int
	apiWriteTimeout   time.Duration
	// apiMaxConnsPerClient is --api-max-conns-per-client.
	apiMaxConnsPerClient int
	auth                 auth.Options
	templatePolicy       templates.PolicyFlags
	ui                   uiOptions
	lifecycle            lifecycleOptions
	namespaces           string
	updates              updateOptions
}

// lifecycleOptions are the flags of stop, start and idle culling (docs/lifecycle.md).
type lifecycleOptions struct {
	idleTimeout      time.Duration
	activityInterval time.Duration
	maxStopped       int
}

// updateOptions are the flags of the update policies and the template history.
type updateOptions struct {
	interval     time.Duration
	perInterval  int
	idleAfter    time.Duration
	historyLimit int
	retryAfter   time.Duration
}

// proxyLimits are the proxy's bounds on what a workspace pod and a client may make it hold.
type proxyLimits struct {
	headerTimeout     time.Duration
	bodyTimeout       time.Duration
	maxHeaderBytes    int64
	max1xx            int
	maxSetCookies     int
	maxConnsPerClient int
}

// uiOptions are the web UI's flags (pkg/ui).
type uiOptions struct {
	enabled, devLogin, insecureCookie bool
	proxyURL, oidcRedirectURL         string
	oidcSecretFile, oidcScopes        string
	maxListStreams                    int
}

func main() {
	var o options
	flag.StringVar(&o.namespace, "namespace", envvar.String("POD_NAMESPACE", "default"), "Namespace whose workspace pods and template ConfigMaps nogoo9 manages.")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint (0 disables it).")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of the Go pprof endpoints (/debug/pprof); empty disables them.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that only one replica runs the controllers; the API and proxy run on every replica.")
	flag.StringVar(&o.leaderElectionID, "leader-election-id", "nogoo9-controller", "Name of the leader-election Lease.")
	flag.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a standby waits before taking over a lease its leader stopped renewing (e.g. after kill -9).")
	flag.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its lease (e.g. while the API server is down) before it stops: nogoo9 then exits so that it never acts without the lease. Must be shorter than the lease duration; raise both to ride out longer API server outages (docs/reliability.md).")
	flag.Float64Var(&o.qps, "kube-api-qps", 500, "Client-side rate limit on API requests per second; bulk upgrades are bounded by it.")
	flag.IntVar(&o.burst, "kube-api-burst", 1000, "Client-side burst of API requests.")
	flag.StringVar(&o.components, "components", "controller,api,proxy", "Comma-separated components to run: controller, api, proxy.")
	flag.StringVar(&o.templateDir, "template-dir", "", "Directory of local YAML templates (same shape as template ConfigMaps); empty for none.")
	flag.BoolVar(&o.nsTemplates, "namespace-templates", true, "Read template ConfigMaps of the watched namespaces too: a spawn there uses its namespace's template of that name before nogoo9's. False: templates come from nogoo9's namespace only.")
	flag.IntVar(&o.maxPerUser, "max-workspaces-per-user", envvar.OrExit(envvar.Int("MAX_WORKSPACES_PER_USER", 0)), "Workspaces a non-admin user may own (0 = unlimited).")
	flag.IntVar(&o.maxClaimsPerUser, "max-claims-per-user", 20, "Persistent volume claims a non-admin user may own, including those left by deleted workspaces (0 = unlimited).")
	flag.StringVar(&o.integrityKeyFile, "integrity-key-file", "", "File of base64 keys (one per line, the first signs) that authenticate nogoo9's upgrade records; empty: a random key per process (docs/upgrades.md, \"Trust\").")
	flag.DurationVar(&o.upgradeTimeout, "upgrade-timeout", 10*time.Minute, "How long an upgraded pod may take to become Ready before the upgrade fails.")
	flag.IntVar(&o.maxPendingUpgr, "max-pending-upgrades", 500, "Upgrades whose new pod waits for a node (created, not on a node yet; a Recreate's pod behind nogoo9's gate counts: its workspace is down until it is placed): while that many wait, more requests wait until the scheduler places one or an upgrade ends, so a cluster without room gets at most this many Pending pods. Large enough to keep the scheduler busy while nogoo9 hears of its bindings (0 = no limit).")
	flag.IntVar(&o.maxConcurrentUpgr, "max-concurrent-upgrades", 0, "Upgrades in flight at once, placed or not, to bound image pulls or total churn; more requests wait until one finishes (0 = no cap: --max-pending-upgrades paces bulk upgrades by room in the cluster).")
	flag.IntVar(&o.upgradeWorkers, "upgrade-workers", 128, "Workspace reconcile workers: each waits on two to four API round trips per pass, so a bulk upgrade needs many in flight.")
	flag.DurationVar(&o.controllersDelay, "controllers-start-delay", 500*time.Millisecond, "How long after the replica turns ready its controllers start their first pass over every workspace, so that the first requests after a start are served first (docs/reliability.md); upgrades in flight, workspace starts and stops, update policies and idle culling resume that much later. 0: as soon as it is ready.")
	flag.StringVar(&o.apiAddr, "api-bind-address", ":8090", "Address of the REST API (/api/v1) and MCP endpoint (/mcp).")
	flag.StringVar(&o.proxyAddr, "proxy-bind-address", ":8091", "Address of the workspace proxy.")
	flag.StringVar(&o.proxyOrigins, "proxy-allowed-origins", "", "Comma-separated extra origins (scheme://host[:port]) allowed to open WebSockets through the proxy; its own origin is always allowed.")
	flag.StringVar(&o.workspaceDomain, "proxy-workspace-domain", "", "Serve each workspace on its own host name, <id>-<hash>.<domain> (scheme://host[:port], e.g. https://ws.example.com; needs a wildcard DNS name and certificate for *.<host>): workspace pages become origins of their own and the proxy's login moves to the domain itself. Empty: every workspace under one origin, by path.")
	flag.DurationVar(&o.proxyGrace, "proxy-not-ready-grace", proxy.DefaultNotReadyGrace, "How long a pod may stay not-ready before the proxy closes the WebSockets opened on it.")
	flag.BoolVar(&o.insecureCookie, "insecure-cookie", false, "Drop the Secure attribute and the __Host- prefix of the proxy's login cookie (plain-HTTP development on loopback only).")
	flag.DurationVar(&o.proxyLimits.headerTimeout, "proxy-response-header-timeout", proxy.DefaultResponseHeaderTimeout, "How long the proxy waits for a workspace pod's response headers before answering 502 (negative: as long as the client waits).")
	flag.DurationVar(&o.proxyLimits.bodyTimeout, "proxy-request-body-timeout", proxy.DefaultRequestBodyTimeout, "How long the proxy waits for more of a client's request body before answering 408 and closing the connection (negative: as long as the client takes).")
	flag.Int64Var(&o.proxyLimits.maxHeaderBytes, "proxy-max-response-header-bytes", proxy.DefaultMaxResponseHeaderBytes, "Bytes a workspace pod may send before its response headers end (informational answers included); more gets the client a 502.")
	flag.IntVar(&o.proxyLimits.max1xx, "proxy-max-1xx-responses", proxy.DefaultMax1xxResponses, "Informational (1xx) answers a workspace pod may send before the final one; more gets the client a 502.")
	flag.IntVar(&o.proxyLimits.maxSetCookies, "proxy-max-set-cookies", proxy.DefaultMaxSetCookies, "Set-Cookie headers one answer of a workspace pod may carry; more gets the client a 502.")
	flag.IntVar(&o.proxyLimits.maxConnsPerClient, "proxy-max-conns-per-client", proxy.DefaultMaxConnsPerClient, "Connections one client IP may hold open to the proxy; more get a 429 (negative: no cap, e.g. behind an ingress that limits clients itself).")
	flag.StringVar(&o.publicURL, "public-url", "", "Externally visible base URL of the API (e.g. https://nogoo9.example.com); names the resources in /.well-known/oauth-protected-resource (default: derived from each request's Host) and is an allowed Host of /mcp.")
	flag.StringVar(&o.mcpAllowedHosts, "mcp-allowed-hosts", "", "Comma-separated extra Host names (host, or host:port; * allows any) that /mcp accepts in Host and Origin; loopback names, *.svc, *.svc.cluster.local and the --public-url host always are.")
	flag.IntVar(&o.maxMCPSessions, "mcp-max-sessions-per-user", mcp.DefaultMaxSessionsPerUser, "MCP sessions one user may hold open; opening one more closes that user's least recently used session.")
	flag.IntVar(&o.maxFollows, "max-event-follows-per-user", frontend.DefaultMaxFollowsPerUser, "Event streams (events?follow=true, get_workspace_events with follow) one user may have open at once; more are answered 429.")
	flag.IntVar(&o.apiMaxConnsPerClient, "api-max-conns-per-client", connlimit.DefaultMaxPerClient, "Connections one client IP (an IPv6 client: its /64) may hold open to the REST/MCP/UI listener; more get a 429 (negative: no cap, e.g. behind an ingress that limits clients itself).")
	flag.DurationVar(&o.apiWriteTimeout, "api-write-timeout", frontend.DefaultWriteTimeout, "How long a spawn, an upgrade, a rollback, a stop or a start waits for the API server to record it (and for another of the same owner's in this replica); after that it is answered 503 Unavailable (GET shows whether it took effect).")
	o.auth.BindFlags(flag.CommandLine)
	o.templatePolicy.BindFlags(flag.CommandLine)
	flag.BoolVar(&o.ui.enabled, "ui", true, "Serve the web UI at / on the API listener.")
	flag.BoolVar(&o.ui.devLogin, "ui-dev-login", true, "Offer the UI's development login, which takes a bearer token (verified like an API call) and starts a session.")
	flag.BoolVar(&o.ui.insecureCookie, "ui-insecure-cookie", false, "Drop the Secure attribute (and the __Host- prefix) of the UI's session cookie: plain-HTTP development only.")
	flag.StringVar(&o.ui.proxyURL, "ui-proxy-url", "", "Public base URL of the workspace proxy for the UI's Open and Preview links (empty: the UI's host with the --proxy-bind-address port).")
	flag.StringVar(&o.ui.oidcRedirectURL, "ui-oidc-redirect-url", "", "With --auth=oidc: the UI's /login/callback URL as registered with the provider; turns on single sign-on (authorization code + PKCE).")
	flag.StringVar(&o.ui.oidcSecretFile, "ui-oidc-client-secret-file", "", "File holding the OIDC client secret for the UI's login (empty: a public client, PKCE only).")
	flag.StringVar(&o.ui.oidcScopes, "ui-oidc-scopes", "profile,email", "Comma-separated scopes the UI's login requests besides openid (e.g. add groups).")
	flag.IntVar(&o.ui.maxListStreams, "ui-max-list-streams", ui.DefaultMaxListStreams, "Live workspace lists (one per open tab of the UI's list) one user may have open at once; more are answered 429.")
	flag.DurationVar(&o.updates.interval, "update-policy-interval", time.Minute, "How often the update policies (when-idle, window) of every workspace are evaluated.")
	flag.IntVar(&o.updates.perInterval, "auto-upgrades-per-interval", 10, "Automatic (policy) upgrades requested at most per --update-policy-interval; they also wait for --max-pending-upgrades and --max-concurrent-upgrades.")
	flag.DurationVar(&o.updates.idleAfter, "idle-after", 30*time.Minute, "How long a workspace must have had no activity before the when-idle policy upgrades it.")
	flag.DurationVar(&o.updates.retryAfter, "auto-upgrade-retry-after", time.Hour, "How long after a failed upgrade an update policy may try the workspace's upgrade again.")
	flag.IntVar(&o.updates.historyLimit, "template-history-limit", templates.DefaultHistoryLimit, "Versions of each template kept (current included) for rollbacks, as ConfigMaps nogoo9-history-*.")
	flag.StringVar(&o.namespaces, "namespaces", "", "More namespaces whose workspaces the proxy routes and the controllers manage, besides --namespace: names separated by commas, or a label selector such as nogoo9/enabled=true (resolved at start). Empty: --namespace only.")
	zapOpts := zap.Options{Development: false, TimeEncoder: zapcore.ISO8601TimeEncoder}
	flag.DurationVar(&o.lifecycle.idleTimeout, "idle-timeout", 0, "Stop a workspace after this long without activity through the proxy, unless its template sets nogoo9/idle-timeout (0, the default: never).")
	flag.DurationVar(&o.lifecycle.activityInterval, "activity-write-interval", proxy.DefaultActivityInterval, "Least time between two writes of nogoo9/last-activity for one workspace, across proxy replicas.")
	flag.IntVar(&o.lifecycle.maxStopped, "max-stopped-workspaces-per-user", 0, "Stopped workspaces a non-admin user may keep; a stop beyond it is refused (0 = unlimited). Stopped workspaces do not count against --max-workspaces-per-user.")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	// Lazy values: every reconcile's logger gets its request's values, encoded only if it logs
	// (pkg/lazylog; at start the first pass over every workspace made tens of MB of them).
	ctrl.SetLogger(lazylog.New(zap.New(zap.UseFlagOptions(&zapOpts))))
	log := ctrl.Log.WithName("setup")

	if err := run(o); err != nil {
		if errors.Is(err, namespaces.ErrChanged) {
			// Not a failure: the Deployment starts nogoo9 again over the new set of namespaces.
			log.Info("nogoo9 stopped to watch a new set of namespaces", "reason", err.Error())
			os.Exit(3)
		}
		log.Error(err, "nogoo9 stopped")
		os.Exit(1)
	}
}

func run(o options) error {
	log := ctrl.Log.WithName("setup")
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	components, err := parseComponents(o.components)
	if err != nil {
		return err
	}
	if o.ui.enabled {
		if err := ui.CheckProxyURL(o.publicURL, o.ui.proxyURL); err != nil {
			return err
		}
	}
	// --proxy-workspace-domain: parsed once, for the proxy's routing and the UI's links.
	var origins *workspace.Origins
	if o.workspaceDomain != "" {
		if origins, err = workspace.ParseOrigins(o.workspaceDomain); err != nil {
			return err // proxy.Options checks that plain http comes with --insecure-cookie
		}
	}
	if o.controllersDelay < 0 {
		return fmt.Errorf("--controllers-start-delay=%s is negative: give how long after ready the controllers start, e.g. 500ms, or 0 to start them at once", o.controllersDelay)
	}
	policy, err := o.templatePolicy.Policy()
	if err != nil {
		return err
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "nogoo9/" + version
	if _, err := controllers.UncompressedResponses(cfg); err != nil {
		log.Info("answers stay compressed", "reason", err.Error())
	}

	// Events: a per-object, per-reason budget, written as protobuf (controllers.NewEventBroadcaster);
	// flushed on exit.
	events, err := controllers.NewEventBroadcaster(cfg)
	if err != nil {
		return err
	}
	defer events.Shutdown()

	// --namespaces: the namespaces whose workspaces the cache, the proxy and the controllers see;
	// always including --namespace (templates, quota ledgers, the Lease, and the API's spawns).
	watched, err := watchedNamespaces(cfg, scheme, o)
	if err != nil {
		return err
	}
	warnUnsafeNamespaces(cfg, scheme, o, watched)

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		EventBroadcaster:        events, //nolint:staticcheck // the only way to set the correlator; it lives as long as the process
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect && components["controller"],
		LeaderElectionID:        o.leaderElectionID,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		LeaderElectionNamespace: o.namespace,
		// Leaving the lease on shutdown lets a standby take over at once instead of after the
		// lease duration.
		LeaderElectionReleaseOnCancel: true,
		// Only workspace pods and template ConfigMaps are cached, stripped of what nogoo9 never
		// reads: a cluster's other pods cost nothing.
		Cache: podcache.OptionsFor(watched),
		// The pod informer stores compact pods (podcache.Pod); the manager's cache, and so its
		// client, serves Pod Get and List from them as *corev1.Pod.
		NewCache: podcache.NewCache,
		// Every cache List asks whether its kind is namespaced: built-in kinds are answered from
		// memory (podcache.BuiltinMemo; the largest part of the start-up's garbage otherwise).
		MapperProvider: podcache.MapperProvider,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	// A selector's namespaces labelled after start: exit, so that the restart watches them.
	if err := addNamespaceWatcher(mgr, cfg, scheme, o, watched); err != nil {
		return err
	}

	// Component wiring: each package exposes a Setup that adds its runnables to the manager.
	// (wired by the component issues)

	// The start-up serves reads first (bench/history.md, "Fifth round"): the read path's
	// components (templates, front end, UI, proxy) register their handlers through readers; the
	// controllers, set up through held, start once those handlers have the initial lists, and
	// /readyz waits for that too.
	gate := podcache.NewStartupGate(mgr.GetCache())
	gate.Started = processStarted
	gate.AfterReady = o.controllersDelay
	readers, held := gate.Readers(mgr), gate.Hold(mgr)
	if err := mgr.Add(gate); err != nil {
		return err
	}

	// Templates and spawner (issue 3): every component reads templates; the api spawns.
	registry, err := templates.Setup(readers, templates.Options{Namespace: o.namespace, NamespaceTemplates: o.nsTemplates, TemplateDir: o.templateDir, Policy: &policy})
	if err != nil {
		return fmt.Errorf("set up templates: %w", err)
	}
	history := &templates.History{Reader: mgr.GetAPIReader(), Namespace: o.namespace, Policy: policy, NoTeamTemplates: !o.nsTemplates}
	var spawn *spawner.Spawner
	if components["api"] {
		seen, err := podcache.WatchSeen(context.Background(), mgr.GetCache())
		if err != nil {
			return err
		}
		spawn = spawner.New(mgr.GetClient(), mgr.GetAPIReader(), registry, spawner.Options{Namespace: o.namespace, Namespaces: watched, MaxPerUser: o.maxPerUser, MaxClaimsPerUser: o.maxClaimsPerUser, MaxStoppedPerUser: o.lifecycle.maxStopped, Seen: seen})
	}

	// Authentication (issue 5): the api and the proxy verify the same tokens.
	ctx := ctrl.SetupSignalHandler()
	var authn auth.Authenticator
	if components["api"] || components["proxy"] {
		if authn, err = o.auth.New(ctx, mgr.GetClient()); err != nil {
			return fmt.Errorf("set up authentication: %w", err)
		}
		authn = &firstVerification{Authenticator: authn}
	}

	// REST API and MCP (issue 5): served on every replica, no leader election.
	if components["api"] {
		issuer, err := o.auth.Issuer(ctx, cfg)
		if err != nil {
			log.Info("no authorization server to announce in /.well-known/oauth-protected-resource; set --authorization-server", "reason", err.Error())
		}
		if _, err := api.Setup(ctx, readers, api.Options{
			Addr: o.apiAddr, Namespace: o.namespace, Version: version, Auth: authn,
			Namespaces: watched, Access: &authz.SpawnAccess{Client: mgr.GetClient()},
			Templates: frontend.FromRegistry(registry.Shared()), Spawner: frontend.FromSpawner(spawn.Spawn),
			PublicURL: o.publicURL, Issuer: issuer, AllowedHosts: splitList(o.mcpAllowedHosts),
			MaxFollowsPerUser: o.maxFollows, MaxMCPSessionsPerUser: o.maxMCPSessions,
			WriteTimeout:      o.apiWriteTimeout,
			MaxConnsPerClient: o.apiMaxConnsPerClient,
			Quota:             spawn,
			History:           history,
			UI:                uiSetup(ctx, readers, o, authn, registry, components["proxy"], origins),
		}); err != nil {
			return fmt.Errorf("set up api: %w", err)
		}
	}

	// Workspace proxy (issue 6): routes from the pod informer; served on every replica.
	if components["proxy"] {
		if err := proxy.Setup(readers, authn, proxy.Options{
			BindAddress:    o.proxyAddr,
			AllowedOrigins: proxy.ParseOrigins(o.proxyOrigins),
			NotReadyGrace:  o.proxyGrace,
			InsecureCookie: o.insecureCookie,
			Origins:        origins,

			ResponseHeaderTimeout:  o.proxyLimits.headerTimeout,
			RequestBodyTimeout:     o.proxyLimits.bodyTimeout,
			MaxResponseHeaderBytes: o.proxyLimits.maxHeaderBytes,
			Max1xxResponses:        o.proxyLimits.max1xx,
			MaxSetCookies:          o.proxyLimits.maxSetCookies,
			MaxConnsPerClient:      o.proxyLimits.maxConnsPerClient,

			Activity: proxy.ActivityOptions{
				Writer: mgr.GetClient(), Interval: o.lifecycle.activityInterval,
				TemplateAnnotations: func(name string) map[string]string {
					if t, ok := registry.Shared().Get(name); ok && t != nil {
						return t.Annotations
					}
					return nil
				},
			},
			UIURL: o.publicURL,
		}); err != nil {
			return fmt.Errorf("set up proxy: %w", err)
		}
	}

	// Phase controller (issue 7): phase Events and the nogoo9_workspaces gauge; leader only.
	if components["controller"] {
		if err := controllers.SetupPhaseReconciler(held); err != nil {
			return fmt.Errorf("set up phase controller: %w", err)
		}
	}

	// Upgrade controller (issue 4): the template-upgrade state machine; leader only.
	if components["controller"] {
		keys, err := controllers.LoadKeys(o.integrityKeyFile)
		if err != nil {
			return err
		}
		// Every cached workspace pod, for the readers of all of them at once (the /metrics
		// collector, the upgrade gate's first count, the update policies' ticks): one handler
		// and one map for the three.
		pods, err := podcache.NewEvery(ctx, mgr.GetCache())
		if err != nil {
			return err
		}
		if keys == nil {
			log.Info("No --integrity-key-file: upgrade records are signed with a random key, so a Recreate upgrade in flight across a restart fails while its old pod holds the volume, or cannot be rolled back automatically once the old pod is gone")
		}
		// The controllers read templates and write into none: they get the registry's own values,
		// not a copy per read (templates.Shared), as do the front end, the UI, the proxy and the
		// spawner.
		if err := controllers.SetupWorkspaceReconciler(held, registry.Shared(), controllers.UpgradeOptions{
			Workers: o.upgradeWorkers, MaxConcurrentUpgrades: o.maxConcurrentUpgr, MaxPendingUpgrades: o.maxPendingUpgr, Timeout: o.upgradeTimeout, Keys: keys,
			Lifecycle: controllers.LifecycleOptions{IdleTimeout: o.lifecycle.idleTimeout},
			History:   history,
			Pods:      pods,
		}); err != nil {
			return fmt.Errorf("set up upgrade controller: %w", err)
		}
		// Update policies and template history (issue 15): leader only.
		if err := controllers.SetupPolicyRunner(held, registry.Shared(), pods, controllers.PolicyOptions{
			Interval: o.updates.interval, PerInterval: o.updates.perInterval, MaxInFlight: o.maxConcurrentUpgr, MaxPending: o.maxPendingUpgr, IdleAfter: o.updates.idleAfter,
			RetryAfter: o.updates.retryAfter,
		}); err != nil {
			return fmt.Errorf("set up update policies: %w", err)
		}
		if err := controllers.SetupHistoryRecorder(held, registry.Shared(), o.namespace, o.updates.historyLimit); err != nil {
			return fmt.Errorf("set up template history: %w", err)
		}
	}

	// The start-up's garbage goes back to the system once the start-up work is over (figure 5).
	// It lowers the collector's target when the controllers' first pass may begin
	// (--controllers-start-delay after ready), not while the first requests are served.
	// Its quiet test (3 polls of 250 ms allocating less than 4 MiB each) ends within a second of
	// the first pass, which now starts --controllers-start-delay after the read path.
	if err := mgr.Add(podcache.ReleaseAfterSync{Cache: gate.Controllers(), StartupGCPercent: 25, Poll: 250 * time.Millisecond, QuietPolls: 3}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	// Ready once the views, the proxy's routes and the templates hold the initial lists.
	if err := mgr.AddReadyzCheck("startup", gate.Check); err != nil {
		return err
	}
	// Not ready while the API server cannot be reached (docs/reliability.md): callers go to a
	// replica that can spawn and upgrade; the proxy keeps serving the workspaces it knows.
	apiCheck, err := health.APIServer(cfg, health.DefaultAPIServerTimeout)
	if err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("apiserver", apiCheck); err != nil {
		return err
	}
	log.Info("starting nogoo9", "version", version, "namespace", o.namespace, "watchedNamespaces", watched, "components", o.components)
	return mgr.Start(ctx)
}

// firstVerification logs how long the process's first token verification took (at start, the
// first request's TokenReview or OIDC check goes to an API server still busy with the initial
// lists), once, with the time since the process started; after it, a verification costs one
// atomic load more.
type firstVerification struct {
	auth.Authenticator
	done atomic.Bool
	once sync.Once
}

func (f *firstVerification) Authenticate(r *http.Request) (*auth.Caller, error) {
	if f.done.Load() {
		return f.Authenticator.Authenticate(r)
	}
	s := time.Now()
	c, err := f.Authenticator.Authenticate(r)
	f.log(s, err)
	return c, err
}

func (f *firstVerification) VerifyToken(ctx context.Context, token string) (*auth.Caller, error) {
	if f.done.Load() {
		return f.Authenticator.VerifyToken(ctx, token)
	}
	s := time.Now()
	c, err := f.Authenticator.VerifyToken(ctx, token)
	f.log(s, err)
	return c, err
}

func (f *firstVerification) log(s time.Time, err error) {
	if err != nil && errors.Is(err, auth.ErrNoToken) {
		return
	}
	f.once.Do(func() {
		ctrl.Log.WithName("startup").Info("First token verified", "took", time.Since(s).Round(time.Millisecond).String(),
			"sinceStart", time.Since(processStarted).Round(time.Millisecond).String(), "ok", err == nil)
		f.done.Store(true)
	})
}

// uiSetup wires the web UI's flags into pkg/ui; nil when --ui=false.
func uiSetup(ctx context.Context, mgr ctrl.Manager, o options, authn auth.Authenticator, registry *templates.Registry, proxyHere bool, origins *workspace.Origins) func(*frontend.Service) (http.Handler, error) {
	if !o.ui.enabled {
		return nil
	}
	c := ui.Config{
		Auth: authn, Templates: frontend.FromRegistry(registry.Shared()), SubscribeTemplates: registry.Subscribe,
		DevLogin: o.ui.devLogin, InsecureCookie: o.ui.insecureCookie, ProxyURL: o.ui.proxyURL,
		Origins: origins, MaxListStreams: o.ui.maxListStreams,
	}
	if proxyHere {
		c.ProxyBindAddress = o.proxyAddr
	}
	if o.ui.oidcRedirectURL != "" && o.auth.Mode != "oidc" {
		return func(*frontend.Service) (http.Handler, error) {
			return nil, fmt.Errorf("--ui-oidc-redirect-url needs --auth=oidc (single sign-on uses its issuer and client id); with --auth=%s use the development login", o.auth.Mode)
		}
	}
	if o.ui.oidcRedirectURL != "" {
		c.OIDC = ui.OIDCConfig{
			IssuerURL: o.auth.OIDC.IssuerURL, ClientID: o.auth.OIDC.ClientID, CAFile: o.auth.OIDC.CAFile,
			RedirectURL: o.ui.oidcRedirectURL, Scopes: splitList(o.ui.oidcScopes),
			TrustedProxies: o.auth.TrustedProxies(),
		}
		if o.ui.oidcSecretFile != "" {
			b, err := os.ReadFile(o.ui.oidcSecretFile)
			if err != nil {
				return func(*frontend.Service) (http.Handler, error) {
					return nil, fmt.Errorf("read --ui-oidc-client-secret-file: %w", err)
				}
			}
			c.OIDC.ClientSecret = strings.TrimSpace(string(b))
		}
	}
	return ui.Setup(ctx, mgr, c)
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func parseComponents(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		switch c {
		case "controller", "api", "proxy":
			out[c] = true
		case "":
		default:
			return nil, fmt.Errorf("--components: unknown component %q: use a comma-separated list of controller, api, proxy", c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--components is empty: name at least one of controller, api, proxy")
	}
	return out, nil
}

// addNamespaceWatcher adds, in selector mode, the namespaces.Watcher that stops the process when
// the selected namespaces change.
func addNamespaceWatcher(mgr ctrl.Manager, cfg *rest.Config, scheme *runtime.Scheme, o options, watched []string) error {
	spec, err := namespaces.Parse(o.namespaces)
	if err != nil || !spec.IsSelector() {
		return err
	}
	reader, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create a client to watch --namespaces: %w", err)
	}
	return mgr.Add(&namespaces.Watcher{Spec: spec, Home: o.namespace, Watched: watched, Reader: reader, Log: ctrl.Log.WithName("namespaces")})
}

// warnUnsafeNamespaces logs, as an error, every watched namespace but nogoo9's own that is not
// safe for tenants: one the bookkeeping admission policy does not cover (namespaces.Unprotected),
// where anyone who may create pods can forge a workspace's owner or claim a path the proxy serves,
// and one whose workspace pods no NetworkPolicy isolates both ways (namespaces.Unisolated), where
// a workspace can connect to other tenants' workspaces past the proxy. nogoo9 still starts, since
// the label or the policies may come a moment later, but the operator reads why and what to
// apply. What nogoo9 may not read is logged as not checked.
func warnUnsafeNamespaces(cfg *rest.Config, scheme *runtime.Scheme, o options, watched []string) {
	if len(watched) < 2 {
		return
	}
	log := ctrl.Log.WithName("namespaces")
	reader, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		log.Info("Could not check that the watched namespaces are safe for tenants", "error", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if bare, err := namespaces.Unprotected(ctx, reader, watched, o.namespace); err != nil {
		log.Info("Could not check that the watched namespaces are labelled "+namespaces.ProtectionLabel+"=true (the label that binds the admission policy there)", "error", err.Error())
	} else {
		for _, n := range bare {
			log.Error(nil, "Watched namespace is not labelled "+namespaces.ProtectionLabel+"=true, so the admission policy that keeps nogoo9's bookkeeping nogoo9's does not apply there: anyone who may create pods in it can forge a workspace's owner or claim a path the proxy serves; label it (kubectl label namespace "+n+" "+namespaces.ProtectionLabel+"=true) and apply config/namespaces", "namespace", n)
		}
	}
	if open, err := namespaces.Unisolated(ctx, reader, watched, o.namespace); err != nil {
		log.Info("Could not check that the watched namespaces have NetworkPolicies isolating workspace pods (the nogoo9-workspaces ClusterRole grants list networkpolicies)", "error", err.Error())
	} else {
		for _, u := range open {
			log.Error(nil, "Watched namespace has no NetworkPolicy isolating its workspace pods, so a workspace there can connect to other tenants' workspaces past the proxy: apply config/namespaces/workspace-network to it (kubectl apply -k config/namespaces/workspace-network -n "+u.Namespace+")", "namespace", u.Namespace, "missing", u.Missing)
		}
	}
}

// watchedNamespaces resolves --namespaces (pkg/namespaces); a selector lists namespaces once, now.
func watchedNamespaces(cfg *rest.Config, scheme *runtime.Scheme, o options) ([]string, error) {
	spec, err := namespaces.Parse(o.namespaces)
	if err != nil {
		return nil, err
	}
	var reader client.Reader
	if spec.IsSelector() {
		if reader, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
			return nil, fmt.Errorf("create a client to resolve --namespaces: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return namespaces.Resolve(ctx, spec, o.namespace, reader)
}
