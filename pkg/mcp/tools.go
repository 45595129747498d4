package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

type (
	noInput struct{}

	idInput struct {
		ID        string `json:"id" jsonschema:"the workspace id (see list_workspaces)"`
		Namespace string `json:"namespace,omitempty" jsonschema:"the workspace's namespace (whoami or list answers show it); empty: nogoo9's own namespace"`
	}
	listInput struct {
		AllUsers  bool   `json:"allUsers,omitempty" jsonschema:"admins only: list every user's workspaces instead of your own"`
		Limit     int    `json:"limit,omitempty" jsonschema:"at most this many workspaces, 1 to 1000 (absent: 100)"`
		Continue  string `json:"continue,omitempty" jsonschema:"the continue value of the previous answer, unchanged (with the same allUsers and allNamespaces): the list goes on after that page"`
		Namespace string `json:"namespace,omitempty" jsonschema:"the namespace to list (whoami or list answers show it); empty: nogoo9's own namespace"`
		// AllNamespaces is kubectl's --all-namespaces: every watched namespace, by namespace and id.
		AllNamespaces bool `json:"allNamespaces,omitempty" jsonschema:"list every watched namespace, sorted by namespace then id (each workspace names its namespace); do not give namespace with it"`
	}
	eventsInput struct {
		ID             string   `json:"id" jsonschema:"the workspace id"`
		Follow         bool     `json:"follow,omitempty" jsonschema:"keep the call open and stream new events as progress and log notifications until timeoutSeconds"`
		TimeoutSeconds int      `json:"timeoutSeconds,omitempty" jsonschema:"how long to follow, 1 to 300 seconds (default 60)"`
		Until          []string `json:"until,omitempty" jsonschema:"stop following as soon as a new event with one of these reasons arrives, e.g. [UpgradeSucceeded, UpgradeFailed]"`
		Namespace      string   `json:"namespace,omitempty" jsonschema:"the workspace's namespace (whoami or list answers show it); empty: nogoo9's own namespace"`
	}
	upgradeInput struct {
		ID        string `json:"id" jsonschema:"the workspace id (see list_workspaces)"`
		DryRun    bool   `json:"dryRun,omitempty" jsonschema:"write nothing: answer the strategy, whether the workspace is interrupted, and the changes between its pod and the new version's pod"`
		Version   string `json:"version,omitempty" jsonschema:"admins only: a kept earlier template version (list_templates shows the history) to roll the workspace back to; it is then pinned"`
		Namespace string `json:"namespace,omitempty" jsonschema:"the workspace's namespace (whoami or list answers show it); empty: nogoo9's own namespace"`
	}
	upgradeOutput struct {
		frontend.UpgradeResult
		Preview *frontend.UpgradePreview `json:"preview,omitempty" jsonschema:"the dry run's answer (dryRun only)"`
	}
	upgradeAllInput struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"only the workspaces of this watched namespace; empty: every watched namespace"`
		Template  string `json:"template,omitempty" jsonschema:"with version: only the workspaces of this template"`
		Version   string `json:"version,omitempty" jsonschema:"with template: roll every workspace of the template to this kept version instead of upgrading to the latest"`
	}
	updateSettingsInput struct {
		ID        string  `json:"id" jsonschema:"the workspace id"`
		Pinned    *bool   `json:"pinned,omitempty" jsonschema:"true pins the workspace to its version (no automatic upgrade, skipped by upgrade-all); false unpins it"`
		Policy    *string `json:"policy,omitempty" jsonschema:"the workspace's own update policy: manual, on-start, when-idle or window; empty: follow the template's"`
		Window    *string `json:"window,omitempty" jsonschema:"with policy window: the maintenance window, e.g. 'Sat 02:00-04:00 UTC'"`
		Namespace string  `json:"namespace,omitempty" jsonschema:"the workspace's namespace (whoami or list answers show it); empty: nogoo9's own namespace"`
	}
	maintenanceInput struct {
		ID        string `json:"id" jsonschema:"the workspace id"`
		Reason    string `json:"reason,omitempty" jsonschema:"why the workspace is out of service; empty puts it back into service"`
		Namespace string `json:"namespace,omitempty" jsonschema:"the workspace's namespace (whoami or list answers show it); empty: nogoo9's own namespace"`
	}

	templatesInput struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"the watched namespace to spawn in: its own templates and nogoo9's not shadowed by one of them; empty: nogoo9's own namespace"`
	}
	templatesOutput struct {
		Templates []frontend.TemplateInfo `json:"templates"`
	}
	workspacesOutput struct {
		Workspaces []frontend.Workspace `json:"workspaces" jsonschema:"sorted by id"`
		Continue   string               `json:"continue,omitempty" jsonschema:"present when more workspaces follow: pass it as continue to get them"`
	}
	upgradesOutput struct {
		Upgrades []frontend.UpgradeResult `json:"upgrades" jsonschema:"one entry per outdated workspace"`
	}
	eventsOutput struct {
		Events []frontend.Event `json:"events" jsonschema:"oldest first"`
		Ended  string           `json:"ended,omitempty" jsonschema:"why following stopped: timeout, until (an event listed in until arrived), cancelled, disconnected (a notification could not be delivered), or an error"`
	}
)

