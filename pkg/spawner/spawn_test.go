package spawner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

// One kube-apiserver for the package's integration tests (nil with -short).
var (
	cfg   *rest.Config
	nsSeq atomic.Int32
)

func TestMain(m *testing.M) {
	apiserver.Main(m, func(c *rest.Config) int {
		cfg = c
		if cfg != nil {
			// 50 concurrent spawns must not queue behind client-go's default 5 requests/s.
			cfg.QPS, cfg.Burst = 1000, 2000
		}
		return m.Run()
	}, apiserver.BenchmarksNeedNone) // BenchmarkBuildPod only renders
}

// setup gives a test its own namespace and a direct client.
func setup(t *testing.T) (context.Context, client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	ns := fmt.Sprintf("spawn-%d-%d", time.Now().Unix()%100000, nsSeq.Add(1))
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ctx, c, ns
}

func testTemplates(t *testing.T) *templates.Registry {
	t.Helper()
	persistent := mustTemplate(t, map[string]string{workspace.AnnRequiredContext: "repo"},
		`{"containers":[{"name":"ide","image":"node:22","env":[{"name":"REPO","value":"${context.repo}"}],"ports":[{"containerPort":8080}],"volumeMounts":[{"name":"home","mountPath":"/home/node"}]}]}`,
		`[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}},
		  {"metadata":{"name":"cache"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}}}}]`)
	persistent.Name = "persistent"
	plain := mustTemplate(t, nil, `{"containers":[{"name":"ide","image":"node:22","ports":[{"containerPort":8080}]}]}`, "")
	plain.Name = "plain"
	// Renders a pod the API server refuses (limit below request), after its claim was created.
	refused := mustTemplate(t, nil, `{"containers":[{"name":"ide","image":"node:22","ports":[{"containerPort":8080}],
	  "resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}},"volumeMounts":[{"name":"home","mountPath":"/h"}]}]}`,
		`[{"metadata":{"name":"home"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]`)
	refused.Name = "refused"
	return templates.NewStatic(persistent, plain, refused)
}

func podsWithLabels(ctx context.Context, g Gomega, c client.Client, ns string, l map[string]string) []corev1.Pod {
	var list corev1.PodList
	g.Expect(c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(l))).To(Succeed())
	return list.Items
}

