package controllers

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

var (
	upgradesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nogoo9_upgrades_total",
		Help: "Finished workspace upgrades by result (succeeded, failed) and strategy (SideBySide, Recreate, none when it could not start).",
	}, []string{"result", "strategy"})
	upgradeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nogoo9_upgrade_duration_seconds",
		Help:    "Time from the start of a workspace upgrade (nogoo9/upgrade-started-at) to its end, by result.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200},
	}, []string{"result"})

	outdatedDesc = prometheus.NewDesc("nogoo9_template_workspaces",
		"Workspaces per template (its name; <namespace>/<name> for a team template) and whether they run an older version than the template's current one (outdated=\"true\").",
		[]string{"template", "outdated"}, nil)
	inFlightDesc = prometheus.NewDesc("nogoo9_upgrades_in_flight", "Workspaces with an upgrade in flight, as observed in the cache.", nil, nil)
	waitingDesc  = prometheus.NewDesc("nogoo9_upgrades_waiting", "Workspaces whose upgrade request waits for a slot (--max-pending-upgrades, --max-concurrent-upgrades) in this process.", nil, nil)
	unplacedDesc = prometheus.NewDesc("nogoo9_upgrades_waiting_for_node", "Upgrades in flight whose new pod waits for a node (counted against --max-pending-upgrades), as observed in the cache.", nil, nil)

	collectorOnce sync.Once
	// current is the reconciler whose cache the collector reads (the last one set up).
	current atomic.Pointer[WorkspaceReconciler]
)

func init() {
	metrics.Registry.MustRegister(upgradesTotal, upgradeDuration)
}

func observeUpgrade(result, strategy string, d time.Duration) {
	if strategy == "" {
		strategy = "none"
	}
	upgradesTotal.WithLabelValues(result, strategy).Inc()
	upgradeDuration.WithLabelValues(result).Observe(d.Seconds())
}

// registerCollector makes r the source of the scrape-time gauges (computed from the cache, so
// they cost nothing between scrapes).
func registerCollector(r *WorkspaceReconciler) {
	current.Store(r)
	collectorOnce.Do(func() { metrics.Registry.MustRegister(workspaceCollector{}) })
}

type workspaceCollector struct{}

func (workspaceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outdatedDesc
	ch <- inFlightDesc
	ch <- waitingDesc
	ch <- unplacedDesc
}

func (workspaceCollector) Collect(ch chan<- prometheus.Metric) {
	r := current.Load()
	if r == nil {
		return
	}
	// The cache's pods one workspace at a time, not a List: a List copies every pod struct (12 MB
	// per scrape at 10,000 workspaces). The collector only reads them
	// (TestCollectorNeverMutatesTheCache).
	counts := map[outdatedKey]int{}
	var upgrading []*corev1.Pod
	if !r.every.Workspaces(func(group []*corev1.Pod) {
		counts[outdatedOf(group, r.Templates)]++
		upgrading = appendUpgrading(upgrading, group)
	}) {
		return // cache not synced yet: no sample rather than a wrong one
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(outdatedDesc, prometheus.GaugeValue, float64(n), k.template, boolLabel(k.outdated))
	}
	slots := upgrade.Slots(upgrading)
	unplaced := 0
	for _, s := range slots {
		if s.WaitingForNode {
			unplaced++
		}
	}
	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(len(slots)))
	ch <- prometheus.MustNewConstMetric(unplacedDesc, prometheus.GaugeValue, float64(unplaced))
	if r.gate != nil {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(r.gate.waitingCount()))
	}
}

type outdatedKey struct {
	template string
	outdated bool
}

// OutdatedCounts counts workspaces per template and outdatedness: a workspace is outdated when
// its active pod's version differs from its template's current version. Ids are unique per
// namespace only, so pods are grouped per namespace first.
func OutdatedCounts(pods []*corev1.Pod, reg TemplateSource) map[outdatedKey]int {
	byNS := map[string][]*corev1.Pod{}
	for _, p := range pods {
		byNS[p.Namespace] = append(byNS[p.Namespace], p)
	}
	var groups [][]*corev1.Pod
	for _, nsPods := range byNS {
		for _, g := range workspace.GroupByID(nsPods) {
			groups = append(groups, g)
		}
	}
	out := map[outdatedKey]int{}
	for _, group := range groups {
		out[outdatedOf(group, reg)]++
	}
	return out
}

// outdatedOf is the count OutdatedCounts adds one workspace's pods (newest first) to.
func outdatedOf(group []*corev1.Pod, reg TemplateSource) outdatedKey {
	active := workspace.Active(group)
	// The key: a team template counts apart from nogoo9's of the same name.
	name := workspace.TemplateKey(active)
	target := upgrade.Target{Name: name}
	if t, ok := reg.Get(name); ok {
		target.Found, target.Version = true, t.Version
	}
	return outdatedKey{template: name, outdated: upgrade.Outdated(active, target)}
}

// appendUpgrading appends to pods copies of group's pods (a workspace's pods from
// podcache.Every.Workspaces, whose buffer and label and annotation maps are reused: the maps are
// copied, the rest shared) when one of them carries the upgrade link (AnnUpgradeFrom):
// upgrade.Slots counts only such workspaces, each from its own pods, so it counts
// the same over these as over every pod.
func appendUpgrading(pods, group []*corev1.Pod) []*corev1.Pod {
	for _, p := range group {
		if p.Annotations[workspace.AnnUpgradeFrom] != "" {
			for _, q := range group {
				pods = append(pods, podcache.Keep(q))
			}
			break
		}
	}
	return pods
}

// everyUpgrading is the upgrade gate's first count's source: the pods of the cached workspaces
// with an upgrade link (appendUpgrading), ok false until the cache has synced.
func everyUpgrading(every *podcache.Every) func() ([]*corev1.Pod, bool) {
	return func() ([]*corev1.Pod, bool) {
		var pods []*corev1.Pod
		ok := every.Workspaces(func(group []*corev1.Pod) { pods = appendUpgrading(pods, group) })
		return pods, ok
	}
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
