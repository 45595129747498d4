package frontend

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// intentLog records the pods handed to Config.Intents.
type intentLog struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (l *intentLog) UpgradeRequested(p *corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods = append(l.pods, p)
}

// Every intent upgrade-all writes is handed to Config.Intents (the upgrade controller of the same
// process), with the pod as the write answered it: the intent and the new pod's name on it, and
// the resourceVersion after the write. Workspaces it does not write an intent on (up to date,
// in maintenance) are not handed over.
func TestUpgradeAllHandsEveryIntentWrittenToTheController(t *testing.T) {
	pods := []*corev1.Pod{
		pod("ws-a1", "alice", "a1", "1.0", t0, ready),
		pod("ws-a2", "alice", "a2", "2.0", t0, ready),
		pod("ws-b1", "bob", "b1", "1.0", t0, ready),
		pod("ws-b2", "bob", "b2", "1.0", t0, ready),
	}
	pods[3].Annotations[workspace.AnnMaintenance] = "disk migration"
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	for _, path := range []string{"views", "per-call"} {
		t.Run(path, func(t *testing.T) {
			log := &intentLog{}
			svc := servicesWith(t, func(c *Config) { c.Intents = log }, pods...)[path]
			rs, err := svc.UpgradeAll(admin)
			if err != nil {
				t.Fatal(err)
			}
			byID := map[string]UpgradeResult{}
			for _, r := range rs {
				byID[r.ID] = r
			}
			got := map[string]*corev1.Pod{}
			for _, p := range log.pods {
				got[p.Name] = p
			}
			if len(log.pods) != 2 || got["ws-a1"] == nil || got["ws-b1"] == nil {
				t.Fatalf("handed over %d pods (%v), want ws-a1 and ws-b1", len(log.pods), got)
			}
			for name, id := range map[string]string{"ws-a1": "a1", "ws-b1": "b1"} {
				p := got[name]
				if p.Annotations[workspace.AnnUpgradeRequested] == "" || p.Annotations[workspace.AnnUpgradePod] != byID[id].PodName {
					t.Errorf("%s handed over without its intent: %v", name, p.Annotations)
				}
				var before *corev1.Pod
				for _, q := range pods {
					if q.Name == name {
						before = q
					}
				}
				if p.ResourceVersion == "" || p.ResourceVersion == before.ResourceVersion || p.UID != before.UID {
					t.Errorf("%s handed over as resourceVersion %q uid %q, want the version after the write of pod uid %q", name, p.ResourceVersion, p.UID, before.UID)
				}
			}
		})
	}
}
