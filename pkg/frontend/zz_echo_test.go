package frontend

import (
	"context"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// An error never echoes an oversized input whole: a 500 KB template name, namespace or until
// value gets an error that names the field and quotes only the start, marked as cut.
func TestOversizedInputsGetShortErrors(t *testing.T) {
	svc, err := New(Config{Namespace: "ns", Namespaces: []string{"ns", "team"}, Cache: fakeCache(), Client: fakeCache(), Templates: stubTemplates{"python": "2.0"}})
	if err != nil {
		t.Fatal(err)
	}
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	for _, big := range []string{strings.Repeat("\x01", 500_000), strings.Repeat("-", 500_000), strings.Repeat("é", 250_000)} {
		for _, tc := range []struct {
			field string
			call  func() error
		}{
			{"template", func() error { _, err := svc.Spawn(alice, SpawnInput{Template: big}); return err }},
			{"template", func() error { _, err := svc.TemplateHistory(alice, big); return err }},
			{"template", func() error { _, err := svc.RollbackTemplate(admin, big, "1.0"); return err }},
			{"namespace", func() error { _, err := svc.GetWorkspace(WithNamespace(alice, big), "a1"); return err }},
			{"namespace", func() error { _, err := svc.ListWorkspaces(WithNamespace(alice, big), ListOptions{}); return err }},
			{"until", func() error { _, err := ParseUntil([]string{big}); return err }},
			{"until", func() error { _, err := ParseUntil([]string{"UpgradeSucceeded," + big}); return err }},
		} {
			err := tc.call()
			if err == nil || CodeOf(err) != CodeInvalid {
				t.Fatalf("%s of %d bytes: err = %v, want Invalid", tc.field, len(big), err)
			}
			msg := err.Error()
			if len(msg) >= 1024 || !strings.Contains(msg, tc.field) || !strings.Contains(msg, "...") {
				t.Errorf("%s of %d bytes: a %d-byte error that must name %s and quote a cut start: %.300q", tc.field, len(big), len(msg), tc.field, msg)
			}
		}
	}
}