func TestSpawnCreatesExactlyThePodAndClaims(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	reg := testTemplates(t)
	s := New(c, c, reg, Options{Namespace: ns})
	res, err := s.Spawn(ctx, Request{Template: "persistent", Name: "My Project!", Context: map[string]string{"repo": "r.git"}, Caller: Caller{Subject: "auth0|jane"}})
	g.Expect(err).NotTo(HaveOccurred())

	tmpl, _ := reg.Get("persistent")
	want, wantPVCs, err := BuildPod(tmpl, Identity{Owner: "auth0|jane", ID: "my-project", Name: "My Project!", Context: map[string]string{"repo": "r.git"}, Namespace: ns}, workspace.PodName("auth0|jane", "my-project"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(want.Annotations).To(HaveKeyWithValue(workspace.AnnWorkspacePath, "/ws/"+ns+"/my-project/"))
	pods := podsWithLabels(ctx, g, c, ns, nil)
	g.Expect(pods).To(HaveLen(1))
	got := pods[0]
	g.Expect(got.Name).To(Equal(want.Name))
	g.Expect(res.Pod.Name).To(Equal(want.Name))
	g.Expect(got.Labels).To(Equal(want.Labels))
	g.Expect(got.Annotations).To(Equal(want.Annotations))
	g.Expect(got.Spec.Volumes).To(HaveLen(2))
	g.Expect(got.Spec.Containers[0].Env).To(Equal(want.Spec.Containers[0].Env))

	var pvcs corev1.PersistentVolumeClaimList
	g.Expect(c.List(ctx, &pvcs, client.InNamespace(ns))).To(Succeed())
	g.Expect(pvcs.Items).To(HaveLen(2))
	names := []string{}
	for _, p := range pvcs.Items {
		names = append(names, p.Name)
		g.Expect(p.Labels).To(HaveKeyWithValue(workspace.LabelWorkspaceID, "my-project"))
		g.Expect(p.Annotations).To(HaveKeyWithValue(workspace.AnnOwner, "auth0|jane"))
	}
	g.Expect(names).To(ConsistOf(wantPVCs[0].Name, wantPVCs[1].Name))
	g.Expect(res.PVCs).To(ConsistOf(names))
	for _, v := range got.Spec.Volumes {
		g.Expect(names).To(ContainElement(v.PersistentVolumeClaim.ClaimName))
	}
}

func TestSpawnRefusals(t *testing.T) {
	ctx, c, ns := setup(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns})
	_, err := s.Spawn(ctx, Request{Template: "plain", ID: "taken", Caller: Caller{Subject: "jane"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  Request
		code Code
	}{
		{name: "the same id again is a conflict", req: Request{Template: "plain", ID: "taken", Caller: Caller{Subject: "jane"}}, code: Conflict},
		{name: "the same id by another owner is a conflict", req: Request{Template: "plain", ID: "taken", Caller: Caller{Subject: "bob"}}, code: Conflict},
		{name: "an unknown template is not found", req: Request{Template: "nope", ID: "x", Caller: Caller{Subject: "jane"}}, code: NotFound},
		{name: "missing required context is invalid", req: Request{Template: "persistent", ID: "y", Caller: Caller{Subject: "jane"}}, code: Invalid},
		{name: "an id that is no DNS label is invalid", req: Request{Template: "plain", ID: "Not_OK", Caller: Caller{Subject: "jane"}}, code: Invalid},
		{name: "a non-admin spawning for someone else is forbidden", req: Request{Template: "plain", ID: "z", Owner: "bob", Caller: Caller{Subject: "jane"}}, code: Forbidden},
		{name: "a pod the API server refuses is invalid", req: Request{Template: "refused", ID: "r", Caller: Caller{Subject: "jane"}}, code: Invalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Spawn(ctx, tc.req)
			if CodeOf(err) != tc.code {
				t.Fatalf("err = %v (code %q), want code %s", err, CodeOf(err), tc.code)
			}
			t.Logf("message: %v", err)
		})
	}
	g := NewWithT(t)
	g.Expect(podsWithLabels(ctx, g, c, ns, nil)).To(HaveLen(1), "only the first spawn made a pod")
	var pvcs corev1.PersistentVolumeClaimList
	g.Expect(c.List(ctx, &pvcs, client.InNamespace(ns))).To(Succeed())
	// The refused pod's claim was deleted again (without a controller-manager, the
	// pvc-protection finalizer keeps it visible as terminating).
	for _, p := range pvcs.Items {
		g.Expect(p.DeletionTimestamp).NotTo(BeNil(), "claim %s of the refused spawn is still there", p.Name)
	}
}

// spawnMany fires n spawns at once by one owner with distinct ids, spread over spawners.
func spawnMany(ctx context.Context, n int, spawners ...*Spawner) (ok int, codes map[Code]int, other []error) {
	var mu sync.Mutex
	codes = map[Code]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			_, err := spawners[i%len(spawners)].Spawn(ctx, Request{Template: "plain", ID: fmt.Sprintf("w%02d", i), Caller: Caller{Subject: "jane@example.com"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case CodeOf(err) != "":
				codes[CodeOf(err)]++
			default:
				other = append(other, err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	return ok, codes, other
}

func TestQuotaHoldsUnderConcurrentSpawns(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			ctx, _, ns := setup(t)
			g := NewWithT(t)
			var spawners []*Spawner
			for i := 0; i < replicas; i++ {
				// Each replica has its own client and registry: they share only the API server.
				c, err := client.New(cfg, client.Options{})
				g.Expect(err).NotTo(HaveOccurred())
				spawners = append(spawners, New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 3}))
			}
			ok, codes, other := spawnMany(ctx, 50, spawners...)
			g.Expect(other).To(BeEmpty())
			g.Expect(ok).To(Equal(3))
			g.Expect(codes).To(Equal(map[Code]int{QuotaExceeded: 47}))
			c, _ := client.New(cfg, client.Options{})
			g.Expect(podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelType: workspace.TypeWorkspace})).To(HaveLen(3))
			// The ledger holds no reservation once the spawns are over.
			var ledger corev1.ConfigMap
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: LedgerName("jane@example.com")}, &ledger)).To(Succeed())
			g.Expect(ledger.Data[ledgerDataKey]).To(Equal("{}"))
			g.Expect(ledger.Labels).NotTo(HaveKey(workspace.LabelPodTemplate))
		})
	}
}

