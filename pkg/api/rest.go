package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// Routes are the REST API's routes, as net/http patterns ("METHOD /path/{var}"). Tests build
// their tables from this list, so a new route without a test row fails them.
func Routes() []string {
	out := make([]string, 0, 2*len(routes))
	for _, r := range allRoutes() {
		out = append(out, r.pattern)
	}
	return out
}

// namespacedPrefix is where the routes that address a namespace live: every workspace route,
// upgrade-all and the template list (what a spawn there can use) again under
// /api/v1/namespaces/{ns}/; the routes without it address nogoo9's own
// namespace (upgrade-all: every watched namespace), as they did before namespaces existed.
const namespacedPrefix = "/api/v1/namespaces/{ns}/"

// allRoutes is routes plus, for each workspace route, upgrade-all and the template list, its namespaced twin.
func allRoutes() []route {
	out := append([]route(nil), routes...)
	for _, r := range routes {
		method, path, _ := strings.Cut(r.pattern, " ")
		tail, ok := strings.CutPrefix(path, "/api/v1/")
		if !ok || !(strings.HasPrefix(tail, "workspaces") || tail == "upgrade-all" || tail == "templates") {
			continue
		}
		twin := r
		twin.pattern = method + " " + namespacedPrefix + tail
		h := r.handler
		twin.handler = func(x *rest, w http.ResponseWriter, req *http.Request) {
			h(x, w, req.WithContext(frontend.WithNamespace(req.Context(), req.PathValue("ns"))))
		}
		out = append(out, twin)
	}
	return out
}

type route struct {
	pattern string
	handler func(*rest, http.ResponseWriter, *http.Request)
	// body: the route reads a JSON body (decode). A route without one refuses any body but a
	// blank one or {} (noBody): a field it would ignore must not be taken for honoured.
	body bool
	// query are the query parameters the route takes, each at most once (those in queryLists
	// may repeat); any other is refused (checkQuery), in any case, so a misspelled one is never
	// silently ignored.
	query []string
}

// A route's body, as routes write it.
const (
	withBody = true
	noBody   = false
)

var routes = []route{
	{"GET /api/v1/whoami", (*rest).whoami, noBody, nil},
	{"GET /api/v1/templates", (*rest).listTemplates, noBody, nil},
	{"GET /api/v1/workspaces", (*rest).listWorkspaces, noBody, []string{"all", "allNamespaces", "limit", "continue"}},
	{"POST /api/v1/workspaces", (*rest).spawn, withBody, nil},
	{"GET /api/v1/workspaces/{id}", (*rest).get, noBody, nil},
	{"DELETE /api/v1/workspaces/{id}", (*rest).delete, noBody, nil},
	{"POST /api/v1/workspaces/{id}/upgrade", (*rest).upgrade, noBody, []string{"dryRun", "version"}},
	{"GET /api/v1/workspaces/{id}/events", (*rest).events, noBody, []string{"follow", "timeout", "until"}},
	{"PUT /api/v1/workspaces/{id}/maintenance", (*rest).setMaintenance, withBody, nil},
	{"DELETE /api/v1/workspaces/{id}/maintenance", (*rest).clearMaintenance, noBody, nil},
	{"POST /api/v1/upgrade-all", (*rest).upgradeAll, noBody, nil},
	{"POST /api/v1/workspaces/{id}/stop", (*rest).stop, noBody, nil},
	{"POST /api/v1/workspaces/{id}/start", (*rest).start, noBody, nil},
	{"PUT /api/v1/workspaces/{id}/pin", (*rest).pin, noBody, nil},
	{"DELETE /api/v1/workspaces/{id}/pin", (*rest).unpin, noBody, nil},
	{"PUT /api/v1/workspaces/{id}/update-policy", (*rest).setUpdatePolicy, withBody, nil},
	{"DELETE /api/v1/workspaces/{id}/update-policy", (*rest).clearUpdatePolicy, noBody, nil},
	{"GET /api/v1/templates/{name}/history", (*rest).templateHistory, noBody, nil},
	{"POST /api/v1/templates/{name}/rollback", (*rest).rollbackTemplate, withBody, nil},
}

// queryLists are the query parameters that may be given more than once (until=A&until=B).
var queryLists = []string{"until"}

