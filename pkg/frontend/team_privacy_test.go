package frontend

import (
	"context"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// TestAnotherTeamsWorkspaceIsNotFoundForAnOutsider: in a team namespace, a caller who may not
// spawn there was answered 403 "belongs to another user" for an existing id and 404 for a
// missing one, so ids could be enumerated one request each, while the team's templates are
// private to whoever may spawn there. An outsider now gets the same 404 for both; an insider
// (may spawn there) still gets 403 for another's workspace, the owner and admins get it, and
// nogoo9's own namespace answers as before.
func TestAnotherTeamsWorkspaceIsNotFoundForAnOutsider(t *testing.T) {
	access := &stubAccess{allow: map[string]bool{"team/insider": true}}
	svc := nsService(t, access, nil, podIn("team", "ws-t1", "owner", "t1"), podIn("ns", "ws-h1", "owner", "h1"))
	as := func(sub string, admin bool, ns string) context.Context {
		return WithNamespace(auth.WithCaller(context.Background(), &auth.Caller{Subject: sub, IsAdmin: admin}), ns)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		id   string
		want Code // "" is success
	}{
		{"an outsider asks for a team's existing workspace", as("outsider", false, "team"), "t1", CodeNotFound},
		{"an outsider asks for a team's missing workspace", as("outsider", false, "team"), "t9", CodeNotFound},
		{"an insider asks for another's team workspace", as("insider", false, "team"), "t1", CodeForbidden},
		{"an insider asks for a missing team workspace", as("insider", false, "team"), "t9", CodeNotFound},
		{"the owner asks for their team workspace", as("owner", false, "team"), "t1", ""},
		{"an admin asks for a team workspace", as("root", true, "team"), "t1", ""},
		{"an outsider asks for another's workspace in nogoo9's namespace", as("outsider", false, "ns"), "h1", CodeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for op, do := range map[string]func(context.Context, string) error{
				"get":     func(ctx context.Context, id string) error { _, err := svc.GetWorkspace(ctx, id); return err },
				"upgrade": func(ctx context.Context, id string) error { _, err := svc.Upgrade(ctx, id); return err },
				"delete": func(ctx context.Context, id string) error {
					if tc.want == "" {
						return nil // not deleted: the other rows use it
					}
					_, err := svc.Delete(ctx, id)
					return err
				},
			} {
				err := do(tc.ctx, tc.id)
				if CodeOf(err) != tc.want && !(tc.want == "" && err == nil) {
					t.Errorf("%s %s: %v (%s), want %q", op, tc.id, err, CodeOf(err), tc.want)
				}
				if tc.want == CodeNotFound && !strings.Contains(err.Error(), `workspace "`+tc.id+`" not found`) {
					t.Errorf("%s %s: %v, want the very not-found of a missing id", op, tc.id, err)
				}
			}
		})
	}
}
