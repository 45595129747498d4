package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// rawCall calls tool with arguments given as raw JSON (keys in any case, or twice, as a client
// may send them) and returns the tool error text ("" when the call succeeded).
func rawCall(t *testing.T, s *sdk.ClientSession, tool, args string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
	if err != nil {
		return "protocol error: " + err.Error()
	}
	if res.IsError {
		return res.Content[0].(*sdk.TextContent).Text
	}
	return ""
}

// TestListWorkspacesRefusesArgumentsItsSchemaDoesNot: list_workspaces's input schema says
// additionalProperties: false with exact property names, but its arguments were decoded with
// encoding/json, which matches names in any case and keeps the last of two: {"LIMIT":1} listed
// one workspace and {"limit":1,"limit":2} two. Such arguments are refused, naming the key.
func TestListWorkspacesRefusesArgumentsItsSchemaDoesNot(t *testing.T) {
	s := newWorkspaceServer(t, nil, nil).connect(t, nil)
	for _, tc := range []struct{ name, args, want string }{
		{"a known argument in upper case", `{"ALLUSERS":true}`, `"ALLUSERS"`},
		{"a limit in upper case", `{"LIMIT":1}`, `"LIMIT"`},
		{"a namespace in title case", `{"Namespace":"ns"}`, `"Namespace"`},
		{"a limit given twice", `{"limit":1,"limit":2}`, `"limit" is given twice`},
		{"an unknown argument", `{"owner":"user-0"}`, `"owner"`},
		{"a 500 KB argument name", `{"` + strings.Repeat("k", 500_000) + `":1}`, "(500000 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rawCall(t, s, "list_workspaces", tc.args)
			if got == "" || len(got) > 600 || !strings.Contains(got, tc.want) {
				t.Fatalf("list_workspaces %.80s answered %.300q (%d bytes), want a short error naming %s", tc.args, got, len(got), tc.want)
			}
		})
	}
	if got := rawCall(t, s, "list_workspaces", `{"limit":1,"allNamespaces":false}`); got != "" {
		t.Errorf("list_workspaces with exact arguments: %s", got)
	}
}

// TestSetWorkspaceMaintenanceRefusesABlankReason: REST refuses a reason of only blanks, but MCP's
// set_workspace_maintenance took the workspace out of service with "   " as its reason. A blank
// reason is refused and nothing is written; an empty one still puts the workspace back.
func TestSetWorkspaceMaintenanceRefusesABlankReason(t *testing.T) {
	ws := newWorkspaceServer(t, nil, func(ws *workspaceServer) { ws.caller = &auth.Caller{Subject: "root", IsAdmin: true} })
	s := ws.connect(t, nil)
	id := ws.pod.Labels[workspace.LabelWorkspaceID]
	before := livePod(t, ws)
	for _, reason := range []string{"   ", " \t\n "} {
		got := callTool(t, s, "set_workspace_maintenance", map[string]any{"id": id, "reason": reason}, nil)
		if !strings.Contains(got, "reason") || !strings.Contains(got, "blank") {
			t.Errorf("set_workspace_maintenance with reason %q answered %q, want an error saying the reason is blank", reason, got)
		}
	}
	if after := livePod(t, ws); after.ResourceVersion != before.ResourceVersion || after.Annotations[workspace.AnnMaintenance] != "" {
		t.Errorf("a refused maintenance changed the pod: %v", after.Annotations)
	}
	if got := callTool(t, s, "set_workspace_maintenance", map[string]any{"id": id, "reason": ""}, nil); got != "" {
		t.Errorf("an empty reason (back into service): %s", got)
	}
}

func livePod(t *testing.T, ws *workspaceServer) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := ws.k8s.Get(context.Background(), client.ObjectKeyFromObject(ws.pod), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}