func addTools(s *mcp.Server, svc *frontend.Service, heartbeat time.Duration) {
	addTool(s, &mcp.Tool{
		Name:        "list_templates",
		Description: "List the workspace templates you can spawn from (in namespace, if given), with their current version and the namespace each lives in. Invalid templates are listed with the reason so an admin can fix them.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in templatesInput) (*mcp.CallToolResult, templatesOutput, error) {
		t, err := svc.ListTemplates(frontend.WithNamespace(ctx, in.Namespace))
		if t == nil {
			t = []frontend.TemplateInfo{}
		}
		return nil, templatesOutput{Templates: t}, err
	})

	addTool(s, &mcp.Tool{
		Name: "spawn_workspace",
		Description: "Create a workspace from a template, owned by you. Returns at once with phase Scheduling; " +
			"the pod becomes Ready in the background (image pulls can take minutes): poll get_workspace or follow get_workspace_events. " +
			"Give an id (lower-case letters, digits, '-') or a name to derive it from, and the context values the template needs.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in frontend.SpawnInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		w, err := svc.Spawn(ctx, in)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	// list_workspaces is registered untyped: its answer (10,000 workspaces for an admin) is
	// written from the views' cached JSON, not marshalled, re-parsed and validated against the
	// output schema as a typed tool's is.
	s.AddTool(&mcp.Tool{
		Name: "list_workspaces",
		Description: "List your workspaces with phase (Scheduling, Initializing, Ready, Upgrading, Unavailable, Failed, Terminating, Stopped), " +
			"template version, isOutdated and latestTemplateVersion, active pod, proxy paths and the last upgrade error. " +
			"An answer holds at most limit workspaces (default 100, at most 1000) in id order; when more follow it has a continue value: " +
			"pass it back (with the same allUsers and allNamespaces) to get the next page, until an answer has none. " +
			"Without namespace it lists nogoo9's own namespace; allNamespaces lists every watched namespace, sorted by namespace then id.",
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true},
		InputSchema:  mustSchema[listInput](),
		OutputSchema: mustSchema[workspacesOutput](),
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return listWorkspaces(ctx, svc, req)
	})

	addTool(s, &mcp.Tool{
		Name:        "get_workspace",
		Description: "Show one of your workspaces: phase and reason, template version and whether it is outdated, pods, proxy paths, last upgrade error.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		w, err := svc.GetWorkspace(ctx, in.ID)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	destructive := true
	addTool(s, &mcp.Tool{
		Name:        "delete_workspace",
		Description: "Delete one of your workspaces: its pods are deleted in the background. Its persistent volume claims (your files) are kept; an administrator can remove them. A workspace in maintenance can be deleted by an admin only (an error says so otherwise).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &destructive},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.DeleteResult, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		r, err := svc.Delete(ctx, in.ID)
		if err != nil {
			return nil, frontend.DeleteResult{}, err
		}
		return nil, *r, nil
	})

	addTool(s, &mcp.Tool{
		Name: "upgrade_workspace",
		Description: "Upgrade one of your workspaces to its template's latest version. Returns at once with status \"upgrading\" and the name of the pod the controller " +
			"creates; the workspace keeps serving until the new pod is Ready. Follow get_workspace_events (UpgradeSucceeded or UpgradeFailed). " +
			"Status \"upToDate\" means there was nothing to do. A workspace in maintenance can be upgraded by an admin only (an error says so otherwise); the maintenance stays. " +
			"A pinned workspace is refused until it is unpinned. With dryRun nothing is written: the answer's preview says the strategy (SideBySide or Recreate, and why), " +
			"whether the workspace is interrupted, and each change (images, env, ports, resources, volumes). Admins may give version to roll back to a kept earlier version.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in upgradeInput) (*mcp.CallToolResult, upgradeOutput, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		return upgradeWorkspace(ctx, svc, in)
	})

	addTool(s, &mcp.Tool{
		Name: "upgrade_all_workspaces",
		Description: "Admins only: request an upgrade of every outdated workspace of every user. Returns at once, one entry per outdated workspace; the controller upgrades them at a bounded rate. Workspaces in maintenance and pinned workspaces are skipped (status \"skipped\" with the reason). " +
			"With template and version, rolls every workspace of that template to that kept version instead (list_templates shows the history).",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in upgradeAllInput) (*mcp.CallToolResult, upgradesOutput, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		var r []frontend.UpgradeResult
		var err error
		switch {
		case in.Version != "" && in.Template != "":
			r, err = svc.RollbackTemplate(ctx, in.Template, in.Version)
		case in.Template != "":
			err = &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("template %s was given without version: add the kept version to roll its workspaces back to (list_templates shows the history), or give neither to upgrade every outdated workspace", workspace.Quote(in.Template))}
		case in.Version != "":
			err = &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("version %s was given without template: add the template whose workspaces go back to it, or give neither to upgrade every outdated workspace", workspace.Quote(in.Version))}
		default:
			r, err = svc.UpgradeAll(ctx)
		}
		if r == nil {
			r = []frontend.UpgradeResult{}
		}
		return nil, upgradesOutput{Upgrades: r}, err
	})

	addTool(s, &mcp.Tool{
		Name: "stop_workspace",
		Description: "Stop one of your workspaces: its pod is replaced by a stopped one that keeps its identity, files (volume claims) and paths but uses no node (phase Stopped). " +
			"Returns at once; start_workspace brings it back. Stopped workspaces do not count against your running-workspace limit.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		w, err := svc.Stop(ctx, in.ID)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	addTool(s, &mcp.Tool{
		Name: "start_workspace",
		Description: "Start one of your stopped workspaces on the same version (or the template's latest when its update policy is on-start), with the same files and paths. " +
			"Returns at once; follow get_workspace_events (WorkspaceStarted) or the phase. A workspace in maintenance starts when the maintenance ends.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		w, err := svc.Start(ctx, in.ID)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	addTool(s, &mcp.Tool{
		Name:        "set_workspace_maintenance",
		Description: "Admins only: take a workspace out of service (phase Unavailable) with a reason, or put it back with an empty reason. Returns the workspace as it is after this change; maintenance survives upgrades. An upgrade requested before and not started yet is withdrawn (the returned message says so); one in flight finishes. Its owner cannot delete it meanwhile.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in maintenanceInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		w, err := svc.SetMaintenance(ctx, in.ID, in.Reason)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	addTool(s, &mcp.Tool{
		Name: "set_workspace_update",
		Description: "Your workspace's (or, for admins, any workspace's) update settings: pinned (never upgraded automatically, skipped by upgrade-all) and its own update policy " +
			"(manual, on-start, when-idle, window with a window such as 'Sat 02:00-04:00 UTC'; empty follows the template). Fields you leave out stay as they are. Returns the workspace after the change.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in updateSettingsInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		return updateSettings(ctx, svc, in)
	})

	addTool(s, &mcp.Tool{
		Name: "get_workspace_events",
		Description: "The Kubernetes events of a workspace's pods: scheduling, image pulls, upgrade progress and failures. With follow, the call stays open up to timeoutSeconds " +
			"and each new event is sent as a progress notification (when you pass a progress token) and a log message; the result lists every event seen. " +
			"A progress notification without a message is a heartbeat, sent when nothing happened for a while. " +
			"Pass until (e.g. [\"UpgradeSucceeded\",\"UpgradeFailed\"]) to get the answer the moment the upgrade ends.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in eventsInput) (*mcp.CallToolResult, eventsOutput, error) {
		ctx = frontend.WithNamespace(ctx, in.Namespace)
		return events(ctx, svc, req, in, heartbeat)
	})
}

// DefaultFollowHeartbeat is how long a follow of get_workspace_events with a progress token
// waits without news before it sends a progress notification without a message (a heartbeat).
// The SDK reports a notification it cannot deliver, which is how a follow notices that its
// client went away when the end of its HTTP request does not tell (requestContext): the follow
// then ends and frees its place among its user's follows instead of holding it to its timeout.
const DefaultFollowHeartbeat = 15 * time.Second

// defaultFollow is how long get_workspace_events follows without timeoutSeconds.
const defaultFollow = time.Minute

// endedDisconnected is a follow's end when a notification could not be delivered.
const endedDisconnected = "disconnected"

func events(ctx context.Context, svc *frontend.Service, req *mcp.CallToolRequest, in eventsInput, heartbeat time.Duration) (*mcp.CallToolResult, eventsOutput, error) {
	timeout := defaultFollow
	if in.TimeoutSeconds != 0 {
		// Compared in seconds: a large count multiplied into a Duration first would overflow
		// (9223372037 s wraps to a negative duration) and pass.
		if in.TimeoutSeconds < 1 || in.TimeoutSeconds > int(frontend.MaxFollow/time.Second) {
			return nil, eventsOutput{}, &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf(
				"timeoutSeconds is %d: give a number of seconds from 1 to %d, or leave it out for the default, %d",
				in.TimeoutSeconds, int(frontend.MaxFollow/time.Second), int(defaultFollow/time.Second))}
		}
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	until, err := frontend.ParseUntil(in.Until)
	if err != nil {
		return nil, eventsOutput{}, err
	}
	var given []string
	if in.Until != nil {
		given = append(given, "until")
	}
	if in.TimeoutSeconds != 0 {
		given = append(given, "timeoutSeconds")
	}
	if err := frontend.FollowOnly(in.Follow, "follow: true", given...); err != nil {
		return nil, eventsOutput{}, err
	}
	if in.Follow {
		// The SDK runs a call detached from the HTTP request that carries it; a follow ends
		// with that request (its client went away), as REST's does.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		if r := requestContext(req); r != nil {
			defer context.AfterFunc(r, cancel)()
		}
	}
	past, stream, err := svc.Events(ctx, in.ID, in.Follow)
	if err != nil {
		return nil, eventsOutput{}, err
	}
	out := eventsOutput{Events: past}
	if out.Events == nil {
		out.Events = []frontend.Event{}
	}
	if !in.Follow {
		return nil, out, nil
	}
	defer stream.Stop()
	// The timeout bounds the follow from when the past events are read, as REST's does: reading
	// them under load may take longer than a short timeout, which must not turn the answer into
	// an error.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out.Events, out.Ended = follow(ctx, stream, until, out.Events, notifications(req, heartbeat))
	return nil, out, nil
}

