package standin

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Options configure a StandIn.
type Options struct {
	// Namespace to follow; "" follows every namespace. Tests that share a cluster must set it, so
	// a stand-in never binds the pod IPs of another spec's pods.
	Namespace string
	// Log receives "serving" / "stopped serving" lines and errors; the zero Logger discards them.
	Log logr.Logger
	// Retry is how often the stand-in re-plans without an event, so a bind that failed (a port
	// still in use) is tried again. Default 2 s.
	Retry time.Duration
}

// StandIn follows workspace pods and serves a Backend for each (see the package comment).
type StandIn struct {
	client kubernetes.Interface
	opts   Options

	mu      sync.Mutex
	serving map[string]*listener
	failed  map[string]string // addr -> last error, so a failing bind is logged once
	skipped map[string]string // pod -> reason, logged once
}

// New returns a StandIn that reads pods with cfg.
func New(cfg *rest.Config, opts Options) (*StandIn, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("stand-in client: %w", err)
	}
	if opts.Retry <= 0 {
		opts.Retry = 2 * time.Second
	}
	return &StandIn{client: cs, opts: opts, serving: map[string]*listener{}, failed: map[string]string{}, skipped: map[string]string{}}, nil
}

// Run follows the pods until ctx ends, then closes every listener. It returns an error when the
// pod cache does not sync within a minute; ready (if not nil) is called once it has synced and
// the first plan is applied.
func (s *StandIn) Run(ctx context.Context, ready func()) error {
	defer s.closeAll()
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithNamespace(s.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = workspace.LabelType + "=" + workspace.TypeWorkspace
		}))
	inf := factory.Core().V1().Pods()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return fmt.Errorf("stand-in pod handler: %w", err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	synced := cache.WaitForCacheSync(syncCtx.Done(), inf.Informer().HasSynced)
	cancel()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("the stand-in's pod cache did not sync within a minute: is the API server reachable with this kubeconfig?")
	}
	lister := inf.Lister()
	replan := func() {
		pods, err := lister.List(labels.Everything())
		if err != nil {
			s.opts.Log.Error(err, "list pods from the cache")
			return
		}
		s.apply(Plan(pods))
	}
	replan()
	if ready != nil {
		ready()
	}
	tick := time.NewTicker(s.opts.Retry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		}
		replan()
	}
}

// apply closes the listeners no longer wanted (or wanted for another pod) first, so an address a
// new pod reuses is free, then opens the missing ones.
func (s *StandIn) apply(want map[string]Backend, skips []Skip) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, l := range s.serving {
		if b, ok := want[addr]; ok && b == l.backend {
			continue
		}
		l.Close()
		delete(s.serving, addr)
		s.opts.Log.Info("stopped serving", "pod", l.backend.Namespace+"/"+l.backend.Pod, "addr", addr, "role", l.backend.Role)
	}
	addrs := make([]string, 0, len(want))
	for addr := range want {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		if _, ok := s.serving[addr]; ok {
			delete(s.failed, addr)
			continue
		}
		b := want[addr]
		l, err := listen(b, log.New(logWriter{s.opts.Log}, "", 0))
		if err != nil {
			if s.failed[addr] != err.Error() {
				s.opts.Log.Error(err, "cannot serve pod; retrying", "pod", b.Namespace+"/"+b.Pod, "addr", addr)
				s.failed[addr] = err.Error()
			}
			continue
		}
		delete(s.failed, addr)
		s.serving[addr] = l
		s.opts.Log.Info("serving", "pod", b.Namespace+"/"+b.Pod, "addr", addr, "role", b.Role,
			"workspace", b.Workspace, "templateVersion", b.TemplateVersion)
	}
	for addr := range s.failed {
		if _, ok := want[addr]; !ok {
			delete(s.failed, addr)
		}
	}
	now := map[string]string{}
	for _, sk := range skips {
		now[sk.Pod] = sk.Reason
		if s.skipped[sk.Pod] != sk.Reason {
			s.opts.Log.Info("not serving pod", "pod", sk.Pod, "reason", sk.Reason)
		}
	}
	s.skipped = now
}

// Serving returns the backends being served now, sorted by address.
func (s *StandIn) Serving() []Backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Backend, 0, len(s.serving))
	for _, l := range s.serving {
		out = append(out, l.backend)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

func (s *StandIn) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, l := range s.serving {
		l.Close()
		delete(s.serving, addr)
	}
}

// logWriter routes http.Server's error log (e.g. a malformed request) to the logger.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info("http server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