// serve is r's handler behind the checks every route shares: its query parameters
// (checkQuery), and for a write route without a body, that none was sent (refuseBody). A refusal
// is a 400 before the handler runs, so nothing is written.
func (r route) serve(h *rest, w http.ResponseWriter, req *http.Request) {
	write := req.Method != http.MethodGet && req.Method != http.MethodHead
	if err := checkQuery(req, r.query, write); err != nil {
		writeError(w, req, err)
		return
	}
	if write && !r.body {
		if err := refuseBody(w, req, r.query); err != nil {
			writeError(w, req, err)
			return
		}
	}
	r.handler(h, w, req)
}

// checkQuery refuses req unless each of its query parameters is one of accepted, spelled
// exactly, and given once (queryLists excepted). write adds that nothing was changed.
func checkQuery(req *http.Request, accepted []string, write bool) error {
	if req.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("the query %s is not valid: %s", workspace.Quote(req.URL.RawQuery), strings.TrimPrefix(err.Error(), "invalid URL escape "))}
	}
	nothing := ""
	if write {
		nothing = "; nothing was changed"
	}
	names := slices.Sorted(maps.Keys(q))
	for _, k := range names {
		if !slices.Contains(accepted, k) {
			for _, a := range accepted {
				if strings.EqualFold(a, k) {
					return &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("query parameter %s is not known: parameter names are case-sensitive, use %q%s", workspace.Quote(k), a, nothing)}
				}
			}
			takes := "this endpoint takes no query parameters"
			if len(accepted) > 0 {
				takes = "this endpoint takes " + strings.Join(accepted, ", ")
			}
			return &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("query parameter %s is not known: %s (see docs/api.md)%s", workspace.Quote(k), takes, nothing)}
		}
		if len(q[k]) > 1 && !slices.Contains(queryLists, k) {
			return &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("query parameter %s is given twice: give it once%s", workspace.Quote(k), nothing)}
		}
	}
	return nil
}

// queryExample is a value of query parameter p as an error suggests it.
func queryExample(p string) string {
	switch p {
	case "dryRun", "follow", "all", "allNamespaces":
		return "true"
	case "version":
		return "V"
	}
	return "..."
}

// refuseBody refuses a request to a route that takes no body when it carries one (at most
// MaxBodyBytes are read): anything but blanks or an empty JSON object is a 400 naming the body's
// first field, and, when that field is one of the route's query parameters (query), how to give it.
func refuseBody(w http.ResponseWriter, r *http.Request, query []string) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("request body is larger than %d bytes, and this endpoint takes no body: send none", MaxBodyBytes)}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
		tok, err = dec.Token()
		if err == nil && tok == json.Delim('}') {
			if _, err := dec.Token(); errors.Is(err, io.EOF) {
				return nil // {}: no field, nothing ignored
			}
		}
		if k, ok := tok.(string); err == nil && ok {
			msg := fmt.Sprintf("request body field %s is not known: this endpoint takes no body", workspace.Quote(k))
			for _, p := range query {
				if strings.EqualFold(p, k) {
					msg += " (use ?" + p + "=" + queryExample(p) + ")"
				}
			}
			return &frontend.Error{Code: frontend.CodeInvalid, Message: msg + "; nothing was changed"}
		}
	}
	return &frontend.Error{Code: frontend.CodeInvalid, Message: "request body is given, but this endpoint takes no body: send none (see docs/api.md); nothing was changed"}
}

// NewREST returns the /api/v1 handler. It expects the caller in the request context (wrap it with
// auth.Middleware, which reads only the Authorization header). Every answer is Cache-Control:
// no-store (noStore).
func NewREST(svc *frontend.Service) http.Handler { return newREST(svc, 0) }

// DefaultFollowHeartbeat is how long a REST event follow waits without news before it writes a
// heartbeat, an SSE comment (": ping") that clients ignore. The write to a client that vanished
// without closing its connection fails, which ends the follow and frees its place among its
// user's follows instead of holding it until its timeout (up to frontend.MaxFollow); MCP's
// follow does the same (mcp.DefaultFollowHeartbeat).
const DefaultFollowHeartbeat = 15 * time.Second