func TestQuotaCountsDistinctLiveWorkspaces(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s := New(c, c, testTemplates(t), Options{Namespace: ns, MaxPerUser: 2, ReservationTTL: time.Minute, Now: func() time.Time { return now }})
	jane := Caller{Subject: "jane"}
	res, err := s.Spawn(ctx, Request{Template: "plain", ID: "a", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred())

	// A second pod of workspace a (an upgrade in progress) counts once.
	up := res.Pod.DeepCopy()
	up.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: workspace.UpgradePodName("jane", "a", "x"), Labels: up.Labels, Annotations: up.Annotations}
	up.Spec.NodeName = ""
	g.Expect(c.Create(ctx, up)).To(Succeed())
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "b", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "c", Caller: jane})
	g.Expect(errors.Is(err, ErrQuotaExceeded)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(And(ContainSubstring("limit is 2"), ContainSubstring("a, b")))

	// Admins bypass the quota.
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "c", Owner: "jane", Caller: Caller{Subject: "root", IsAdmin: true}})
	g.Expect(err).NotTo(HaveOccurred())

	// Finished pods do not count: b fails, so jane has a and c.
	for _, id := range []string{"b", "c"} {
		pods := podsWithLabels(ctx, g, c, ns, map[string]string{workspace.LabelWorkspaceID: id})
		g.Expect(pods).To(HaveLen(1))
		pods[0].Status.Phase = corev1.PodFailed
		g.Expect(c.Status().Update(ctx, &pods[0])).To(Succeed())
	}
	// A reservation whose pod never appeared counts until it expires.
	ledgerKey := client.ObjectKey{Namespace: ns, Name: LedgerName("jane")}
	var ledger corev1.ConfigMap
	g.Expect(c.Get(ctx, ledgerKey, &ledger)).To(Succeed())
	writeReservations(&ledger, map[string]time.Time{"ghost": now.Add(-30 * time.Second)})
	g.Expect(c.Update(ctx, &ledger)).To(Succeed())
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "d", Caller: jane})
	g.Expect(errors.Is(err, ErrQuotaExceeded)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("a, ghost"))
	now = now.Add(time.Minute)
	_, err = s.Spawn(ctx, Request{Template: "plain", ID: "d", Caller: jane})
	g.Expect(err).NotTo(HaveOccurred())
}

func TestSpawnReusesTheClaimsOfARecreatedWorkspace(t *testing.T) {
	ctx, c, ns := setup(t)
	g := NewWithT(t)
	s := New(c, c, testTemplates(t), Options{Namespace: ns})
	req := Request{Template: "persistent", ID: "keep", Context: map[string]string{"repo": "r"}, Caller: Caller{Subject: "jane"}}
	res, err := s.Spawn(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Delete(ctx, res.Pod, client.GracePeriodSeconds(0))).To(Succeed())
	// envtest has no kubelet: a pod deleted with grace 0 and no node is gone at once.
	g.Eventually(func(g Gomega) { g.Expect(podsWithLabels(ctx, g, c, ns, nil)).To(BeEmpty()) }).WithTimeout(30 * time.Second).Should(Succeed())
	res2, err := s.Spawn(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res2.PVCs).To(Equal(res.PVCs))
	// Another owner's workspace whose claim name is taken cannot steal it: names differ by owner.
	g.Expect(workspace.ClaimName("bob", "keep", "home")).NotTo(Equal(res.PVCs[0]))
}
