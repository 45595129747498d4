package frontend

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
)

// Registry is what templates.Registry offers.
type Registry interface {
	Get(key string) (*templates.Template, bool)
	ListFor(ns string) []templates.Info
}

// FromRegistry adapts the template registry to Templates.
func FromRegistry(r Registry) Templates { return registryTemplates{r} }

type registryTemplates struct{ Registry }

func (r registryTemplates) Infos(ns string) []TemplateInfo {
	list := r.ListFor(ns)
	out := make([]TemplateInfo, len(list))
	for i, t := range list {
		out[i] = TemplateInfo{Name: t.Name, Namespace: t.Namespace, Version: t.ServingVersion, Description: t.Description, Source: t.Source, Valid: t.Valid, Error: t.Error}
		if out[i].Version == "" {
			out[i].Version = t.Version
		}
	}
	return out
}

// SpawnFunc is spawner.Spawner.Spawn's shape.
type SpawnFunc func(ctx context.Context, req spawner.Request) (*spawner.Result, error)

// FromSpawner adapts the spawner to Spawner, mapping its typed errors to Codes.
func FromSpawner(spawn SpawnFunc) Spawner { return spawnerAdapter(spawn) }

type spawnerAdapter SpawnFunc

var spawnerCodes = map[spawner.Code]Code{
	spawner.NotFound:      CodeNotFound,
	spawner.Invalid:       CodeInvalid,
	spawner.Conflict:      CodeConflict,
	spawner.QuotaExceeded: CodeQuotaExceeded,
	spawner.Forbidden:     CodeForbidden,
	spawner.Unavailable:   CodeUnavailable,
}

func (f spawnerAdapter) Spawn(ctx context.Context, r SpawnRequest) (*corev1.Pod, error) {
	c, _ := auth.CallerFrom(ctx)
	req := spawner.Request{Template: r.Template, Owner: r.Owner, ID: r.ID, Name: r.Name, Context: r.Context, Namespace: r.Namespace}
	if c != nil {
		req.Caller = spawner.Caller{Subject: c.Subject, IsAdmin: c.IsAdmin}
	}
	res, err := f(ctx, req)
	if err != nil {
		var se *spawner.Error
		if errors.As(err, &se) {
			code, ok := spawnerCodes[se.Code]
			if !ok {
				code = CodeInvalid
			}
			return nil, &Error{Code: code, Message: se.Message, Err: err}
		}
		return nil, &Error{Code: CodeInternal, Message: "creating the workspace failed; try again", Err: err}
	}
	return res.Pod, nil
}