// newREST is NewREST with a follow heartbeat interval (DefaultFollowHeartbeat when 0).
func newREST(svc *frontend.Service, heartbeat time.Duration) http.Handler {
	if heartbeat <= 0 {
		heartbeat = DefaultFollowHeartbeat
	}
	h := &rest{svc: svc, heartbeat: heartbeat}
	mux := http.NewServeMux()
	for _, r := range allRoutes() {
		mux.HandleFunc(r.pattern, func(w http.ResponseWriter, req *http.Request) { r.serve(h, w, req) })
	}
	// A path no route matches with this method: 405 naming the methods the path has, else 404.
	// The routes' patterns carry methods, so without this catch-all net/http would answer 405
	// itself, in plain text; with it, the catch-all is the only match and must tell them apart.
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{
				Error: fmt.Sprintf("method %s is not allowed on %s: use %s (see docs/api.md)", r.Method, quotePath(r.URL.Path), strings.Join(allow, ", ")),
				Code:  CodeMethodNotAllowed})
			return
		}
		writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no endpoint %s %s: see docs/api.md", r.Method, quotePath(r.URL.Path)), Code: string(frontend.CodeNotFound)})
	})
	return noStore(mux)
}

// quotePath is a request's path as an error shows it: as it is when printable and no longer
// than maxShownPath, else quoted and cut (workspace.Quote): an error never echoes an oversized
// path whole.
func quotePath(p string) string {
	if len(p) <= maxShownPath && strconv.CanBackquote(p) {
		return p
	}
	return workspace.Quote(p)
}

// maxShownPath is room for the longest path of a route with real names (a 63-character
// namespace, a 40-character id).
const maxShownPath = 160

// probedMethods are the methods allowedMethods tries, in the order an Allow header lists them.
var probedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists the methods for which mux has a route of r's path (a GET route serves HEAD
// too, as net/http does), asking mux itself so that the answer never drifts from the routes.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range probedMethods {
		probe := r.WithContext(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/api/v1/" {
			out = append(out, m)
		}
	}
	return out
}

type rest struct {
	svc       *frontend.Service
	heartbeat time.Duration // a follow's wait without news before a heartbeat
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// CodeUnavailable is the error code of a request that failed because the Kubernetes API server
// could not be reached or did not answer in time (HTTP 503 with Retry-After).
const CodeUnavailable = "Unavailable"

// CodeMethodNotAllowed is the error code of a request whose path exists with other methods only
// (HTTP 405 with Allow).
const CodeMethodNotAllowed = "MethodNotAllowed"

// msgUnavailable is what the caller reads then.
const msgUnavailable = frontend.MsgUnavailable + " (GET /api/v1/workspaces/<id> shows whether it took effect)"

// retryAfterSeconds is the Retry-After of a 503.
const retryAfterSeconds = "5"

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := frontend.CodeOf(err)
	if code == frontend.CodeUnavailable {
		ctrl.LoggerFrom(r.Context()).Info("request failed: the API server is unavailable", "method", r.Method, "path", r.URL.Path, "error", err.Error())
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: msgUnavailable, Code: CodeUnavailable})
		return
	}
	msg := err.Error()
	if code == frontend.CodeInternal {
		ctrl.LoggerFrom(r.Context()).Error(err, "request failed", "method", r.Method, "path", r.URL.Path)
		var fe *frontend.Error
		if !errors.As(err, &fe) {
			msg = "internal error; try again"
		}
	}
	status := code.HTTPStatus()
	writeJSON(w, status, errorBody{Error: msg, Code: string(code)})
}

// decode reads a JSON body of at most MaxBodyBytes into v, as docs/api.md says it is read: one
// JSON object and nothing after it, its fields spelled exactly as v's JSON names and each given
// once, and no key twice in any object inside it (checkKeys: encoding/json alone would take
// "TEMPLATE" for template, keep the last of two, and stop reading at the end of the object).
// Every refusal is CodeInvalid and names what is wrong.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	invalid := func(msg string) error { return &frontend.Error{Code: frontend.CodeInvalid, Message: msg} }
	tooBig := func(err error) bool {
		var e *http.MaxBytesError
		return errors.As(err, &e)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		switch {
		case tooBig(err):
			return invalid(fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes))
		case errors.Is(err, io.EOF):
			return invalid("request body is empty: send a JSON object")
		default:
			return invalid("request body is not valid JSON for this endpoint: " + err.Error())
		}
	}
	// Token, unlike More, sees a stray "}" or "]" after the object.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if tooBig(err) {
			return invalid(fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes))
		}
		return invalid("request body has data after the JSON object: send exactly one object")
	}
	if err := checkKeys(raw, jsonFields(v)); err != nil {
		return err
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return invalid(typeError(typ, v))
		}
		return invalid("request body is not valid JSON for this endpoint: " + err.Error())
	}
	return nil
}

