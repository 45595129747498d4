package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// logEvent is one JSON log line of nogoo9: when, and what.
type logEvent struct {
	Ts  string `json:"ts"`
	Msg string `json:"msg"`
}

// logTimes are the times of the log lines of p whose message is one of msgs.
func logTimes(p *Nogoo9Process, msgs ...string) []time.Time {
	var out []time.Time
	for _, line := range strings.Split(p.LogTail(1000000), "\n") {
		var e logEvent
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		for _, m := range msgs {
			if e.Msg == m {
				t, err := time.Parse(time.RFC3339Nano, e.Ts)
				Expect(err).NotTo(HaveOccurred(), "log time %q", e.Ts)
				out = append(out, t)
			}
		}
	}
	return out
}

// lastLogTime is the time of the last JSON log line of p (zero if none).
func lastLogTime(p *Nogoo9Process) time.Time {
	var last time.Time
	for _, line := range strings.Split(p.LogTail(1000000), "\n") {
		var e logEvent
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, e.Ts); err == nil && t.After(last) {
			last = t
		}
	}
	return last
}

var _ = Describe("Leader election with three replicas", Label("leaders"), func() {
	It("never lets two leaders act while two leaders are killed in turn during a bulk upgrade, and the last one finishes", func(ctx SpecContext) {
		const n = 24
		// The default lease (15 s) and renew deadline (10 s): each take-over after a kill -9 costs
		// a lease duration, and a leader keeps its lease through 10 s of slow renewals on a loaded
		// machine. (A leader that still loses it exits by design; leader() and the terms below
		// allow for that.)
		flags := []string{"--leader-elect=true", "--max-concurrent-upgrades=2",
			"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s"}
		ns := NewNamespace()
		hist := watchWorkspacePods(ns)
		Expect(K8s.Create(ctx, upgradeTemplate(ns, "plain", "1.0", "example.com/ide:1.0", ""))).To(Succeed())
		replicas := make([]*Nogoo9Process, 3)
		for i := range replicas {
			replicas[i] = StartNogoo9(append([]string{"--namespace=" + ns}, flags...)...)
		}
		erin := userClient(ctx, replicas[2], ns, "erin")
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("l-%02d", i)
			hist.NoOutage(ids[i])
		}
		erin.spawnAllReady(ctx, ns, ids, plainTemplate)

		bumpTemplate(ctx, upgradeTemplate(ns, "plain", "2.0", "example.com/ide:2.0", ""))
		erin.waitOutdated(ctx, ids[0], "2.0")
		out, err := kubectl(Cluster.Kubeconfig, "-n", ns, "annotate", "pods", "-l", workspace.LabelTemplate+"=plain,"+workspace.LabelTemplateVersion+"!=2.0",
			workspace.AnnUpgradeRequested+"=true")
		Expect(err).NotTo(HaveOccurred(), "kubectl annotate:\n%s", out)

		alive := map[*Nogoo9Process]bool{replicas[0]: true, replicas[1]: true, replicas[2]: true}
		killedAt := map[*Nogoo9Process]time.Time{}
		// The leader is the running replica that acquired the lease: a replica that lost it has
		// exited (nogoo9 never acts without the lease) and is no leader any more.
		leader := func() *Nogoo9Process {
			for _, r := range replicas {
				if alive[r] && !r.Exited() && len(logTimes(r, "Successfully acquired lease")) > 0 {
					return r
				}
			}
			return nil
		}
		for kill := 1; kill <= 2; kill++ {
			var l *Nogoo9Process
			Eventually(func() *Nogoo9Process { l = leader(); return l }).WithTimeout(2*time.Minute).ShouldNot(BeNil(), "a leader among the replicas alive")
			before := hist.UpgradedPods()
			// Kill it once it has done some of the work (or when nothing is left to do).
			Eventually(hist.UpgradedPods).WithTimeout(2 * time.Minute).WithPolling(20 * time.Millisecond).
				Should(Or(BeNumerically(">=", before+2), BeNumerically(">=", n)))
			if hist.UpgradedPods() >= n {
				GinkgoWriter.Printf("every upgraded pod was created before kill %d\n", kill)
				break
			}
			// A leader that exited on its own (it lost the lease) ends its term at its last log
			// line, not now.
			running := !l.Exited()
			l.Kill()
			if running {
				killedAt[l] = time.Now()
			}
			alive[l] = false
			GinkgoWriter.Printf("leader %d killed with %d of %d upgraded pods created\n", kill, hist.UpgradedPods(), n)
		}

		By("the last replica finishes every upgrade")
		waitAllUpgraded(ns, ids, "2.0")
		Expect(hist.Violations()).To(BeEmpty())

		By("never two leaders acting: each replica wrote only while it held the lease, and the terms do not overlap")
		type term struct {
			from, to time.Time
			who      int
		}
		var terms []term
		for i, r := range replicas {
			acquired := logTimes(r, "Successfully acquired lease")
			writes := logTimes(r, "Created upgraded pod", "Deleted pod")
			if len(acquired) == 0 {
				Expect(writes).To(BeEmpty(), "replica %d wrote without ever holding the lease", i)
				continue
			}
			// A term ends when the replica was killed, when it exited on its own (it lost the
			// lease: its last log line, at or after its last write), or now.
			end := time.Now()
			if t, ok := killedAt[r]; ok {
				end = t
			} else if r.Exited() {
				end = lastLogTime(r)
				GinkgoWriter.Printf("replica %d exited on its own (%v); its term ends at its last log line\n", i, r.exitErr())
			}
			for _, w := range writes {
				Expect(w).To(BeTemporally(">=", acquired[0]), "replica %d wrote before it held the lease", i)
				Expect(w).To(BeTemporally("<=", end), "replica %d wrote after it was killed", i)
			}
			terms = append(terms, term{from: acquired[0], to: end, who: i})
		}
		for a := range terms {
			for b := range terms {
				if a != b && terms[a].from.Before(terms[b].from) {
					Expect(terms[a].to).To(BeTemporally("<=", terms[b].from), "replicas %d and %d held the lease at once", terms[a].who, terms[b].who)
				}
			}
		}
		Expect(len(terms)).To(BeNumerically(">=", 2), "at least one take-over happened")
	})
})
