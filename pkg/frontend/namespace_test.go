package frontend

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
)

// stubAccess allows the callers it lists, per namespace, and counts its questions.
type stubAccess struct {
	allow map[string]bool // namespace + "/" + subject
	asked int
}

func (a *stubAccess) MaySpawn(_ context.Context, c *auth.Caller, ns string) (bool, string, error) {
	a.asked++
	return a.allow[ns+"/"+c.Subject], "", nil
}

// recordingSpawner records the namespace of each spawn and builds its pod there.
type recordingSpawner struct{ got []string }

func (s *recordingSpawner) Spawn(_ context.Context, r SpawnRequest) (*corev1.Pod, error) {
	s.got = append(s.got, r.Namespace)
	p := pod("ws-"+r.ID, r.Owner, r.ID, "2.0", t0)
	p.Namespace = r.Namespace
	return p, nil
}

func nsService(t *testing.T, access SpawnAccess, sp Spawner, pods ...*corev1.Pod) *Service {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	objs := make([]client.Object, len(pods))
	for i, p := range pods {
		objs[i] = p.DeepCopy()
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexOwner, indexOwner).WithIndex(&corev1.Pod{}, podcache.IndexWorkspaceID, podcache.WorkspaceID).Build()
	svc, err := New(Config{Namespace: "ns", Namespaces: []string{"ns", "team"}, Access: access, Spawner: sp, Cache: c, Client: c,
		Templates: stubTemplates{"python": "2.0"}, Now: func() time.Time { return t0.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// Who may spawn where: nogoo9's namespace is open to every caller without asking; another
// watched namespace asks Access (admins excepted); an unwatched namespace is refused by name
// whoever asks; a refusal creates nothing.
func TestSpawnNamespaceRules(t *testing.T) {
	alice := &auth.Caller{Subject: "alice"}
	bob := &auth.Caller{Subject: "bob"}
	admin := &auth.Caller{Subject: "root", IsAdmin: true}
	tests := []struct {
		name      string
		caller    *auth.Caller
		pathNS    string
		bodyNS    string
		wantNS    string
		wantCode  Code
		wantMsg   string
		wantAsked int
	}{
		{"nogoo9's namespace, nobody asked", bob, "", "", "ns", "", "", 0},
		{"nogoo9's namespace named in the path", bob, "ns", "", "ns", "", "", 0},
		{"team namespace, allowed by the access check", alice, "team", "", "team", "", "", 1},
		{"team namespace named in the body (MCP)", alice, "", "team", "team", "", "", 1},
		{"team namespace, refused by the access check", bob, "team", "", "", CodeForbidden, `bob may not create workspaces in namespace team: ask its administrators for a RoleBinding`, 1},
		{"team namespace as an admin, nobody asked", admin, "team", "", "team", "", "", 0},
		{"an unwatched namespace", alice, "other", "", "", CodeNotFound, `namespace "other" is not watched by nogoo9: use one of [ns, team]`, 0},
		{"an unwatched namespace as an admin", admin, "", "other", "", CodeNotFound, `namespace "other" is not watched`, 0},
		{"a namespace that is no name", alice, "Team_A", "", "", CodeInvalid, `namespace "Team_A" is not a namespace name`, 0},
		{"path and body disagree", alice, "team", "ns", "", CodeInvalid, `differs from namespace "team" in the path`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			access := &stubAccess{allow: map[string]bool{"team/alice": true}}
			sp := &recordingSpawner{}
			svc := nsService(t, access, sp)
			ctx := WithNamespace(auth.WithCaller(context.Background(), tc.caller), tc.pathNS)
			w, err := svc.Spawn(ctx, SpawnInput{Template: "python", ID: "x", Namespace: tc.bodyNS})
			if access.asked != tc.wantAsked {
				t.Errorf("access asked %d times, want %d", access.asked, tc.wantAsked)
			}
			if tc.wantCode != "" {
				if CodeOf(err) != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("Spawn() error %v, want code %s with %q", err, tc.wantCode, tc.wantMsg)
				}
				if len(sp.got) != 0 {
					t.Errorf("a refused spawn reached the spawner: %v", sp.got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(sp.got) != 1 || sp.got[0] != tc.wantNS || w.Namespace != tc.wantNS {
				t.Errorf("spawned in %v (answer says %q), want %s", sp.got, w.Namespace, tc.wantNS)
			}
		})
	}
}

// Reading and acting address the namespace the request names: the same id in two namespaces is
// two workspaces; the owner rule holds in each; upgrade-all covers every watched namespace.
func TestWorkspacesAreAddressedPerNamespace(t *testing.T) {
	home := pod("ws-a", "alice", "a", "1.0", t0, ready)
	team := pod("ws-a", "bob", "a", "1.0", t0, ready)
	team.Namespace = "team"
	svc := nsService(t, nil, nil, home, team)
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	bob := auth.WithCaller(context.Background(), &auth.Caller{Subject: "bob"})

	if w, err := svc.GetWorkspace(alice, "a"); err != nil || w.Namespace != "ns" || w.Owner != "alice" {
		t.Errorf("alice's a in nogoo9's namespace: %+v, %v", w, err)
	}
	if w, err := svc.GetWorkspace(WithNamespace(bob, "team"), "a"); err != nil || w.Namespace != "team" || w.Owner != "bob" {
		t.Errorf("bob's a in team: %+v, %v", w, err)
	}
	if _, err := svc.GetWorkspace(WithNamespace(alice, "team"), "a"); CodeOf(err) != CodeForbidden {
		t.Errorf("alice reading bob's a in team: %v, want Forbidden", err)
	}
	if _, err := svc.GetWorkspace(WithNamespace(alice, "other"), "a"); CodeOf(err) != CodeNotFound || err == nil || !strings.Contains(err.Error(), `namespace "other" is not watched`) {
		t.Errorf("an unwatched namespace: %v", err)
	}
	l, err := svc.ListWorkspaces(WithNamespace(bob, "team"), ListOptions{})
	if err != nil || len(l) != 1 || l[0].Namespace != "team" {
		t.Errorf("bob's list in team: %+v, %v", l, err)
	}

	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	res, err := svc.UpgradeAll(admin)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res {
		got = append(got, r.Namespace+"/"+r.ID+":"+r.Status)
	}
	if strings.Join(got, ",") != "ns/a:upgrading,team/a:upgrading" {
		t.Errorf("upgrade-all = %v, want both namespaces' a upgrading", got)
	}
	res, err = svc.UpgradeAll(WithNamespace(admin, "team"))
	if err != nil || len(res) != 1 || res[0].Namespace != "team" {
		t.Errorf("upgrade-all in team only: %+v, %v", res, err)
	}
}
