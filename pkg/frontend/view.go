package frontend

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Workspace is the caller's view of one workspace (workspace.Describe): id, owner, template and
// version, isOutdated and latestTemplateVersion, phase, active pod, routing paths, last upgrade
// error, maintenance.
type Workspace = workspace.Info

// describe builds the view of one workspace from its pods. latest is the template's current
// version ("" when the registry does not know the template).
func describe(pods []*corev1.Pod, latest string, now time.Time) Workspace {
	return workspace.Describe(pods, latest, now)
}
