package authz

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// countingClient counts the SubjectAccessReviews sent, to prove the cache answers repeats.
type countingClient struct {
	client.Client
	creates int
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.creates++
	return c.Client.Create(ctx, obj, opts...)
}

// Against a real API server (RBAC authorizer): a RoleBinding granting create on
// workspaces.nogoo9.io in a namespace allows the bound user and the members of a bound group
// there, and nobody else, and nowhere else; a repeat question within the TTL is answered from the
// cache, a later one asks again and sees a binding removed meanwhile.
func TestMaySpawnAsksTheAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver (run without -short)")
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = "../../bin"
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest did not start (KUBEBUILDER_ASSETS=%s): %v", assets, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{"team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "spawn"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{Group}, Resources: []string{Resource}, Verbs: []string{Verb}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "spawn"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "spawn"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-a-devs"},
		}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The API server's RBAC authorizer learns of the binding through its own informer: the
	// counted questions below are asked once it knows (a question right after the create was
	// answered no once on a loaded machine).
	waitForAlice(ctx, t, c, true, "after her binding was created")
	now := time.Unix(1000, 0)
	cc := &countingClient{Client: c}
	a := &SpawnAccess{Client: cc, TTL: time.Minute, Now: func() time.Time { return now }}

	for _, tc := range []struct {
		name   string
		caller auth.Caller
		ns     string
		want   bool
	}{
		{"the bound user in the namespace", auth.Caller{Subject: "alice"}, "team-a", true},
		{"a member of the bound group", auth.Caller{Subject: "carol", Groups: []string{"team-a-devs"}}, "team-a", true},
		{"another user", auth.Caller{Subject: "bob", Groups: []string{"other"}}, "team-a", false},
		{"the bound user in another namespace", auth.Caller{Subject: "alice"}, "team-b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := a.MaySpawn(ctx, &tc.caller, tc.ns)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("MaySpawn(%s, %s) = %v (reason %q), want %v", tc.caller.Subject, tc.ns, got, reason, tc.want)
			}
		})
	}
	if cc.creates != 4 {
		t.Fatalf("%d SubjectAccessReviews for 4 distinct questions, want 4", cc.creates)
	}

	// Cached: the binding goes, the answer within the TTL stays; after it, the API server's.
	if err := c.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	// The same for the deletion, so the review after the TTL below asks a server that knows.
	waitForAlice(ctx, t, c, false, "after her binding was deleted")
	if ok, _, _ := a.MaySpawn(ctx, &auth.Caller{Subject: "alice"}, "team-a"); !ok || cc.creates != 4 {
		t.Errorf("within the TTL: allowed=%v after %d reviews, want the cached yes and no new review", ok, cc.creates)
	}
	now = now.Add(2 * time.Minute)
	if ok, _, _ := a.MaySpawn(ctx, &auth.Caller{Subject: "alice"}, "team-a"); ok || cc.creates != 5 {
		t.Errorf("after the TTL: allowed=%v after %d reviews, want a new review answering no", ok, cc.creates)
	}
}

// waitForAlice waits (30 s at most) until the API server answers allowed for alice's spawn in
// team-a, asked with a fresh cache and not counted: its RBAC authorizer sees bindings through its
// own informer, a moment after they are written.
func waitForAlice(ctx context.Context, t *testing.T, c client.Client, allowed bool, when string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		fresh := &SpawnAccess{Client: c, TTL: time.Minute}
		ok, _, err := fresh.MaySpawn(ctx, &auth.Caller{Subject: "alice"}, "team-a")
		if err == nil && ok == allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server still answers allowed=%v for alice 30 s %s (err %v)", ok, when, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groupAuthorizer stands in for the API server: it allows user alice when she is in group x, and
// counts its reviews.
type groupAuthorizer struct {
	client.Client
	creates int
}

func (g *groupAuthorizer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	g.creates++
	sar := obj.(*authorizationv1.SubjectAccessReview)
	sar.Status.Allowed = sar.Spec.User == "alice" && slices.Contains(sar.Spec.Groups, "x")
	return nil
}

// Two callers whose subject and groups run together the same way are different questions: the
// allow cached for alice in groups x and y is never the answer for subject "alice\x00x" in group
// y (nor the other way round), and each caller's repeat is answered from the cache.
func TestCachedAnswersAreNeverAnotherCallers(t *testing.T) {
	alice := &auth.Caller{Subject: "alice", Groups: []string{"y", "x"}}
	lookalike := &auth.Caller{Subject: "alice\x00x", Groups: []string{"y"}}
	for _, order := range [][]*auth.Caller{{alice, lookalike}, {lookalike, alice}} {
		g := &groupAuthorizer{}
		a := &SpawnAccess{Client: g, TTL: time.Minute, Now: func() time.Time { return time.Unix(1000, 0) }}
		for range 2 {
			for _, c := range order {
				got, _, err := a.MaySpawn(context.Background(), c, "team-a")
				if err != nil {
					t.Fatal(err)
				}
				if want := c == alice; got != want {
					t.Errorf("MaySpawn(%q, %q) = %v, want %v (asked %q first)", c.Subject, c.Groups, got, want, order[0].Subject)
				}
			}
		}
		if g.creates != 2 {
			t.Errorf("%d reviews for two callers asked twice each, want 2 (one each, then the cache)", g.creates)
		}
	}
}
