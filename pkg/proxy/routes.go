package proxy

import (
	"fmt"
	"math"
	"net"
	"net/http/httputil"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// ReservedPrefix is the proxy's own path space (login, logout); no route may claim it.
const ReservedPrefix = workspace.ReservedPathPrefix

// routeKind says which of a workspace's two routes a target is.
type routeKind uint8

const (
	kindWorkspace routeKind = iota
	kindPreview
)

func (k routeKind) String() string {
	if k == kindPreview {
		return "preview"
	}
	return "workspace"
}

// wsKey identifies a workspace: namespace and id.
type wsKey struct{ namespace, id string }

func (k wsKey) String() string { return k.namespace + "/" + k.id }

// target is where one route prefix goes right now. It is immutable: a change builds a new one.
type target struct {
	prefix string
	ws     wsKey
	kind   routeKind
	public bool   // preview opted in to nogoo9/public-preview
	strip  bool   // strip the prefix before forwarding
	owner  string // raw subject (nogoo9/owner)
	// created is the workspace's creation time (workspaceCreated, unixNanos): it breaks ties when
	// two workspaces claim one prefix (the older keeps it). Nanoseconds instead of a time.Time, and
	// the flags beside kind, keep a target at 208 bytes instead of 232 (the 240-byte size
	// class; bench/history.md, "Seventh round").
	created int64

	// status is the workspace's phase; only a Served phase with a ready pod is forwarded. A
	// served phase's is one of two shared values (servedStatus), another phase's is the
	// workspace's, shared by its targets: a pointer, 40 bytes less per target than the value.
	status *workspace.Status
	// podUID, podName and addr ("ip:port") name the ready pod traffic goes to; addr is "" when
	// no pod is ready (the answer is then 503 "starting").
	podUID  types.UID
	podName string
	addr    string
	// problem, when set, is why the route cannot be served (a bad port annotation).
	problem string

	// rp forwards to addr. It is made by newRP at the first request that needs it
	// (reverseProxy), not when the route is built: most of a large installation's workspaces get
	// no request between two changes of their pods, and a ReverseProxy with its two closures is
	// about 250 bytes per workspace (bench/history.md, "Memory per workspace").
	rp atomic.Pointer[httputil.ReverseProxy]
}

// reverseProxy is t's ReverseProxy, made by newRP (the router's: one function for every target,
// not a field of each) at the first call; nil when t is never forwarded (no ready pod, a
// problem) or newRP is nil (pure tests). Concurrent first calls agree on one.
func (t *target) reverseProxy(newRP func(*target) *httputil.ReverseProxy) *httputil.ReverseProxy {
	if rp := t.rp.Load(); rp != nil || newRP == nil {
		return rp
	}
	if rp := newRP(t); rp != nil {
		t.rp.CompareAndSwap(nil, rp)
	}
	return t.rp.Load()
}

// serveable reports whether requests on t can be forwarded, and if not, a short reason.
func (t *target) unavailable() (string, bool) {
	switch {
	case t.problem != "":
		return "workspace " + t.ws.id + " is misconfigured: " + t.problem, true
	case t.status.Phase == workspace.PhaseUnavailable:
		return "workspace " + t.ws.id + " is unavailable: " + t.status.Reason + ": " + t.status.Message, true
	case t.status.Phase == workspace.PhaseScheduling || t.status.Phase == workspace.PhaseInitializing:
		return "workspace " + t.ws.id + " is starting (" + string(t.status.Phase) + "): reload in a few seconds", true
	case !t.status.Phase.Served():
		msg := "workspace " + t.ws.id + " is not serving (" + string(t.status.Phase)
		if t.status.Reason != "" {
			msg += ": " + t.status.Reason
		}
		if t.status.Message != "" {
			msg += ": " + t.status.Message
		}
		return msg + ")", true
	case t.addr == "":
		return "workspace " + t.ws.id + " is starting: no pod is ready yet, reload in a few seconds", true
	}
	return "", false
}

// servedStatus is the status of the targets of a workspace in a served phase, one shared value
// per phase: a served workspace's reason and message are never read (they explain a 503:
// unavailable, serveStopped), and a ready pod's message names the pod: about 50 bytes per
// workspace that the route would hold for nothing.
var servedStatus = map[workspace.PhaseName]*workspace.Status{
	workspace.PhaseReady:     {Phase: workspace.PhaseReady},
	workspace.PhaseUpgrading: {Phase: workspace.PhaseUpgrading},
}

// routesFor derives a workspace's routes from its pods (all of one workspace id, any order):
// target pod = workspace.Active over the pods newest first, phase = workspace.Phase. Paths, ports
// and flags are read from the active pod's annotations. It is pure. Problems with a path are
// returned as errors (that route is left out); a bad port keeps the route with a problem, so the
// user sees why.
func routesFor(key wsKey, pods []*corev1.Pod, now time.Time) ([]*target, []error) {
	if len(pods) == 0 {
		return nil, nil
	}
	sorted := workspace.NewestFirst(append([]*corev1.Pod(nil), pods...))
	active := workspace.Active(sorted)
	phase := workspace.Phase(sorted, now)
	status := servedStatus[phase.Phase]
	if status == nil {
		status = &phase
	}
	created := unixNanos(workspaceCreated(sorted))
	ann := active.Annotations
	var out []*target
	var errs []error
	for _, r := range []struct {
		kind            routeKind
		pathKey, portKy string
	}{
		{kindWorkspace, workspace.AnnWorkspacePath, workspace.AnnWorkspacePort},
		{kindPreview, workspace.AnnPreviewPath, workspace.AnnPreviewPort},
	} {
		raw, ok := ann[r.pathKey]
		if !ok || raw == "" {
			continue
		}
		prefix, err := normalizePrefix(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s annotation %s: %w", active.Namespace, active.Name, r.pathKey, err))
			continue
		}
		t := &target{
			prefix:  prefix,
			ws:      key,
			kind:    r.kind,
			owner:   workspace.Owner(active),
			public:  r.kind == kindPreview && ann[workspace.AnnPublicPreview] == "true",
			strip:   ann[workspace.AnnStripPrefix] != "false",
			created: created,
			status:  status,
		}
		port, err := parsePort(ann[r.portKy])
		if err != nil {
			t.problem = fmt.Sprintf("annotation %s: %v", r.portKy, err)
		}
		if workspace.IsReady(active) && t.problem == "" {
			t.podUID, t.podName = active.UID, active.Name
			t.addr = net.JoinHostPort(active.Status.PodIP, strconv.Itoa(port))
		}
		out = append(out, t)
	}
	return out, errs
}

// workspaceCreated is when the workspace of pods (at least one) was created: the earliest of
// its pods' workspace.CreatedAt. A pod's own creation time alone is not the workspace's: every
// upgrade, stop and start, and eviction's copy makes a new pod, and a workspace whose original
// pod is gone looked newer than one spawned after it, which then took its contested prefix.
func workspaceCreated(pods []*corev1.Pod) time.Time {
	created := workspace.CreatedAt(pods[0])
	for _, p := range pods[1:] {
		if c := workspace.CreatedAt(p); c.Before(created) {
			created = c
		}
	}
	return created
}

// normalizePrefix turns an annotation path into a route prefix (workspace.RoutePrefix).
func normalizePrefix(p string) (string, error) { return workspace.RoutePrefix(p) }

func parsePort(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing: set the container port the path is served on")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	return n, nil
}

// cleanPath is the path routes are matched on: "." and ".." resolved, repeated slashes collapsed,
// a trailing slash kept. p is the decoded path (url.URL.Path), so an encoded slash (%2F) counts as
// a slash and "..%2F" cannot climb out of a prefix unseen. Already-clean paths (the usual case)
// are returned as they are, without allocating.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if isClean(p) {
		return p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// isClean reports whether p (starting with "/") has no empty, "." or ".." segment.
func isClean(p string) bool { return workspace.IsCleanPath(p) }

// table is the route table: prefix -> target, with the depth of the deepest prefix so a lookup
// tries at most that many candidate prefixes.
type table struct {
	routes   map[string]*target
	maxDepth int
}

// lookup returns the target of the longest prefix of p (a cleaned path), or nil. Candidate
// prefixes are substrings of p, so nothing is allocated.
func (t *table) lookup(p string) *target { return t.lookupWhere(p, nil) }

// lookupWhere is lookup among the targets for which keep (nil: every target) is true: the
// longest prefix of p whose target keeps, or nil.
func (t *table) lookupWhere(p string, keep func(*target) bool) *target {
	var best *target
	depth := 0
	for i := 0; i < len(p) && depth < t.maxDepth; i++ {
		if p[i] != '/' {
			continue
		}
		depth++
		if tg, ok := t.routes[p[:i+1]]; ok && (keep == nil || keep(tg)) {
			best = tg
		}
	}
	return best
}

func depthOf(prefix string) int { return strings.Count(prefix, "/") }

// wins reports whether a should own a prefix that b claims too: the older workspace keeps it, so a
// newly created workspace can never take over an existing one's path.
func wins(a, b *target) bool {
	if a.created != b.created {
		return a.created < b.created
	}
	return a.ws.String() < b.ws.String()
}

// unixNanos is t in nanoseconds since the Unix epoch, clamped to int64's range (the years 1678 to
// 2262) so that it orders as t does.
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}
