package proxy

import (
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/lifecycle"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// DefaultActivityInterval is how often at most nogoo9/last-activity is written per workspace.
const DefaultActivityInterval = time.Minute

// ActivityOptions configure the recording of what people do through the proxy
// (nogoo9/last-activity, read by the idle culler; docs/lifecycle.md).
type ActivityOptions struct {
	// Writer patches pods; nil turns recording off.
	Writer client.Writer
	// Interval is the least time between two writes for one workspace, across replicas
	// (--activity-write-interval, DefaultActivityInterval when 0).
	Interval time.Duration
	// TemplateAnnotations returns the annotations of the template at key (workspace.TemplateKey;
	// its nogoo9/websocket-max-age), read only: the map may be the template registry's own
	// (templates.Shared). nil: an open WebSocket counts for as long as it is open.
	TemplateAnnotations func(name string) map[string]string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// HealthCheckHeader marks a request as a health check: it is forwarded but never counts as
// activity (nor does a request from the kubelet's prober, user agent kube-probe/...).
const HealthCheckHeader = "X-Nogoo9-Health-Check"

// activityRecorder keeps, per workspace pod that this replica has forwarded a request to, the
// last activity it saw and the value the pod carries, and writes nogoo9/last-activity from one
// loop: the request path only stores a timestamp. A pod's record is made at its first forwarded
// request, from the pod as the router holds it (the cache's object), not for every cached pod:
// most of a large installation's workspaces get no request between two restarts of the proxy,
// and a record with its map node is about 250 bytes (bench/history.md, "Memory per
// workspace"). It starts from the pod's recorded nogoo9/last-activity, so the write interval
// holds across replicas from the first request on.
type activityRecorder struct {
	opts ActivityOptions
	pods sync.Map // types.UID -> *podActivity
	// pod returns the cached pod uid of workspace key, or nil when it is gone (router.pod).
	pod func(key wsKey, uid types.UID) *corev1.Pod
	// mu orders the making of a record (touch) with observe and forget, which run after the
	// router has the pod's change: a record is made either from the pod's latest version or
	// before observe, which then updates it; never for a pod forget has already dropped.
	mu  sync.Mutex
	ws  *connRegistry
	log logr.Logger
}

type podActivity struct {
	seen atomic.Int64 // UnixNano of the last HTTP request this replica forwarded

	mu       sync.Mutex
	ns, name string
	template string
	recorded time.Time // nogoo9/last-activity as the cache shows it (any replica's write)
	wrote    time.Time // this replica's last write
}

func newActivityRecorder(opts ActivityOptions, pod func(wsKey, types.UID) *corev1.Pod, ws *connRegistry, log logr.Logger) *activityRecorder {
	if opts.Writer == nil {
		return nil
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultActivityInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &activityRecorder{opts: opts, pod: pod, ws: ws, log: log.WithName("activity")}
}

// observe takes a changed pod's identity and recorded activity from the informer, for a pod that
// has a record; a pod without one gets it at its first request.
func (a *activityRecorder) observe(obj any) {
	if a == nil {
		return
	}
	pod := podcache.Of(obj)
	if pod == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.pods.Load(pod.UID); ok {
		v.(*podActivity).set(pod.Materialize())
	}
}

func (pa *podActivity) set(pod *corev1.Pod) {
	pa.mu.Lock()
	pa.ns, pa.name, pa.template = pod.Namespace, pod.Name, workspace.TemplateKey(pod) // the registry key: a team template is its own
	pa.recorded = lifecycle.ParseActivity(pod)
	pa.mu.Unlock()
}

func (a *activityRecorder) forget(uid types.UID) {
	if a != nil {
		a.mu.Lock()
		a.pods.Delete(uid)
		a.mu.Unlock()
	}
}

// touch records a forwarded request to pod uid of workspace key. Health checks do not count, but
// they make the pod's record like any request: a WebSocket opened through one counts while it is
// open, as every open WebSocket does.
func (a *activityRecorder) touch(key wsKey, uid types.UID, r *http.Request) {
	if a == nil {
		return
	}
	v, ok := a.pods.Load(uid)
	if !ok {
		if v, ok = a.record(key, uid); !ok {
			return
		}
	}
	if r.Header.Get(HealthCheckHeader) != "" || strings.HasPrefix(r.UserAgent(), "kube-probe/") {
		return
	}
	v.(*podActivity).seen.Store(a.opts.Now().UnixNano())
}

// record makes pod uid's record at its first request, or reports false when the pod is gone.
func (a *activityRecorder) record(key wsKey, uid types.UID) (any, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.pods.Load(uid); ok {
		return v, true
	}
	pod := a.pod(key, uid)
	if pod == nil {
		return nil, false
	}
	pa := &podActivity{}
	pa.set(pod)
	a.pods.Store(uid, pa)
	return pa, true
}

// run writes due activity every quarter interval (at most every 15s) until ctx ends.
func (a *activityRecorder) run(ctx context.Context) {
	if a == nil {
		return
	}
	tick := min(a.opts.Interval/4, 15*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.flush(ctx)
		}
	}
}

// flush writes nogoo9/last-activity for every pod whose activity is due.
func (a *activityRecorder) flush(ctx context.Context) {
	now := a.opts.Now()
	a.pods.Range(func(k, v any) bool {
		uid, pa := k.(types.UID), v.(*podActivity)
		var seen time.Time
		if n := pa.seen.Load(); n != 0 {
			seen = time.Unix(0, n)
		}
		if opened, ok := a.ws.newestOpen(uid); ok && lifecycle.WebSocketCounts(opened, now, a.maxAge(pa)) {
			seen = now // an open WebSocket is a person's terminal or editor
		}
		if seen.IsZero() {
			return true
		}
		pa.mu.Lock()
		due := lifecycle.ShouldRecord(seen, pa.recorded, pa.wrote, a.opts.Interval)
		ns, name := pa.ns, pa.name
		pa.mu.Unlock()
		if !due || ctx.Err() != nil {
			return ctx.Err() == nil
		}
		if err := a.write(ctx, uid, ns, name, seen); err != nil {
			a.log.Error(err, "Record workspace activity", "pod", ns+"/"+name)
			return true
		}
		pa.mu.Lock()
		pa.wrote = seen
		pa.mu.Unlock()
		return true
	})
}

func (a *activityRecorder) maxAge(pa *podActivity) time.Duration {
	if a.opts.TemplateAnnotations == nil {
		return 0
	}
	pa.mu.Lock()
	name := pa.template
	pa.mu.Unlock()
	d, err := lifecycle.WebSocketMaxAge(a.opts.TemplateAnnotations(name))
	if err != nil {
		a.log.V(1).Info("Ignoring a bad WebSocket maximum age", "template", name, "error", err.Error())
	}
	return d
}

func (a *activityRecorder) write(ctx context.Context, uid types.UID, ns, name string, seen time.Time) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "annotations": map[string]string{
		workspace.AnnLastActivity: seen.UTC().Truncate(time.Second).Format(time.RFC3339),
	}}})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	target := &corev1.Pod{}
	target.Namespace, target.Name = ns, name
	err := a.opts.Writer.Patch(ctx, target, client.RawPatch(types.MergePatchType, body))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone or replaced: nothing to record on
	}
	return err
}