// typeError says which field of a body has a value of the wrong JSON type, by the field's JSON
// name and with the type to give: encoding/json's own message names the Go struct and type
// ("cannot unmarshal number into Go struct field SpawnInput.template of type string").
func typeError(e *json.UnmarshalTypeError, v any) string {
	got, _, _ := strings.Cut(e.Value, " ") // "number", "number 300" (out of range), "string", "array", ...
	if e.Field == "" {
		return fmt.Sprintf("request body is %s: send a JSON object", withArticle(got))
	}
	field := "request body field " + workspace.Quote(e.Field)
	// encoding/json names the map or list, not the element, when an element has the wrong type.
	if ft := fieldType(reflect.TypeOf(v), e.Field); ft != nil && ft != e.Type {
		switch ft.Kind() {
		case reflect.Map, reflect.Slice, reflect.Array:
			return fmt.Sprintf("%s has %s among its values: give each as %s", field, withArticle(got), strings.TrimPrefix(jsonKind(e.Type), "an object of "))
		}
	}
	return fmt.Sprintf("%s is %s: give %s", field, withArticle(got), jsonKind(e.Type))
}

// fieldType is the type of the field at path (JSON names joined by dots) inside t, or nil.
func fieldType(t reflect.Type, path string) reflect.Type {
	for seg := range strings.SplitSeq(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			return nil
		}
		t = jsonField(t, seg)
	}
	return t
}

// jsonField is the type of struct t's field whose JSON name is name (embedded structs
// included), or nil.
func jsonField(t reflect.Type, name string) reflect.Type {
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			if ft := jsonField(f.Type, name); ft != nil {
				return ft
			}
		case tag == name || tag == "" && f.Name == name:
			return f.Type
		}
	}
	return nil
}

// jsonKind is the JSON value that decodes into t, as a user would write it.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number that fits"
	case reflect.Map:
		return "an object of " + strings.TrimPrefix(jsonKind(t.Elem()), "a ") + " values"
	case reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another value"
}

// withArticle names a JSON type as encoding/json reports it ("string", "number", "bool",
// "array", "object") in a sentence.
func withArticle(jsonType string) string {
	switch jsonType {
	case "array", "object":
		return "an " + jsonType
	case "bool":
		return "a boolean"
	case "":
		return "a value of another type"
	}
	return "a " + jsonType
}

// checkKeys refuses body (one valid JSON value, at most MaxBodyBytes) unless it is an object
// whose keys are among fields, spelled exactly (any key when fields is nil), with no key twice
// in it or in any object inside it.
func checkKeys(body []byte, fields []string) error {
	invalid := func(format string, a ...any) error {
		return &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf(format, a...)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a number too large for a float64 is still JSON
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return invalid("request body is not a JSON object: send one object with the fields docs/api.md lists for this endpoint")
	}
	// value is an object or array being read: the field it is the value of (a path such as
	// "context", "" at the top), and for an object its keys so far and whether a key comes next.
	type value struct {
		path    string
		keys    map[string]bool // nil: an array
		wantKey bool
		last    string // the latest key
	}
	inner := func(v *value) string {
		switch {
		case v.keys == nil:
			return v.path + "[]"
		case v.path == "":
			return v.last
		default:
			return v.path + "." + v.last
		}
	}
	stack := []*value{{keys: map[string]bool{}, wantKey: true}}
	for len(stack) > 0 {
		tok, err := dec.Token()
		if err != nil { // decode read body as one value already
			return invalid("request body is not valid JSON for this endpoint: %v", err)
		}
		top := stack[len(stack)-1]
		if tok == json.Delim('}') || tok == json.Delim(']') {
			stack = stack[:len(stack)-1]
			if n := len(stack); n > 0 && stack[n-1].keys != nil {
				stack[n-1].wantKey = true
			}
			continue
		}
		if top.keys != nil && top.wantKey {
			k, _ := tok.(string)
			if len(stack) == 1 && fields != nil && !slices.Contains(fields, k) {
				for _, f := range fields {
					if strings.EqualFold(f, k) {
						return invalid("request body field %s is not known: field names are case-sensitive, use %q", workspace.Quote(k), f)
					}
				}
				return invalid("request body field %s is not known: this endpoint takes %s", workspace.Quote(k), strings.Join(fields, ", "))
			}
			if top.keys[k] {
				if len(stack) == 1 {
					return invalid("request body gives field %s twice: give each field once", workspace.Quote(k))
				}
				return invalid("request body gives key %s twice in %s: give each key once", workspace.Quote(k), workspace.Quote(top.path))
			}
			top.keys[k], top.wantKey, top.last = true, false, k
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &value{path: inner(top), keys: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &value{path: inner(top)})
		default:
			top.wantKey = top.keys != nil
		}
	}
	return nil
}