// requestContext is the context of the HTTP request that carried req (NewHandler's verify
// puts it into the request's TokenInfo), or nil.
func requestContext(req *mcp.CallToolRequest) context.Context {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	c, _ := req.Extra.TokenInfo.Extra[requestExtra].(context.Context)
	return c
}

// followNotices are how a follow tells its client: each event, and a heartbeat every beatEvery
// without one (none when beat is nil). An error means the client was not told.
type followNotices struct {
	event     func(context.Context, frontend.Event) error
	beat      func(context.Context) error
	beatEvery time.Duration
}

// notifications sends each event of req's follow as a progress notification (when req has a
// progress token) and a log message (at the level the client set), and heartbeats as progress
// notifications without a message. Progress counts the progress notifications sent, so it
// increases with each, as the specification asks.
func notifications(req *mcp.CallToolRequest, heartbeat time.Duration) followNotices {
	token := req.Params.GetProgressToken()
	var sent float64
	progress := func(ctx context.Context, msg string) error {
		sent++
		return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: sent, Message: msg})
	}
	n := followNotices{beatEvery: heartbeat, event: func(ctx context.Context, e frontend.Event) error {
		if token != nil {
			if err := progress(ctx, mustJSON(e)); err != nil {
				return err
			}
		}
		level := mcp.LoggingLevel("info")
		if e.Type == "Warning" {
			level = "warning"
		}
		return req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: level, Logger: "nogoo9.events", Data: e})
	}}
	if token != nil {
		n.beat = func(ctx context.Context) error { return progress(ctx, "") }
	}
	return n
}

