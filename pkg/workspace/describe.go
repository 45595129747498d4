package workspace

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Info is the view of one workspace that the REST API and the MCP tools return from list and get.
// Status is embedded, so its phase, reason and message are top-level JSON fields.
type Info struct {
	// Namespace is the workspace's namespace (ids are unique per namespace).
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Owner     string `json:"owner"`
	UserLabel string `json:"userLabel"`
	Template  string `json:"template"`
	// TemplateNamespace is where the template the workspace follows lives when that is not
	// nogoo9's namespace (a team template, AnnTemplateNamespace); empty for nogoo9's templates.
	TemplateNamespace string `json:"templateNamespace,omitempty"`
	// TemplateVersion is the version the active pod was built from.
	TemplateVersion string `json:"templateVersion"`
	// LatestTemplateVersion is the template's current version, as the caller passed it ("" when
	// the template is unknown, e.g. deleted).
	LatestTemplateVersion string `json:"latestTemplateVersion,omitempty"`
	// IsOutdated is true when the latest version is known and differs from TemplateVersion.
	IsOutdated bool `json:"isOutdated"`
	Status
	// ActivePod is the pod that serves (or will serve) the workspace.
	ActivePod     string `json:"activePod"`
	WorkspacePath string `json:"workspacePath,omitempty"`
	PreviewPath   string `json:"previewPath,omitempty"`
	// LastUpgradeError is nogoo9/last-upgrade-error of the active pod.
	LastUpgradeError string `json:"lastUpgradeError,omitempty"`
	// UpgradePod is the pod an upgrade in flight creates or created: the intent's
	// nogoo9/upgrade-pod, or the live upgraded pod that is not serving yet.
	UpgradePod string `json:"upgradePod,omitempty"`
	// Maintenance is the nogoo9/maintenance value when the workspace is in maintenance.
	Maintenance string `json:"maintenance,omitempty"`
	// CreatedAt is the creation time of the oldest pod the workspace has now (after an upgrade,
	// that of the upgraded pod).
	CreatedAt time.Time `json:"createdAt"`
	// LastActivity is the active pod's nogoo9/last-activity (RFC 3339), as the proxy recorded it.
	LastActivity string `json:"lastActivity,omitempty"`
	// Pinned is true when nogoo9/pinned is "true" on the active pod (updates area).
	Pinned bool `json:"pinned,omitempty"`
	// UpdatePolicy and UpdateWindow are the workspace's own nogoo9/update-policy and
	// nogoo9/update-window ("" when it follows its template's).
	UpdatePolicy string `json:"updatePolicy,omitempty"`
	UpdateWindow string `json:"updateWindow,omitempty"`
}

// Describe builds the Info of one workspace from all of its pods (any order; not reordered) and
// its template's latest version. It is pure and cheap (no allocation beyond the result when pods
// are already newest first, as GroupByID returns them), because the API calls it for every
// workspace of a list. It returns the zero Info for no pods.
func Describe(pods []*corev1.Pod, latestVersion string, now time.Time) Info {
	if len(pods) == 0 {
		return Info{}
	}
	pods = sortedCopy(pods)
	active := Active(pods)
	oldest := pods[len(pods)-1]

	info := Info{
		Namespace:             active.Namespace,
		ID:                    ID(active),
		Name:                  active.Annotations[AnnWorkspaceName],
		Owner:                 Owner(active),
		UserLabel:             active.Labels[LabelUserSub],
		Template:              active.Labels[LabelTemplate],
		TemplateNamespace:     active.Annotations[AnnTemplateNamespace],
		TemplateVersion:       TemplateVersion(active),
		LatestTemplateVersion: latestVersion,
		Status:                phaseSorted(pods, now),
		ActivePod:             active.Name,
		WorkspacePath:         active.Annotations[AnnWorkspacePath],
		PreviewPath:           active.Annotations[AnnPreviewPath],
		LastUpgradeError:      active.Annotations[AnnLastUpgradeError],
		UpgradePod:            active.Annotations[AnnUpgradePod],
		CreatedAt:             oldest.CreationTimestamp.Time,
		LastActivity:          active.Annotations[AnnLastActivity],
		Pinned:                active.Annotations[AnnPinned] == "true",
		UpdatePolicy:          active.Annotations[AnnUpdatePolicy],
		UpdateWindow:          active.Annotations[AnnUpdateWindow],
	}
	if info.Name == "" {
		info.Name = info.ID
	}
	if info.UserLabel == "" && info.Owner != "" {
		info.UserLabel = UserLabel(info.Owner)
	}
	info.IsOutdated = latestVersion != "" && info.TemplateVersion != latestVersion
	if v, ok := maintenance(pods, active); ok {
		info.Maintenance = v
		if v == "" {
			info.Maintenance = "true"
		}
	}
	if info.UpgradePod == "" {
		if p := incomingPod(pods, active); p != nil {
			info.UpgradePod = p.Name
		}
	}
	return info
}
