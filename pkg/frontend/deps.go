package frontend

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/templates"
)

// TemplateInfo describes one template as list_templates shows it.
type TemplateInfo struct {
	Name string `json:"name"`
	// Namespace is where the template lives: the namespace asked about for a team template,
	// nogoo9's namespace otherwise (docs/templates.md, "Where a template is looked up").
	Namespace   string `json:"namespace,omitempty"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
	Source      string `json:"source,omitempty"`
	Valid       bool   `json:"valid"`
	Error       string `json:"error,omitempty"`
	// History is the kept versions, newest first (the current one included): what an admin can
	// roll a workspace back to.
	History []templates.VersionInfo `json:"history,omitempty"`
}

// Templates is what the front end needs of the template registry (templates.Registry); an
// adapter in adapters.go converts the registry's types.
type Templates interface {
	// Get returns the template at key (workspace.TemplateKey: the name for nogoo9's namespace,
	// "<ns>/<name>" for a team template). The value may be the registry's own (templates.Shared):
	// read it, never write into it.
	Get(key string) (*templates.Template, bool)
	// Infos lists what a caller in namespace ns is offered: ns's templates and nogoo9's not
	// shadowed by one of them ("" or nogoo9's namespace: nogoo9's only).
	Infos(ns string) []TemplateInfo
}

// SpawnRequest asks for a new workspace owned by Owner.
type SpawnRequest struct {
	Owner    string
	ID       string
	Name     string
	Template string
	Context  map[string]string
	// Namespace is where the workspace is created (never empty: the front end resolves it).
	Namespace string
}

// Spawner creates a workspace's pod (and claims). Its errors should be *Error (the adapter maps
// the spawner's typed errors).
type Spawner interface {
	Spawn(ctx context.Context, req SpawnRequest) (*corev1.Pod, error)
}