// eventSource is the part of a frontend.EventStream a follow reads.
type eventSource interface {
	Next(context.Context) (frontend.Event, error)
}

// follow tells the client the past events, then each new one of src, until ctx ends, an event
// listed in until arrives, src fails, or the client cannot be told (a notification failed: it
// went away). It returns every event seen, past ones first, and why it ended.
func follow(ctx context.Context, src eventSource, until frontend.Until, past []frontend.Event, n followNotices) ([]frontend.Event, string) {
	seen := past
	gone := func() string {
		if ctx.Err() != nil {
			return frontend.EndReason(ctx.Err())
		}
		return endedDisconnected
	}
	for _, e := range past {
		if n.event(ctx, e) != nil {
			return seen, gone()
		}
	}
	for {
		wait, stopWaiting := ctx, context.CancelFunc(func() {})
		if n.beat != nil {
			wait, stopWaiting = context.WithTimeout(ctx, n.beatEvery)
		}
		e, err := src.Next(wait)
		stopWaiting()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && wait.Err() != nil {
				if n.beat(ctx) != nil {
					return seen, gone()
				}
				continue
			}
			return seen, frontend.EndReason(err)
		}
		seen = append(seen, e)
		if n.event(ctx, e) != nil {
			return seen, gone()
		}
		if until.Ends(e) {
			return seen, frontend.EndedUntil
		}
	}
}

