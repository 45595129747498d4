package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// fastList answers a list_workspaces call without the SDK's encoder, with the bytes the SDK
// would send (as application/json, which every Streamable HTTP client accepts).
//
// Why: a page of 1,000 workspaces is about 0.4 MB of JSON, sent twice (structured content and the
// text copy). The SDK validates and compacts the whole answer three times on its way out
// (CallToolResult.MarshalJSON, jsonrpc2.NewResponse, the message encoder: encoding/json compacts
// every json.Marshaler's output) and frames it as a server-sent event: 16 ms of CPU per page
// against REST's 0.6 ms for the same workspaces. Here the answer is the views' cached JSON, its
// escaped copy, and the JSON-RPC envelope around them.
//
// Trust: the caller was authenticated by auth.Middleware and is authorized by svc.List, exactly
// as on the SDK's path (the session carries no authority). Everything else is the SDK's: this
// path takes only a request it can answer as the SDK would (a POST of one tools/call of
// list_workspaces, on a session the SDK handed this subject, with a protocol version whose answer
// has this shape, and arguments that list without a tool error) and hands anything else to the
// SDK with its body intact, so every error, and every other method, reads as it always did.
type fastList struct {
	svc *frontend.Service
}

// fastListVersions are the protocol versions whose tools/call answer fastList writes, the ones a
// session of the SDK's stateful handler negotiates that have structured content (2025-03-26 has
// none; from 2026-07-28 on, sessions give way to a stateless protocol, and results carry a
// resultType).
var fastListVersions = map[string]bool{"2025-06-18": true, "2025-11-25": true}

// fastListBuffers hold the answer's two copies between calls; a buffer that grew past
// maxPooledBuffer (an answer larger than a page of MaxListLimit) is left to the collector.
var fastListBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBuffer = 4 << 20

// serve answers r and returns true, or returns false and the request to hand to the SDK (r, its
// body restored if it was read).
func (f fastList) serve(w http.ResponseWriter, r *http.Request) (bool, *http.Request) {
	if !fastListVersions[r.Header.Get(protocolVersionHeader)] || r.Method != http.MethodPost || !acceptsJSON(r) {
		return false, r
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false, r
	}
	// Read what the SDK would accept (MaxBodyBytes); the rest, if any, stays for the SDK,
	// which refuses it as too large.
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	r2 := r.WithContext(r.Context()) // a shallow copy: only the body changes
	r2.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil || len(body) > MaxBodyBytes || !bytes.Contains(body, []byte(`"list_workspaces"`)) {
		return false, r2
	}
	id, args, ok := listCall(body)
	if !ok {
		return false, r2
	}
	b := fastListBuffers.Get().(*bytes.Buffer)
	defer putBuffer(b)
	b.Reset()
	text := fastListBuffers.Get().(*bytes.Buffer)
	defer putBuffer(text)
	text.Reset()
	if res, err := listJSON(r.Context(), f.svc, args, b, text); res != nil || err != nil {
		return false, r2 // a tool error: the SDK answers it, as it answers every error
	}

	head := `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"`
	mid := `"}],"structuredContent":`
	tail := `}}`
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+text.Len()+len(mid)+b.Len()+len(tail)))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, head)
	_, _ = w.Write(text.Bytes())
	_, _ = io.WriteString(w, mid)
	_, _ = w.Write(b.Bytes())
	_, _ = io.WriteString(w, tail)
	return true, nil
}

func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		fastListBuffers.Put(b)
	}
}

// listCall returns the id and arguments of body when it is exactly one JSON-RPC 2.0 request
// calling list_workspaces, with no member the SDK would read differently: keys are matched
// exactly (encoding/json's struct decoding would also take "Method"), the id is a string or an
// integer, params holds only name, arguments and _meta.
func listCall(body []byte) (id, args json.RawMessage, ok bool) {
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || len(msg) != 4 {
		return nil, nil, false
	}
	var version, method string
	var params map[string]json.RawMessage
	if json.Unmarshal(msg["jsonrpc"], &version) != nil || version != "2.0" ||
		json.Unmarshal(msg["method"], &method) != nil || method != "tools/call" ||
		json.Unmarshal(msg["params"], &params) != nil || !plainID(msg["id"]) {
		return nil, nil, false
	}
	var name string
	if json.Unmarshal(params["name"], &name) != nil || name != "list_workspaces" {
		return nil, nil, false
	}
	for k := range params {
		if k != "name" && k != "arguments" && k != "_meta" {
			return nil, nil, false
		}
	}
	args = params["arguments"]
	if string(args) == "null" {
		args = nil
	}
	return msg["id"], args, true
}

// plainID reports whether id is a JSON string or integer, which the answer repeats as sent.
func plainID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		var s string
		return json.Unmarshal(id, &s) == nil
	}
	_, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil
}

// acceptsJSON reports whether the client takes both answers of the Streamable HTTP transport
// (the SDK refuses a POST that does not), and so application/json.
func acceptsJSON(r *http.Request) bool {
	jsonOK, streamOK := false, false
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(mt)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

type readCloser struct {
	io.Reader
	io.Closer
}
