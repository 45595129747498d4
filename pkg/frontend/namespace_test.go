package frontend

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
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
	c := fakeCache(pods...)
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

// A template is named, never addressed by its registry key: "team/python" from nogoo9's
// namespace would reach the team's template for a caller who may not spawn in team (the
// spawner's own check is TestTeamTemplates, on a real API server). Nor does the kept-version
// list of another namespace's template answer to its key.
func TestATemplateKeyReachesNoOtherNamespace(t *testing.T) {
	c := fakeCache()
	sp := &recordingSpawner{}
	svc, err := New(Config{Namespace: "ns", Namespaces: []string{"ns", "team"}, Access: &stubAccess{}, Spawner: sp, Cache: c, Client: c,
		Templates: stubTemplates{"python": "2.0", "team/python": "7.0"}, Now: func() time.Time { return t0.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	bob := auth.WithCaller(context.Background(), &auth.Caller{Subject: "bob"})
	_, err = svc.Spawn(bob, SpawnInput{Template: "team/python", ID: "x"})
	if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), `template name "team/python" is not valid`) {
		t.Errorf("spawn of team/python from ns: %v (code %q), want %s naming the template", err, CodeOf(err), CodeInvalid)
	}
	if len(sp.got) != 0 {
		t.Errorf("the refused spawn reached the spawner: %v", sp.got)
	}
	if _, err := svc.TemplateHistory(bob, "team/python"); CodeOf(err) != CodeInvalid {
		t.Errorf("history of team/python: %v (code %q), want %s", err, CodeOf(err), CodeInvalid)
	}
}

// Reading and acting address the namespace the request names: the same id in two namespaces is
// two workspaces; the owner rule holds in each; upgrade-all covers every watched namespace.
// Another namespace's templates are listed only for whoever may spawn there; nogoo9's own are
// listed for everyone.
func TestTemplatesOfAnotherNamespaceOnlyForWhoMaySpawnThere(t *testing.T) {
	access := &stubAccess{allow: map[string]bool{"team/bob": true}}
	svc := nsService(t, access, &recordingSpawner{})
	for _, tc := range []struct {
		name   string
		caller *auth.Caller
		ns     string
		want   Code
	}{
		{name: "alice lists nogoo9's templates", caller: &auth.Caller{Subject: "alice"}, ns: "ns"},
		{name: "alice may not spawn in team, so she does not see its templates", caller: &auth.Caller{Subject: "alice"}, ns: "team", want: CodeForbidden},
		{name: "bob may spawn in team and lists its templates", caller: &auth.Caller{Subject: "bob"}, ns: "team"},
		{name: "an admin lists team's templates", caller: &auth.Caller{Subject: "root", IsAdmin: true}, ns: "team"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.ListTemplates(WithNamespace(auth.WithCaller(context.Background(), tc.caller), tc.ns))
			var got Code
			if err != nil {
				got = CodeOf(err)
			}
			if got != tc.want {
				t.Fatalf("ListTemplates in %s as %s: %v (code %q), want code %q", tc.ns, tc.caller.Subject, err, got, tc.want)
			}
			if tc.want == CodeForbidden && !strings.Contains(err.Error(), "may not create workspaces in namespace team") {
				t.Errorf("the refusal should say why: %v", err)
			}
		})
	}
}

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
	// alice may not spawn in team: its workspaces are as unknown to her as its templates
	// (TestAnotherTeamsWorkspaceIsNotFoundForAnOutsider).
	if _, err := svc.GetWorkspace(WithNamespace(alice, "team"), "a"); CodeOf(err) != CodeNotFound {
		t.Errorf("alice reading bob's a in team: %v, want NotFound", err)
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

// nsServices is services over three watched namespaces ("a-team" sorts before nogoo9's "ns"):
// one Service reading nogoo9's namespace from the views, one reading every namespace per call.
func nsServices(t *testing.T, pods ...*corev1.Pod) map[string]*Service {
	t.Helper()
	return servicesWith(t, func(c *Config) { c.Namespaces = []string{"ns", "team", "a-team"} }, pods...)
}

func podIn(ns, name, owner, id string) *corev1.Pod {
	p := pod(name, owner, id, "1.0", t0, ready)
	p.Namespace = ns
	return p
}

func keysOf(ws []Workspace) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.Namespace+"/"+w.ID)
	}
	return out
}