// jsonFields are the JSON names of the fields of the struct v points to (nil when it is not a
// struct): what a body for v may hold, spelled exactly so.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	var out []string
	var add func(reflect.Type)
	add = func(t reflect.Type) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-" && f.Tag.Get("json") == "-":
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				add(f.Type)
			case !f.IsExported():
			case name == "":
				out = append(out, f.Name)
			default:
				out = append(out, name)
			}
		}
	}
	add(t.Elem())
	return out
}

func (h *rest) whoami(w http.ResponseWriter, r *http.Request) {
	c, _ := auth.CallerFrom(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"subject": c.Subject, "groups": c.Groups, "isAdmin": c.IsAdmin,
		"namespace": h.svc.HomeNamespace(), "namespaces": h.svc.Namespaces()})
}

func (h *rest) listTemplates(w http.ResponseWriter, r *http.Request) {
	t, err := h.svc.ListTemplates(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templates": t})
}

func (h *rest) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	all, err := boolParam(r, "all")
	if err != nil {
		writeError(w, r, err)
		return
	}
	across, err := boolParam(r, "allNamespaces")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if ns := r.PathValue("ns"); across && ns != "" {
		writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("allNamespaces=true lists every watched namespace, but the path names namespace %s: use GET /api/v1/workspaces?allNamespaces=true, or drop allNamespaces to list that namespace only", workspace.Quote(ns))})
		return
	}
	o := frontend.ListOptions{AllUsers: all, AllNamespaces: across, Continue: r.URL.Query().Get("continue")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("limit=%s is not a positive number: give the most workspaces per page, e.g. 500", workspace.Quote(v))})
			return
		}
		o.Limit = n
	}
	list, err := h.svc.List(r.Context(), o)
	if err != nil {
		writeError(w, r, err)
		return
	}
	// Encoded straight to the response from the views' cached JSON: no []Workspace, no reflection.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, `{"workspaces":`); err != nil {
		return
	}
	if err := list.WriteJSON(w); err != nil {
		return
	}
	tail := "}\n"
	if list.Continue != "" {
		tail = `,"continue":` + strconv.Quote(list.Continue) + "}\n"
	}
	_, _ = io.WriteString(w, tail)
}

func (h *rest) spawn(w http.ResponseWriter, r *http.Request) {
	var in frontend.SpawnInput
	if err := decode(w, r, &in); err != nil {
		writeError(w, r, err)
		return
	}
	ws, err := h.svc.Spawn(r.Context(), in)
	if err != nil {
		writeError(w, r, err)
		return
	}
	loc := "/api/v1/workspaces/" + ws.ID
	if ws.Namespace != "" && ws.Namespace != h.svc.HomeNamespace() {
		loc = "/api/v1/namespaces/" + ws.Namespace + "/workspaces/" + ws.ID
	}
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, ws)
}

