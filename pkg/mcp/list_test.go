package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/mcp"
)

// adminSession serves list_workspaces from views holding n workspaces (fed as the informer's
// initial list) and connects the SDK's client to it over Streamable HTTP as an admin.
func adminSession(t *testing.T, n int) *sdk.ClientSession {
	t.Helper()
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{benchPods(n)}})
	if err != nil {
		t.Fatal(err)
	}
	admin := &auth.Caller{Subject: "root", IsAdmin: true}
	h := mcp.NewHandler(svc, mcp.Options{Version: "test"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), admin)))
	}))
	t.Cleanup(srv.Close)
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	session, err := client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: srv.URL, DisableStandaloneSSE: true, HTTPClient: &http.Client{Transport: &bearer{http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Close() })
	return session
}

// callBound bounds each call to the MCP server (connect, one tool call).
const callBound = 30 * time.Second

type page struct {
	Workspaces []frontend.Workspace `json:"workspaces"`
	Continue   string               `json:"continue"`
}

// listPage calls list_workspaces and returns its page, after checking that the text block is
// the same JSON as the structured content (what the MCP specification asks of a tool with an
// output schema), or the tool error's text.
func listPage(t *testing.T, s *sdk.ClientSession, args map[string]any) (page, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "list_workspaces", Arguments: args})
	if err != nil {
		t.Fatalf("list_workspaces %v: %v", args, err)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if res.IsError {
		return page{}, text
	}
	var fromText, fromStructured page
	if err := json.Unmarshal([]byte(text), &fromText); err != nil {
		t.Fatalf("the text block is not JSON: %v", err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &fromStructured); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromText, fromStructured) {
		t.Fatalf("the text block and the structured content differ")
	}
	return fromStructured, ""
}

// TestListWorkspacesPagesWithDefaultAndMax: an agent that calls list_workspaces without limit
// gets the first 100 workspaces and a continue value (not all 2,500, which no model's context
// holds); paging with the largest limit yields every workspace once, in id order; a limit above
// the maximum and a value that is no continue value are refused with what to do instead.
func TestListWorkspacesPagesWithDefaultAndMax(t *testing.T) {
	const n = 2500
	s := adminSession(t, n)

	first, msg := listPage(t, s, map[string]any{"allUsers": true})
	if msg != "" {
		t.Fatal(msg)
	}
	if len(first.Workspaces) != mcp.DefaultListLimit || first.Continue == "" {
		t.Fatalf("a list without limit held %d workspaces, continue %q; want %d and a continue value", len(first.Workspaces), first.Continue, mcp.DefaultListLimit)
	}

	var ids []string
	pages := 0
	args := map[string]any{"allUsers": true, "limit": mcp.MaxListLimit}
	for {
		p, msg := listPage(t, s, args)
		if msg != "" {
			t.Fatal(msg)
		}
		if pages++; pages > n/mcp.MaxListLimit+1 {
			t.Fatalf("more than %d pages for %d workspaces", pages-1, n)
		}
		if len(p.Workspaces) > mcp.MaxListLimit {
			t.Fatalf("a page held %d workspaces, more than the limit", len(p.Workspaces))
		}
		for _, w := range p.Workspaces {
			ids = append(ids, w.ID)
		}
		if p.Continue == "" {
			break
		}
		args["continue"] = p.Continue
	}
	if pages != 3 || len(ids) != n || !sort.StringsAreSorted(ids) {
		t.Fatalf("paging gave %d workspaces in %d pages (sorted: %v), want %d in 3 pages, in id order", len(ids), pages, sort.StringsAreSorted(ids), n)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("workspace %s listed twice", ids[i])
		}
	}

	for _, tc := range []struct {
		name   string
		args   map[string]any
		wantIn []string
	}{
		{"a limit above the maximum", map[string]any{"allUsers": true, "limit": mcp.MaxListLimit + 1}, []string{"limit 1001", "1 to 1000", "continue"}},
		{"a negative limit", map[string]any{"allUsers": true, "limit": -5}, []string{"limit -5", "1 to 1000"}},
		{"a workspace id as continue", map[string]any{"allUsers": true, "continue": "ws-7"}, []string{`continue "ws-7"`, "unchanged"}},
		{"the continue of every user's list without allUsers", map[string]any{"continue": first.Continue}, []string{"allUsers=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, msg := listPage(t, s, tc.args)
			for _, want := range tc.wantIn {
				if !strings.Contains(msg, want) {
					t.Errorf("list_workspaces %v answered %q; want a tool error that says %q", tc.args, msg, want)
				}
			}
		})
	}
}
