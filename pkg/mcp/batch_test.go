package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/mcp"
)

// TestBatchesAreRefusedBeforeTheSDK: the SDK takes a request without Mcp-Protocol-Version for
// protocol version 2025-03-26, which has JSON-RPC batches, so one POST of an array ran as many
// tool calls as 1 MiB holds (thousands). Every POST whose body is an array is now refused with
// 400 before the SDK reads it, with or without a session, whatever the protocol version; every
// other body reaches the SDK whole, however much white space precedes it.
func TestBatchesAreRefusedBeforeTheSDK(t *testing.T) {
	svc, err := frontend.New(frontend.Config{Namespace: "ns", Templates: oneTemplate{}, Pods: replayInformer{benchPods(3)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(asUser(mcp.NewHandler(svc, mcp.Options{Version: "test"})))
	defer srv.Close()
	call := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"list_templates","arguments":{}}}`
	}
	// post sends body as user-0 on session (none when ""), without Mcp-Protocol-Version when
	// version is "", and returns the status and the answer.
	post := func(session, version, body string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), callBound)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer test")
		req.Header.Set("X-Test-User", "user-0")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		if version != "" {
			req.Header.Set("Mcp-Protocol-Version", version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	old := &rawClient{t: t, url: srv.URL, user: "user-0", version: "2025-03-26"}
	old.initialize()

	for _, tc := range []struct {
		name, session, version, body string
	}{
		{"2,000 calls on a 2025-03-26 session without the version header", old.session, "", "[" + strings.Repeat(call("1")+",", 1999) + call("2000") + "]"},
		{"one call on a 2025-03-26 session", old.session, "2025-03-26", "[" + call("1") + "]"},
		{"after white space", old.session, "", " \r\n\t [" + call("1") + "]"},
		{"an initialize in a batch, without a session", "", "", `[{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}]`},
		{"an empty batch", old.session, "", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(tc.session, tc.version, tc.body)
			var msg struct {
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &msg)
			if status != http.StatusBadRequest || msg.Error.Code != -32600 || !strings.Contains(msg.Error.Message, "batches are not supported") {
				t.Errorf("answered %d %.300s; want 400 with a JSON-RPC error saying batches are not supported", status, body)
			}
		})
	}
	t.Run("a single call after white space reaches the SDK whole", func(t *testing.T) {
		status, body := post(old.session, "2025-03-26", strings.Repeat(" ", 64<<10)+call("7"))
		if status != http.StatusOK || !strings.Contains(body, `"id":7`) || !strings.Contains(body, `"templates"`) {
			t.Errorf("answered %d %.300s; want the SDK's answer to call 7", status, body)
		}
	})
	t.Run("a body over the limit is the SDK's to refuse", func(t *testing.T) {
		if status, body := post(old.session, "2025-03-26", strings.Repeat(" ", mcp.MaxBodyBytes+1)+"["); status != http.StatusRequestEntityTooLarge {
			t.Errorf("answered %d %.300s; want the SDK's 413", status, body)
		}
	})
}