func (h *rest) get(w http.ResponseWriter, r *http.Request) {
	ws, err := h.svc.GetWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (h *rest) delete(w http.ResponseWriter, r *http.Request) {
	res, err := h.svc.Delete(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

func (h *rest) upgrade(w http.ResponseWriter, r *http.Request) {
	if h.upgradeWith(w, r) {
		return
	}
	res, err := h.svc.Upgrade(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.Status == "upToDate" {
		status = http.StatusOK
	}
	writeJSON(w, status, res)
}

func (h *rest) upgradeAll(w http.ResponseWriter, r *http.Request) {
	res, err := h.svc.UpgradeAll(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"upgrades": res})
}

type maintenanceBody struct {
	Reason string `json:"reason"`
}

func (h *rest) setMaintenance(w http.ResponseWriter, r *http.Request) {
	var in maintenanceBody
	if err := decode(w, r, &in); err != nil {
		writeError(w, r, err)
		return
	}
	if strings.TrimSpace(in.Reason) == "" {
		writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: "reason is empty: say why the workspace is out of service (DELETE clears maintenance)"})
		return
	}
	ws, err := h.svc.SetMaintenance(r.Context(), r.PathValue("id"), in.Reason)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (h *rest) clearMaintenance(w http.ResponseWriter, r *http.Request) {
	ws, err := h.svc.SetMaintenance(r.Context(), r.PathValue("id"), "")
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

// Bounds of an events follow's timeout parameter.
const (
	defaultFollow = time.Minute
	minFollow     = time.Second
)

// followTimeout reads an events follow's timeout parameter: empty is defaultFollow; else a
// duration from minFollow to frontend.MaxFollow (docs/api.md gives the bounds in seconds and
// minutes, so a shorter one is refused rather than rounded).
func followTimeout(v string) (time.Duration, error) {
	if v == "" {
		return defaultFollow, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minFollow || d > frontend.MaxFollow {
		return 0, &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("timeout=%s is not a duration from %s to %s: give one such as 90s, or leave it out for the default, %s",
			workspace.Quote(v), minFollow, frontend.MaxFollow, defaultFollow)}
	}
	return d, nil
}

// events answers with a JSON list, or with follow=true a Server-Sent Events stream: every past
// event, then new ones as they happen, until timeout (default 60s, at most frontend.MaxFollow),
// until an event whose reason is listed in until=Reason1,Reason2 arrives, or until the client
// goes away.
func (h *rest) events(w http.ResponseWriter, r *http.Request) {
	follow, err := boolParam(r, "follow")
	if err != nil {
		writeError(w, r, err)
		return
	}
	timeout, err := followTimeout(r.URL.Query().Get("timeout"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	until, err := frontend.ParseUntil(r.URL.Query()["until"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	var given []string
	for _, p := range []string{"until", "timeout"} {
		if r.URL.Query().Has(p) {
			given = append(given, p)
		}
	}
	if err := frontend.FollowOnly(follow, "follow=true", given...); err != nil {
		writeError(w, r, err)
		return
	}
	ctx := r.Context()
	past, stream, err := h.svc.Events(ctx, r.PathValue("id"), follow)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !follow {
		if past == nil {
			past = []frontend.Event{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"events": past})
		return
	}
	defer stream.Stop()
	// The timeout bounds the follow, from when the past events are read: reading them under load
	// may take longer than a short timeout, which must not turn the answer into an error.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A flush reports a failed write (http.Flusher would not): a client that vanished is seen at
	// the next event or heartbeat.
	rc := http.NewResponseController(w)
	flush := func() error {
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		return nil
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if flush() != nil { // the client learns at once that the follow is open
		return
	}
	send := func(e frontend.Event) error {
		b, _ := json.Marshal(e)
		if _, err := fmt.Fprintf(w, "event: event\ndata: %s\n\n", b); err != nil {
			return err
		}
		return flush()
	}
	for _, e := range past {
		if send(e) != nil {
			return
		}
	}
	end := func(reason string) {
		b, _ := json.Marshal(map[string]string{"reason": reason})
		_, _ = fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
		_ = flush()
	}
	for {
		// A heartbeat after h.heartbeat without an event: a write is the only way to learn that
		// a client vanished without closing its connection (the request's context does not
		// end then), and the follow's slot is freed at once instead of at its timeout.
		wait, stopWaiting := context.WithTimeout(ctx, h.heartbeat)
		e, err := stream.Next(wait)
		stopWaiting()
		if err != nil {
			if ctx.Err() == nil && wait.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
				if _, err := io.WriteString(w, heartbeatComment); err != nil || flush() != nil {
					return
				}
				continue
			}
			end(frontend.EndReason(err))
			return
		}
		if send(e) != nil {
			return
		}
		if until.Ends(e) {
			end(frontend.EndedUntil)
			return
		}
	}
}

// heartbeatComment is a follow's heartbeat: an SSE comment, which EventSource and other SSE
// clients ignore.
const heartbeatComment = ": ping\n\n"

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("%s=%s is not a boolean: use %s=true or %s=false, or leave it out", name, workspace.Quote(v), name, name)}
	}
	return b, nil
}

// stop and start answer 202 with the workspace as it is after recording the intent: the
// controller stops or starts it in the background (follow the phase or the events).
func (h *rest) stop(w http.ResponseWriter, r *http.Request) {
	ws, err := h.svc.Stop(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, ws)
}

func (h *rest) start(w http.ResponseWriter, r *http.Request) {
	ws, err := h.svc.Start(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, ws)
}
