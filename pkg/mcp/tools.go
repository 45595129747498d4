package mcp

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

type (
	noInput struct{}

	idInput struct {
		ID string `json:"id" jsonschema:"the workspace id (see list_workspaces)"`
	}
	listInput struct {
		AllUsers bool `json:"allUsers,omitempty" jsonschema:"admins only: list every user's workspaces instead of your own"`
	}
	eventsInput struct {
		ID             string `json:"id" jsonschema:"the workspace id"`
		Follow         bool   `json:"follow,omitempty" jsonschema:"keep the call open and stream new events as progress and log notifications until timeoutSeconds"`
		TimeoutSeconds int    `json:"timeoutSeconds,omitempty" jsonschema:"how long to follow, 1 to 300 seconds (default 60)"`
	}
	maintenanceInput struct {
		ID     string `json:"id" jsonschema:"the workspace id"`
		Reason string `json:"reason,omitempty" jsonschema:"why the workspace is out of service; empty puts it back into service"`
	}

	templatesOutput struct {
		Templates []frontend.TemplateInfo `json:"templates"`
	}
	workspacesOutput struct {
		Workspaces []frontend.Workspace `json:"workspaces"`
	}
	upgradesOutput struct {
		Upgrades []frontend.UpgradeResult `json:"upgrades" jsonschema:"one entry per outdated workspace"`
	}
	eventsOutput struct {
		Events []frontend.Event `json:"events" jsonschema:"oldest first"`
		Ended  string           `json:"ended,omitempty" jsonschema:"why following stopped: timeout, cancelled, or an error"`
	}
)

func addTools(s *mcp.Server, svc *frontend.Service) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_templates",
		Description: "List the workspace templates you can spawn from, with their current version. Invalid templates are listed with the reason so an admin can fix them.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, templatesOutput, error) {
		t, err := svc.ListTemplates(ctx)
		if t == nil {
			t = []frontend.TemplateInfo{}
		}
		return nil, templatesOutput{Templates: t}, err
	})

	mcp.AddTool(s, &mcp.Tool{
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

	mcp.AddTool(s, &mcp.Tool{
		Name: "list_workspaces",
		Description: "List your workspaces with phase (Scheduling, Initializing, Ready, Upgrading, Unavailable, Failed, Terminating), " +
			"template version, isOutdated and latestTemplateVersion, active pod, proxy paths and the last upgrade error.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in listInput) (*mcp.CallToolResult, workspacesOutput, error) {
		ws, err := svc.ListWorkspaces(ctx, frontend.ListOptions{AllUsers: in.AllUsers})
		if ws == nil {
			ws = []frontend.Workspace{}
		}
		return nil, workspacesOutput{Workspaces: ws}, err
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "get_workspace",
		Description: "Show one of your workspaces: phase and reason, template version and whether it is outdated, pods, proxy paths, last upgrade error.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		w, err := svc.GetWorkspace(ctx, in.ID)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	destructive := true
	mcp.AddTool(s, &mcp.Tool{
		Name:        "delete_workspace",
		Description: "Delete one of your workspaces: its pods are deleted in the background. Its persistent volume claims (your files) are kept; an administrator can remove them.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &destructive},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.DeleteResult, error) {
		r, err := svc.Delete(ctx, in.ID)
		if err != nil {
			return nil, frontend.DeleteResult{}, err
		}
		return nil, *r, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name: "upgrade_workspace",
		Description: "Upgrade one of your workspaces to its template's latest version. Returns at once with status \"upgrading\" and the name of the pod the controller " +
			"creates; the workspace keeps serving until the new pod is Ready. Follow get_workspace_events (UpgradeSucceeded or UpgradeFailed). " +
			"Status \"upToDate\" means there was nothing to do.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, frontend.UpgradeResult, error) {
		r, err := svc.Upgrade(ctx, in.ID)
		if err != nil {
			return nil, frontend.UpgradeResult{}, err
		}
		return nil, *r, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "upgrade_all_workspaces",
		Description: "Admins only: request an upgrade of every outdated workspace of every user. Returns at once, one entry per outdated workspace; the controller upgrades them at a bounded rate.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, upgradesOutput, error) {
		r, err := svc.UpgradeAll(ctx)
		if r == nil {
			r = []frontend.UpgradeResult{}
		}
		return nil, upgradesOutput{Upgrades: r}, err
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "set_workspace_maintenance",
		Description: "Admins only: take a workspace out of service (phase Unavailable) with a reason, or put it back with an empty reason.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in maintenanceInput) (*mcp.CallToolResult, frontend.Workspace, error) {
		w, err := svc.SetMaintenance(ctx, in.ID, in.Reason)
		if err != nil {
			return nil, frontend.Workspace{}, err
		}
		return nil, *w, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name: "get_workspace_events",
		Description: "The Kubernetes events of a workspace's pods: scheduling, image pulls, upgrade progress and failures. With follow, the call stays open up to timeoutSeconds " +
			"and each new event is sent as a progress notification (when you pass a progress token) and a log message; the result lists every event seen.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in eventsInput) (*mcp.CallToolResult, eventsOutput, error) {
		return events(ctx, svc, req, in)
	})
}

func events(ctx context.Context, svc *frontend.Service, req *mcp.CallToolRequest, in eventsInput) (*mcp.CallToolResult, eventsOutput, error) {
	timeout := time.Minute
	if in.TimeoutSeconds != 0 {
		if in.TimeoutSeconds < 1 || time.Duration(in.TimeoutSeconds)*time.Second > frontend.MaxFollow {
			return nil, eventsOutput{}, &frontend.Error{Code: frontend.CodeInvalid, Message: "timeoutSeconds must be between 1 and 300"}
		}
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	if in.Follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
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
	token := req.Params.GetProgressToken()
	notify := func(e frontend.Event) {
		// Notifications are best effort: a client that stopped listening still gets the result.
		if token != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(len(out.Events)), Message: mustJSON(e),
			})
		}
		level := mcp.LoggingLevel("info")
		if e.Type == "Warning" {
			level = "warning"
		}
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: level, Logger: "nogoo9.events", Data: e})
	}
	for _, e := range past {
		notify(e)
	}
	for {
		e, err := stream.Next(ctx)
		if err != nil {
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				out.Ended = "timeout"
			case errors.Is(err, context.Canceled):
				out.Ended = "cancelled"
			default:
				out.Ended = err.Error()
			}
			return nil, out, nil
		}
		out.Events = append(out.Events, e)
		notify(e)
	}
}