// stoppedPage is the 503 answer for a stopped workspace: what happened and how to start it.
var stoppedPage = template.Must(template.New("stopped").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Workspace {{.ID}} is stopped</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto; line-height: 1.5">
<h1>Workspace {{.ID}} is stopped</h1>
<p>{{.Message}}.</p>
{{if .StartURL}}<p><a href="{{.StartURL}}" style="display:inline-block;padding:.5rem 1rem;border:1px solid;border-radius:.3rem;text-decoration:none">Open its page to start it</a></p>{{end}}
<p>Or start it with <code>POST {{.StartAPI}}</code>, the MCP tool <code>start_workspace</code>,
or <code>kubectl annotate pod -n {{.Namespace}} -l nogoo9/workspace-id={{.ID}} nogoo9/stop-requested-</code>. Your files and this address stay the same; reload this page once it is Ready.</p>
</body></html>
`))

// serveStopped answers a request for a stopped workspace with 503 and how to start it. The
// reason is shown only to whom the proxy authenticated (the owner, an admin): it names people
// ("stopped by an admin (alice@corp)", or any text a kubectl user wrote in the stop intent), and a
// public preview's visitors are anyone.
func (p *Proxy) serveStopped(w http.ResponseWriter, r *http.Request, t *target) {
	msg := t.status.Message
	if msg == "" || t.public {
		msg = "the workspace is stopped"
	}
	start := ""
	if p.opts.UIURL != "" {
		// The UI's namespaced page serves every watched namespace, nogoo9's own included;
		// /workspaces/<id> is a page of nogoo9's own namespace only (docs/ui.md).
		start = strings.TrimRight(p.opts.UIURL, "/") + "/namespaces/" + url.PathEscape(t.ws.namespace) + "/workspaces/" + url.PathEscape(t.ws.id)
	}
	// The namespaced route works for every watched namespace, nogoo9's own included (docs/api.md).
	startAPI := "/api/v1/namespaces/" + t.ws.namespace + "/workspaces/" + t.ws.id + "/start"
	w.Header().Set("Cache-Control", "no-store")
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("503 Service Unavailable: workspace " + t.ws.id + " is stopped: " + strings.TrimSuffix(msg, ".") + ". To start it: POST " + startAPI + ", then reload.\n"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = stoppedPage.Execute(w, map[string]string{"ID": t.ws.id, "Namespace": t.ws.namespace, "Message": strings.TrimSuffix(msg, "."), "StartURL": start, "StartAPI": startAPI})
}