// The kubectl-style list across namespaces: sorted by (namespace, id), the owner rule as in one
// namespace, bad combinations and continue values of the other kind of list refused with what to
// do.
func TestListAcrossNamespaces(t *testing.T) {
	pods := []*corev1.Pod{
		podIn("ns", "ws-b", "alice", "b"), podIn("ns", "ws-a", "bob", "a"),
		podIn("team", "ws-a", "alice", "a"), podIn("team", "ws-c", "bob", "c"),
		podIn("a-team", "ws-z", "alice", "z"),
		podIn("other", "ws-o", "alice", "o"), // not watched: never listed
	}
	alice := &auth.Caller{Subject: "alice"}
	admin := &auth.Caller{Subject: "root", IsAdmin: true}
	tests := []struct {
		name     string
		caller   *auth.Caller
		ns       string
		opts     ListOptions
		want     []string
		wantCode Code
		wantMsg  string
	}{
		{"a user sees their own workspaces of every watched namespace, by namespace then id", alice, "", ListOptions{AllNamespaces: true},
			[]string{"a-team/z", "ns/b", "team/a"}, "", ""},
		{"an admin sees every user's", admin, "", ListOptions{AllNamespaces: true, AllUsers: true},
			[]string{"a-team/z", "ns/a", "ns/b", "team/a", "team/c"}, "", ""},
		{"a user asking for every user's across namespaces is refused", alice, "", ListOptions{AllNamespaces: true, AllUsers: true}, nil, CodeForbidden, "only admin users"},
		{"the list of one namespace is unchanged", alice, "", ListOptions{}, []string{"ns/b"}, "", ""},
		{"a page continues in the namespace it ended in", admin, "", ListOptions{AllNamespaces: true, AllUsers: true, Continue: encodeContinueAcross(true, "ns", "a")},
			[]string{"ns/b", "team/a", "team/c"}, "", ""},
		{"a page that ended in a namespace no longer watched goes on with the next one", admin, "", ListOptions{AllNamespaces: true, AllUsers: true, Continue: encodeContinueAcross(true, "b-gone", "x")},
			[]string{"ns/a", "ns/b", "team/a", "team/c"}, "", ""},
		{"a namespace and allNamespaces together are refused", alice, "team", ListOptions{AllNamespaces: true}, nil, CodeInvalid,
			`namespace "team" and allNamespaces=true both given: give a namespace to list that one, or allNamespaces=true (and no namespace)`},
		{"nogoo9's own namespace named with allNamespaces is refused too", alice, "ns", ListOptions{AllNamespaces: true}, nil, CodeInvalid, "both given"},
		{"a continue of one namespace's list is refused by the list across namespaces", alice, "", ListOptions{AllNamespaces: true, Continue: encodeContinue(false, "b")}, nil, CodeInvalid,
			"continue belongs to a list of one namespace, not to this list across namespaces (allNamespaces=true)"},
		{"a continue of the list across namespaces is refused by one namespace's list", alice, "team", ListOptions{Continue: encodeContinueAcross(false, "ns", "b")}, nil, CodeInvalid,
			"continue belongs to a list across namespaces (allNamespaces=true), not to this list of one namespace"},
		{"a continue whose namespace is no name is refused", alice, "", ListOptions{AllNamespaces: true, Continue: "w1." + b64("own/Team_A/b")}, nil, CodeInvalid, "it holds no namespace"},
		{"a continue of the other user scope is refused", admin, "", ListOptions{AllNamespaces: true, AllUsers: true, Continue: encodeContinueAcross(false, "ns", "b")}, nil, CodeInvalid, "pass the same allUsers"},
	}
	for path, svc := range nsServices(t, pods...) {
		for _, tc := range tests {
			t.Run(path+": "+tc.name, func(t *testing.T) {
				ctx := WithNamespace(auth.WithCaller(context.Background(), tc.caller), tc.ns)
				ws, err := svc.ListWorkspaces(ctx, tc.opts)
				if tc.wantCode != "" {
					if CodeOf(err) != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
						t.Fatalf("ListWorkspaces() error %v, want code %s with %q", err, tc.wantCode, tc.wantMsg)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := keysOf(ws); strings.Join(got, " ") != strings.Join(tc.want, " ") {
					t.Errorf("ListWorkspaces() = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// Paging across namespaces with every page size lists every workspace exactly once in (namespace,
// id) order, whether a page ends inside a namespace or at its end, and the last page has no
// continue value.
func TestListAcrossNamespacesPagesEveryWorkspaceOnce(t *testing.T) {
	pods := []*corev1.Pod{
		podIn("a-team", "ws-x", "u", "x"),
		podIn("ns", "ws-a", "u", "a"), podIn("ns", "ws-b", "u", "b"), podIn("ns", "ws-c", "v", "c"),
		podIn("team", "ws-a", "v", "a"), podIn("team", "ws-b", "u", "b"),
	}
	want := "a-team/x ns/a ns/b ns/c team/a team/b"
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	for path, svc := range nsServices(t, pods...) {
		for limit := 1; limit <= len(pods)+1; limit++ {
			var got []string
			o := ListOptions{AllNamespaces: true, AllUsers: true, Limit: limit}
			for page := 0; ; page++ {
				if page > len(pods) {
					t.Fatalf("%s, limit %d: more pages than workspaces", path, limit)
				}
				l, err := svc.List(admin, o)
				if err != nil {
					t.Fatalf("%s, limit %d, page %d: %v", path, limit, page, err)
				}
				if l.Len() > limit || (l.Continue != "" && l.Len() != limit) {
					t.Errorf("%s, limit %d, page %d: %d workspaces, continue %q", path, limit, page, l.Len(), l.Continue)
				}
				got = append(got, keysOf(l.Workspaces())...)
				if l.Continue == "" {
					break
				}
				o.Continue = l.Continue
			}
			if strings.Join(got, " ") != want {
				t.Errorf("%s, limit %d: pages hold %v, want %s", path, limit, got, want)
			}
		}
	}
}

// A display name reaches every page, list and event stream that shows the workspace: one with a
// line break (which ends a line of an event stream) or of unbounded size is refused at the spawn,
// naming the problem, and creates nothing.
func TestSpawnRefusesANameWithControlCharactersOrOfUnboundedSize(t *testing.T) {
	sp := &recordingSpawner{}
	svc := nsService(t, &stubAccess{}, sp)
	bob := auth.WithCaller(context.Background(), &auth.Caller{Subject: "bob"})
	for _, tc := range []struct{ name, want string }{
		{"x\r\rretry: 2147483647\r", "control character at byte 1"},
		{strings.Repeat("n", 100_000), "is 100000 bytes long: use at most 200"},
	} {
		_, err := svc.Spawn(bob, SpawnInput{Template: "python", ID: "x", Name: tc.name})
		if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("spawn named %.40q: %v, want %s saying %q", tc.name, err, CodeInvalid, tc.want)
		}
	}
	if len(sp.got) != 0 {
		t.Errorf("a refused spawn reached the spawner: %v", sp.got)
	}
}

// stubHistory keeps every version of every template.
type stubHistory struct{}

func (stubHistory) Versions(context.Context, string) ([]templates.VersionInfo, error) {
	return nil, nil
}
func (stubHistory) Version(_ context.Context, name, version string) (*templates.Template, error) {
	return &templates.Template{Name: name, Version: version}, nil
}
func (stubHistory) AllVersions(context.Context, string) (map[string][]templates.VersionInfo, error) {
	return nil, nil
}

// A template's rollback without a namespace covers every watched namespace, as upgrade-all does:
// each workspace of nogoo9's template gets the intent and its entry names its namespace; a team
// namespace's own template of the same name is another template, and its workspaces are left
// alone; with a namespace, only that namespace's workspaces are rolled back.
func TestRollbackOfATemplateCoversEveryWatchedNamespace(t *testing.T) {
	pods := func() []*corev1.Pod {
		home := podIn("ns", "ws-a", "alice", "a")
		team := podIn("team", "ws-b", "bob", "b")
		other := podIn("a-team", "ws-c", "carol", "c")
		ownTemplate := podIn("team", "ws-d", "dan", "d")
		ownTemplate.Annotations[workspace.AnnTemplateNamespace] = "team"
		onVersion := podIn("a-team", "ws-e", "erin", "e")
		maintained := podIn("team", "ws-f", "fay", "f")
		maintained.Annotations[workspace.AnnMaintenance] = "disk"
		for _, p := range []*corev1.Pod{home, team, other, ownTemplate, maintained} {
			p.Labels[workspace.LabelTemplateVersion], p.Annotations[workspace.AnnTemplateVersion] = "2.0", "2.0"
		}
		return []*corev1.Pod{home, team, other, ownTemplate, onVersion, maintained}
	}
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	for _, path := range []string{"views", "per-call"} {
		t.Run(path, func(t *testing.T) {
			svc := servicesWith(t, func(c *Config) { c.Namespaces = []string{"ns", "team", "a-team"}; c.History = stubHistory{} }, pods()...)[path]
			res, err := svc.RollbackTemplate(admin, "python", "1.0")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resultSummary(res), "a-team/c:upgrading,ns/a:upgrading,team/b:upgrading,team/f:skipped"; got != want {
				t.Errorf("rollback of python = %v, want %s", got, want)
			}
			for _, key := range []client.ObjectKey{{Namespace: "ns", Name: "ws-a"}, {Namespace: "team", Name: "ws-b"}, {Namespace: "a-team", Name: "ws-c"}} {
				var p corev1.Pod
				if err := svc.cfg.Client.Get(admin, key, &p); err != nil || p.Annotations[workspace.AnnTargetVersion] != "1.0" {
					t.Errorf("pod %s: target version %q (%v), want 1.0", key, p.Annotations[workspace.AnnTargetVersion], err)
				}
			}
			var d corev1.Pod
			if err := svc.cfg.Client.Get(admin, client.ObjectKey{Namespace: "team", Name: "ws-d"}, &d); err != nil || d.Annotations[workspace.AnnTargetVersion] != "" {
				t.Errorf("team template's workspace d was rolled back (%v): %v", err, d.Annotations)
			}
		})
	}
	t.Run("one namespace when the request names one", func(t *testing.T) {
		svc := servicesWith(t, func(c *Config) { c.Namespaces = []string{"ns", "team", "a-team"}; c.History = stubHistory{} }, pods()...)["per-call"]
		res, err := svc.RollbackTemplate(WithNamespace(admin, "team"), "python", "1.0")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := resultSummary(res), "team/b:upgrading,team/f:skipped"; got != want {
			t.Errorf("rollback of python in team = %v, want %s", got, want)
		}
	})
	t.Run("a template key addresses no template: the rollback is refused and touches nothing", func(t *testing.T) {
		svc := servicesWith(t, func(c *Config) { c.Namespaces = []string{"ns", "team", "a-team"}; c.History = stubHistory{} }, pods()...)["per-call"]
		_, err := svc.RollbackTemplate(admin, "team/python", "1.0")
		if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), "team-b/node") {
			t.Fatalf("rollback of team/python: %v, want Invalid naming what to do", err)
		}
		var d corev1.Pod
		if err := svc.cfg.Client.Get(admin, client.ObjectKey{Namespace: "team", Name: "ws-d"}, &d); err != nil || d.Annotations[workspace.AnnTargetVersion] != "" {
			t.Errorf("team template's workspace d was rolled back (%v): %v", err, d.Annotations)
		}
	})
}

// resultSummary is "<namespace>/<id>:<status>" of each result, in order, comma-separated.
func resultSummary(res []UpgradeResult) string {
	var out []string
	for _, r := range res {
		out = append(out, r.Namespace+"/"+r.ID+":"+r.Status)
	}
	return strings.Join(out, ",")
}

// Upgrade-all's entry for a pinned workspace names its namespace, as every other entry does.
func TestUpgradeAllNamesThePinnedWorkspacesNamespace(t *testing.T) {
	pinned := podIn("team", "ws-a", "alice", "a")
	pinned.Annotations[workspace.AnnPinned] = "true"
	svc := nsService(t, nil, nil, pinned)
	res, err := svc.UpgradeAll(auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Namespace != "team" || res[0].Status != "skipped" {
		t.Errorf("upgrade-all = %+v, want team/a skipped", res)
	}
}