func listWorkspaces(ctx context.Context, svc *frontend.Service, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var b bytes.Buffer
	if res, err := listJSON(ctx, svc, req.Params.Arguments, &b, nil); res != nil || err != nil {
		return res, err
	}
	// The text block repeats the structured content, as the MCP spec asks for clients that do
	// not read structuredContent.
	return &mcp.CallToolResult{
		StructuredContent: json.RawMessage(b.Bytes()),
		Content:           []mcp.Content{&mcp.TextContent{Text: b.String()}},
	}, nil
}

// listJSON writes to b the structured content of the list_workspaces call with these arguments
// and, when text is not nil, to text the same escaped as inside a JSON string (the text block of
// fastList's answer: the list's shared parts come escaped from the views), or returns the tool
// error to answer instead (b and text are then unused).
func listJSON(ctx context.Context, svc *frontend.Service, args json.RawMessage, b, text *bytes.Buffer) (*mcp.CallToolResult, error) {
	var in listInput
	if len(args) > 0 && string(bytes.TrimSpace(args)) != "null" {
		// The schema's additionalProperties: false with exact names, which encoding/json alone
		// does not hold to: it matches a key in any case ("LIMIT") and keeps the last of two.
		if err := checkArgumentKeys(args, listArguments); err != nil {
			return toolError(fmt.Errorf("%v; %s", err, listTakes)), nil
		}
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return toolError(fmt.Errorf("validating \"arguments\": %v; %s", err, listTakes)), nil
		}
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return toolError(err), nil
	}
	ctx = frontend.WithNamespace(ctx, in.Namespace)
	list, err := svc.List(ctx, frontend.ListOptions{AllUsers: in.AllUsers, AllNamespaces: in.AllNamespaces, Limit: limit, Continue: in.Continue})
	if err != nil {
		return toolError(err), nil
	}
	head, tail := `{"workspaces":`, "}"
	if list.Continue != "" {
		tail = `,"continue":` + strconv.Quote(list.Continue) + tail
	}
	b.WriteString(head)
	if err := list.WriteJSON(b); err != nil {
		return nil, err
	}
	b.WriteString(tail)
	if text != nil {
		text.Write(frontend.AppendEscaped(text.AvailableBuffer(), head))
		if err := list.WriteEscapedJSON(text); err != nil {
			return nil, err
		}
		text.Write(frontend.AppendEscaped(text.AvailableBuffer(), tail))
	}
	return nil, nil
}

// listArguments are list_workspaces's argument names (listInput's JSON names), listTakes says
// them with their types.
var listArguments = []string{"allUsers", "limit", "continue", "namespace", "allNamespaces"}

const listTakes = "list_workspaces takes allUsers (boolean), limit (integer), continue (string), namespace (string) and allNamespaces (boolean)"

// checkArgumentKeys refuses args (a tool call's arguments) unless it is a JSON object whose keys
// are among names, spelled exactly, each given once. The values are left to the decoder.
func checkArgumentKeys(args json.RawMessage, names []string) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New(`validating "arguments": they are not a JSON object`)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf(`validating "arguments": %v`, err)
		}
		k, _ := tok.(string)
		if !slices.Contains(names, k) {
			for _, n := range names {
				if strings.EqualFold(n, k) {
					return fmt.Errorf("argument %s is not known: argument names are case-sensitive, use %q", workspace.Quote(k), n)
				}
			}
			return fmt.Errorf("argument %s is not known", workspace.Quote(k))
		}
		if seen[k] {
			return fmt.Errorf("argument %s is given twice: give each argument once", workspace.Quote(k))
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf(`validating "arguments": %v`, err)
		}
	}
	return nil
}

