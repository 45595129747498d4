package mcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestToolInputErrorsSayWhatWasGivenAndWhatToDo: a refused tool input is named in the error with
// the value given, and the error says what to give instead.
func TestToolInputErrorsSayWhatWasGivenAndWhatToDo(t *testing.T) {
	ws := newWorkspaceServer(t, nil, nil)
	s := ws.connect(t, nil)
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       []string
	}{
		{"a template without a version", "upgrade_all_workspaces", map[string]any{"template": "node"},
			[]string{`template "node" was given without version`, "add the kept version", "or give neither"}},
		{"a version without a template", "upgrade_all_workspaces", map[string]any{"version": "1.2.0"},
			[]string{`version "1.2.0" was given without template`, "add the template", "or give neither"}},
		{"a 500 KB template without a version is quoted by its start", "upgrade_all_workspaces", map[string]any{"template": strings.Repeat("t", 500_000)},
			[]string{"(500000 bytes) was given without version"}},
		{"a follow timeout past the longest", "get_workspace_events", map[string]any{"id": "ws-0", "timeoutSeconds": 301},
			[]string{"timeoutSeconds is 301", "from 1 to 300", "the default, 60"}},
		{"a negative follow timeout", "get_workspace_events", map[string]any{"id": "ws-0", "timeoutSeconds": -5},
			[]string{"timeoutSeconds is -5", "from 1 to 300"}},
		// time.Duration(s)*time.Second overflowed before the range check: 9223372037 s wrapped
		// to a negative duration and was accepted.
		{"a follow timeout whose nanoseconds overflow int64", "get_workspace_events", map[string]any{"id": "ws-0", "timeoutSeconds": int64(9223372037)},
			[]string{"timeoutSeconds is 9223372037", "from 1 to 300"}},
		{"a follow timeout of a year", "get_workspace_events", map[string]any{"id": "ws-0", "timeoutSeconds": 31_536_000},
			[]string{"timeoutSeconds is 31536000", "from 1 to 300"}},
		// Options of a follow on a call that does not follow were ignored: the caller who meant
		// to wait for UpgradeSucceeded read the past events and went on.
		{"until without follow", "get_workspace_events", map[string]any{"id": "ws-0", "until": []string{"UpgradeSucceeded"}},
			[]string{"until given without follow: true", "add follow: true", "leave until out"}},
		{"a timeout without follow", "get_workspace_events", map[string]any{"id": "ws-0", "timeoutSeconds": 30, "until": []string{"UpgradeFailed"}},
			[]string{"until and timeoutSeconds given without follow: true"}},
		// The namespace was formatted with %q before it was validated: the whole 500 KB came back.
		{"a 500 KB namespace with allNamespaces is quoted by its start", "list_workspaces", map[string]any{"namespace": strings.Repeat("n", 500_000), "allNamespaces": true},
			[]string{"(500000 bytes)", "allNamespaces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := callTool(t, s, tc.tool, tc.args, nil)
			if got == "" || len(got) > 400 {
				t.Fatalf("%s answered %.300q (%d bytes), want a short error", tc.tool, got, len(got))
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%s error %q does not contain %q", tc.tool, got, w)
				}
			}
		})
	}
}

// TestListWorkspacesNamesEveryPhase: the list tool's description, which is what an agent knows of
// the phases, names each of them.
func TestListWorkspacesNamesEveryPhase(t *testing.T) {
	s := newWorkspaceServer(t, nil, nil).connect(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name != "list_workspaces" {
			continue
		}
		for _, p := range []workspace.PhaseName{workspace.PhaseScheduling, workspace.PhaseInitializing, workspace.PhaseReady,
			workspace.PhaseUpgrading, workspace.PhaseUnavailable, workspace.PhaseFailed, workspace.PhaseTerminating, workspace.PhaseStopped} {
			if !strings.Contains(tool.Description, string(p)) {
				t.Errorf("list_workspaces's description does not name phase %s: %s", p, tool.Description)
			}
		}
		return
	}
	t.Fatal("the server lists no list_workspaces tool")
}