// DefaultListLimit and MaxListLimit bound one list_workspaces answer. An agent reads the answer
// into its context: 100 workspaces are about 40 KB of JSON (some 10,000 tokens, sent twice: as
// structured content and as text), which fits beside the rest of a conversation; 10,000 would not
// fit any model's context. A program pages with up to 1,000 per answer, which keeps each JSON-RPC
// message (both copies, about 0.8 MB) and the time the SDK takes to encode it bounded, however
// many workspaces there are. REST, which sends the list once and has no model reading it, keeps
// the whole list as its default.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// pageLimit is the limit of a list_workspaces call: DefaultListLimit when absent, else 1 to
// MaxListLimit.
func pageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultListLimit, nil
	case limit < 0 || limit > MaxListLimit:
		return 0, &frontend.Error{Code: frontend.CodeInvalid, Message: fmt.Sprintf("limit %d is out of range: give 1 to %d workspaces per answer (default %d) and pass each answer's continue back to get the rest", limit, MaxListLimit, DefaultListLimit)}
	}
	return limit, nil
}

func toolError(err error) *mcp.CallToolResult {
	var res mcp.CallToolResult
	res.SetError(callerError(err))
	return &res
}

// addTool is mcp.AddTool with the handler's error put in the caller's terms (callerError).
func addTool[In, Out any](s *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		res, out, err := h(ctx, req, in)
		return res, out, callerError(err)
	})
}

// callerError is err as a caller reads it: an unreachable API server (frontend.CodeUnavailable)
// reads as msgUnavailable, what happened and what to do, not the client library's error.
func callerError(err error) error {
	if err != nil && frontend.CodeOf(err) == frontend.CodeUnavailable {
		return errors.New(msgUnavailable)
	}
	return err
}

// msgUnavailable replaces the error of a call that failed because the Kubernetes API server could
// not be reached or did not answer in time (frontend.CodeUnavailable), as REST's 503 does.
const msgUnavailable = "Unavailable: " + frontend.MsgUnavailable + " (get_workspace or list_workspaces shows whether it took effect)"

// mustSchema infers a tool schema from T as mcp.AddTool does; T is a fixed type of this package,
// so a failure is a programming error.
func mustSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("schema of %T: %v", *new(T), err))
	}
	return s
}

func upgradeWorkspace(ctx context.Context, svc *frontend.Service, in upgradeInput) (*mcp.CallToolResult, upgradeOutput, error) {
	if in.DryRun {
		p, err := svc.PreviewUpgrade(ctx, in.ID, in.Version)
		if err != nil {
			return nil, upgradeOutput{}, err
		}
		return nil, upgradeOutput{UpgradeResult: frontend.UpgradeResult{ID: p.ID, Owner: p.Owner, Status: p.Status, From: p.From, To: p.To}, Preview: p}, nil
	}
	var r *frontend.UpgradeResult
	var err error
	if in.Version != "" {
		r, err = svc.Rollback(ctx, in.ID, in.Version)
	} else {
		r, err = svc.Upgrade(ctx, in.ID)
	}
	if err != nil {
		return nil, upgradeOutput{}, err
	}
	return nil, upgradeOutput{UpgradeResult: *r}, nil
}

func updateSettings(ctx context.Context, svc *frontend.Service, in updateSettingsInput) (*mcp.CallToolResult, frontend.Workspace, error) {
	var w *frontend.Workspace
	var err error
	if in.Policy != nil || in.Window != nil {
		// A field left out stays as the workspace has it: the front end writes only the other.
		p := frontend.UpdatePolicyInput{KeepPolicy: in.Policy == nil, KeepWindow: in.Window == nil}
		if in.Policy != nil {
			p.Policy = *in.Policy
		}
		if in.Window != nil {
			p.Window = *in.Window
		}
		if w, err = svc.SetUpdatePolicy(ctx, in.ID, p); err != nil {
			return nil, frontend.Workspace{}, err
		}
	}
	if in.Pinned != nil {
		if w, err = svc.SetPinned(ctx, in.ID, *in.Pinned); err != nil {
			return nil, frontend.Workspace{}, err
		}
	}
	if w == nil {
		if w, err = svc.GetWorkspace(ctx, in.ID); err != nil {
			return nil, frontend.Workspace{}, err
		}
	}
	return nil, *w, nil
}
