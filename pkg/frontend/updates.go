package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/updatepolicy"
	"github.com/nogoo9/no-crd/pkg/upgrade"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// HistoryReader reads the kept versions of templates (*templates.History).
type HistoryReader interface {
	Versions(ctx context.Context, name string) ([]templates.VersionInfo, error)
	Version(ctx context.Context, name, version string) (*templates.Template, error)
	AllVersions(ctx context.Context, ns string) (map[string][]templates.VersionInfo, error)
}

// patchLive merge-patches annotations ann (nil values remove) on every live pod of a workspace
// (every one, so that an upgrade in flight, which keeps one of two pods, cannot drop the write)
// and returns the pods as they are after the write, for the answer.
//
// pods are the cache's, which may show a pod that is going and not yet the one replacing it: a
// Recreate upgrade, a stop or a start deletes the old pod in the pass that creates the new one,
// and nothing is carried over from a terminating pod. So the write then goes to every live pod
// the API server lists that does not carry it yet.
func (s *Service) patchLive(ctx context.Context, pods []*corev1.Pod, ann map[string]any) ([]*corev1.Pod, error) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	write := func(p *corev1.Pod) error {
		target := &corev1.Pod{}
		target.Name, target.Namespace = p.Name, p.Namespace
		err := s.cfg.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch))
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsInvalid(err):
			return refusedAsInvalid("settings", workspace.ID(p), err)
		default:
			return &Error{Code: CodeInternal, Message: fmt.Sprintf("writing pod %s failed; try again", p.Name), Err: err}
		}
		return nil
	}
	after := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		q := p.DeepCopy()
		after[i] = q
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := write(p); err != nil {
			return nil, err
		}
		if q.Annotations == nil {
			q.Annotations = map[string]string{}
		}
		for k, v := range ann {
			if v == nil {
				delete(q.Annotations, k)
			} else {
				q.Annotations[k] = fmt.Sprint(v)
			}
		}
	}
	active := workspace.Active(pods)
	id := workspace.ID(active)
	live, err := s.livePods(ctx, id, workspace.Owner(active))
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("writing workspace %q: reading its pods failed; try again", id), Err: err}
	}
	for _, p := range live {
		if p.DeletionTimestamp == nil && !carries(p, ann) {
			if err := write(p); err != nil {
				return nil, err
			}
		}
	}
	return after, nil
}

// carries reports whether p's annotations already are what patching ann makes them.
func carries(p *corev1.Pod, ann map[string]any) bool {
	for k, v := range ann {
		got, ok := p.Annotations[k]
		if v == nil && ok || v != nil && got != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// describeNow describes a workspace from pods as they are after a write (not as the cache had
// them before it).
func (s *Service) describeNow(pods []*corev1.Pod) *Workspace {
	w := describe(pods, s.latestVersion(map[string]string{}, pods), s.cfg.Now())
	return &w
}

// SetPinned pins the workspace to its version (never upgraded automatically, skipped by
// upgrade-all) or unpins it. Its owner or an admin.
func (s *Service) SetPinned(ctx context.Context, id string, pinned bool) (*Workspace, error) {
	_, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	var v any
	if pinned {
		v = "true"
	}
	after, err := s.patchLive(ctx, pods, map[string]any{workspace.AnnPinned: v})
	if err != nil {
		return nil, err
	}
	return s.describeNow(after), nil
}

// UpdatePolicyInput sets a workspace's own update policy.
type UpdatePolicyInput struct {
	Policy string `json:"policy" jsonschema:"manual, on-start, when-idle or window; empty: follow the template's policy"`
	Window string `json:"window,omitempty" jsonschema:"for policy window: the maintenance window, e.g. 'Sat 02:00-04:00 UTC'; empty: the template's"`
	// KeepPolicy and KeepWindow leave that setting as the workspace has it: the write names only
	// the other one, so a change to the kept one made meanwhile is not undone (MCP's
	// set_workspace_update with a field left out). REST's PUT sets both.
	KeepPolicy bool `json:"-"`
	KeepWindow bool `json:"-"`
}

// SetUpdatePolicy sets (or, with an empty policy, removes) the workspace's own update policy and
// window, which override its template's. Its owner or an admin.
//
// What is stored is the parsed value, not the text given: the policy's name and the window's
// fields joined by single spaces (each value is in every replica's cache, and in every admin's
// list).
func (s *Service) SetUpdatePolicy(ctx context.Context, id string, in UpdatePolicyInput) (*Workspace, error) {
	if !in.KeepPolicy {
		policy, err := updatepolicy.ParsePolicy(in.Policy)
		if err != nil {
			return nil, errorf(CodeInvalid, "%s", err.Error())
		}
		if strings.TrimSpace(in.Policy) == "" {
			in.Policy = ""
		} else {
			in.Policy = string(policy)
		}
	}
	if !in.KeepWindow {
		if strings.TrimSpace(in.Window) == "" {
			in.Window = ""
		} else {
			w, err := updatepolicy.ParseWindow(in.Window)
			if err != nil {
				return nil, errorf(CodeInvalid, "%s", err.Error())
			}
			in.Window = w.String()
		}
	}
	_, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	active := workspace.Active(pods)
	// What is kept counts as the workspace has it for the check below, and is not written.
	ann := map[string]any{}
	set := func(key, value string) {
		if value == "" {
			ann[key] = nil
		} else {
			ann[key] = value
		}
	}
	if in.KeepPolicy {
		in.Policy = active.Annotations[workspace.AnnUpdatePolicy]
	} else {
		set(workspace.AnnUpdatePolicy, in.Policy)
	}
	if in.KeepWindow {
		in.Window = active.Annotations[workspace.AnnUpdateWindow]
	} else {
		set(workspace.AnnUpdateWindow, in.Window)
	}
	if len(ann) == 0 {
		return s.describeNow(pods), nil
	}
	if in.Policy == string(updatepolicy.InWindow) && in.Window == "" {
		t, ok := s.cfg.Templates.Get(workspace.TemplateKey(active))
		if !ok || t.Annotations[workspace.AnnUpdateWindow] == "" {
			return nil, errorf(CodeInvalid, "policy window needs a window and the template has none: give window, e.g. \"Sat 02:00-04:00 UTC\"")
		}
	}
	after, err := s.patchLive(ctx, pods, ann)
	if err != nil {
		return nil, err
	}
	return s.describeNow(after), nil
}

// UpgradePreview is the answer of a dry-run upgrade: nothing was written.
type UpgradePreview struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// Status: "wouldUpgrade", "upToDate", or "upgrading" (an upgrade is already in flight).
	Status string `json:"status"`
	From   string `json:"fromVersion,omitempty"`
	To     string `json:"toVersion,omitempty"`
	// Strategy is SideBySide or Recreate; StrategyReason says why.
	Strategy       string `json:"strategy,omitempty"`
	StrategyReason string `json:"strategyReason,omitempty"`
	// Interrupts says whether the workspace is out of service during the upgrade (Recreate: the
	// old pod goes before the new one is Ready).
	Interrupts bool   `json:"interrupts"`
	Note       string `json:"note,omitempty"`
	Pinned     bool   `json:"pinned,omitempty"`
	// Changes is what differs between the workspace's pod and the pod the upgrade would create,
	// rendered by the same code the upgrade uses.
	Changes []upgrade.Change `json:"changes"`
}

// PreviewUpgrade answers what an upgrade of workspace id (to version, or to the template's
// latest when version is "") would do, writing nothing. Its owner or an admin; a version other
// than the latest is an admin's rollback.
func (s *Service) PreviewUpgrade(ctx context.Context, id, version string) (*UpgradePreview, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	active := workspace.Active(pods)
	res := &UpgradePreview{ID: id, Owner: workspace.Owner(active), From: workspace.TemplateVersion(active), Pinned: updatepolicy.IsPinned(active), Changes: []upgrade.Change{}}
	if up := upgradeInFlight(pods); up != nil {
		res.Status, res.To = "upgrading", workspace.TemplateVersion(up)
		res.Note = "an upgrade is in flight; preview again when it has ended"
		return res, nil
	}
	t, err := s.targetTemplate(ctx, c.IsAdmin, active, version)
	if err != nil {
		return nil, err
	}
	res.To = t.Version
	if t.Version == res.From {
		res.Status = "upToDate"
		return res, nil
	}
	full := &corev1.Pod{}
	reader := s.cfg.APIReader
	if reader == nil {
		reader = s.cfg.Cache
	}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(active), full); err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("reading pod %s failed; try again", active.Name), Err: err}
	}
	identity, err := spawner.IdentityFromPod(full)
	if err != nil {
		return nil, errorf(CodeConflict, "workspace %q cannot be rendered again: %v", id, err)
	}
	name := workspace.NextPodName(full, t.Version)
	next, _, err := spawner.BuildPod(t, identity, name)
	if err != nil {
		return nil, errorf(CodeConflict, "template %s version %s does not render for workspace %q, so an upgrade would fail: %v", t.Name, t.Version, id, err)
	}
	upgrade.PreserveIdentity(next, full)
	claims := map[string]*corev1.PersistentVolumeClaim{}
	for _, v := range full.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		var pvc corev1.PersistentVolumeClaim
		if err := s.cfg.Cache.Get(ctx, client.ObjectKey{Namespace: full.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &pvc); err == nil {
			claims[pvc.Name] = &pvc
		}
	}
	strategy, why := upgrade.ChooseStrategy(full, claims)
	res.Status, res.Strategy, res.StrategyReason = "wouldUpgrade", string(strategy), why
	res.Interrupts = strategy == upgrade.Recreate
	if res.Interrupts {
		res.Note = "the workspace is unavailable from the old pod's deletion until the new pod is Ready; open connections end"
	} else {
		res.Note = "the old pod serves until the new one is Ready; WebSockets still open on the old pod end when it is deleted"
	}
	res.Changes = upgrade.Diff(full, next)
	return res, nil
}

// targetTemplate is the latest version of active's template, or (admins only) the kept version.
func (s *Service) targetTemplate(ctx context.Context, isAdmin bool, active *corev1.Pod, version string) (*templates.Template, error) {
	name := workspace.TemplateKey(active)
	latest, ok := s.cfg.Templates.Get(name)
	if version == "" || (ok && latest.Version == version) {
		if !ok || latest == nil {
			return nil, errorf(CodeConflict, "template %q of workspace %q is gone or not valid; fix the template before upgrading", name, workspace.ID(active))
		}
		return latest, nil
	}
	if !isAdmin {
		return nil, errorf(CodeForbidden, "Forbidden: only admin users can move a workspace to an earlier template version; omit version to use the latest")
	}
	return s.keptVersion(ctx, name, version)
}

// keptVersion is kept version of template name, or an error saying which way it is not: not
// kept (NotFound), refused (Conflict: it no longer decodes or breaks the policy), or the history
// could not be read (Internal, which CodeOf answers as Unavailable when the API server did not).
func (s *Service) keptVersion(ctx context.Context, name, version string) (*templates.Template, error) {
	if s.cfg.History == nil {
		return nil, errorf(CodeNotFound, "no template history is kept here, so version %s of template %s is not available", workspace.Quote(version), name)
	}
	t, err := s.cfg.History.Version(ctx, name, version)
	var notKept *templates.ErrVersionNotKept
	var refused *templates.HistoryError
	switch {
	case errors.As(err, &notKept):
		return nil, errorf(CodeNotFound, "%s", err.Error())
	case errors.As(err, &refused):
		return nil, errorf(CodeConflict, "%s", err.Error())
	case err != nil:
		return nil, &Error{Code: CodeInternal, Message: "reading the template history failed; try again", Err: err}
	}
	return t, nil
}

// Rollback moves workspace id to kept version of its template (admins only): the same upgrade
// intent, with nogoo9/target-version naming the version, and the workspace pinned so that no
// update policy moves it forward again on its own (unpin it to let them).
func (s *Service) Rollback(ctx context.Context, id, version string) (*UpgradeResult, error) {
	c, pods, err := s.workspacePods(ctx, id)
	if err != nil {
		return nil, err
	}
	if !c.IsAdmin {
		return nil, errorf(CodeForbidden, "Forbidden: only admin users can roll a workspace back to an earlier template version")
	}
	return s.rollback(ctx, pods, version, nil)
}

// rollback records the rollback intent of the workspace of pods as upgrade records an upgrade
// (writeIntent: decided on the pod it is written to, within WriteTimeout). gate is upgrade's.
func (s *Service) rollback(ctx context.Context, pods []*corev1.Pod, version string, gate func([]*corev1.Pod) (*UpgradeResult, error)) (*UpgradeResult, error) {
	if version == "" {
		return nil, errorf(CodeInvalid, "version is empty: name the kept template version to roll back to (list_templates shows them)")
	}
	return s.writeIntent(ctx, pods, "rollback", func(ctx context.Context, pods []*corev1.Pod) (*UpgradeResult, map[string]any, error) {
		if gate != nil {
			if r, err := gate(pods); r != nil || err != nil {
				return r, nil, err
			}
		}
		active := workspace.Active(pods)
		id := workspace.ID(active)
		res := &UpgradeResult{Namespace: active.Namespace, ID: id, Owner: workspace.Owner(active), From: workspace.TemplateVersion(active), To: version}
		if active.DeletionTimestamp != nil {
			return nil, nil, errorf(CodeConflict, "workspace %q is being deleted; it cannot be rolled back", id)
		}
		up := upgradeInFlight(pods)
		if podName, ok := rollbackRequested(pods, up, version); ok {
			// This rollback's intent is there already: a retry whose first answer was lost (the
			// cache not caught up, its write refused with 409 by the first one's), or the same
			// rollback asked twice. It stands, as Upgrade's "requested already" does.
			res.Status, res.PodName = "upgrading", podName
			return res, nil, nil
		}
		if up != nil || active.Annotations[workspace.AnnUpgradeRequested] != "" {
			return nil, nil, errorf(CodeConflict, "workspace %q has an upgrade in flight; roll it back once that has ended", id)
		}
		if _, err := s.targetTemplate(ctx, true, active, version); err != nil {
			return nil, nil, err
		}
		if res.From == version {
			res.Status = "upToDate"
			return res, nil, nil
		}
		podName := workspace.NextPodName(active, version)
		res.Status, res.PodName = "upgrading", podName
		// Every companion of the intent is named, as Upgrade does.
		return res, map[string]any{
			workspace.AnnUpgradeRequested: s.cfg.Now().UTC().Format(time.RFC3339),
			workspace.AnnUpgradePod:       podName,
			workspace.AnnTargetVersion:    version,
			workspace.AnnAutoUpgrade:      nil,
			workspace.AnnPinned:           "true",
		}, nil
	})
}

// rollbackRequested reports whether the workspace of pods carries the intent of a rollback to
// version (nogoo9/target-version naming it, pinned), with the pod that rollback creates: on the
// active pod while the controller has not acted on it, or on the pod an upgrade in flight (up)
// replaces once it has, up then being that pod.
func rollbackRequested(pods []*corev1.Pod, up *corev1.Pod, version string) (string, bool) {
	holder := workspace.Active(pods)
	if up != nil {
		if holder = workspace.UpgradeOldPod(up, pods); holder == nil || workspace.TemplateVersion(up) != version {
			return "", false
		}
	}
	a := holder.Annotations
	if a[workspace.AnnUpgradeRequested] == "" || a[workspace.AnnTargetVersion] != version || !updatepolicy.IsPinned(holder) {
		return "", false
	}
	if up != nil {
		return up.Name, true
	}
	return a[workspace.AnnUpgradePod], true
}

// RollbackTemplate rolls every workspace of template name that does not run version back to it
// (admins only), in every watched namespace (one namespace when ctx names one), sorted by
// namespace and id. Workspaces in maintenance or with an upgrade in flight are skipped, saying so.
func (s *Service) RollbackTemplate(ctx context.Context, name, version string) ([]UpgradeResult, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if !c.IsAdmin {
		return nil, errorf(CodeForbidden, "Forbidden: only admin users can roll a template's workspaces back")
	}
	if err := templates.ValidateName(name); err != nil {
		return nil, errorf(CodeInvalid, "%v: name a template of nogoo9's namespace (a key such as \"team-b/node\" addresses no template here)", err)
	}
	if version == "" {
		return nil, errorf(CodeInvalid, "version is empty: name the kept template version to roll back to (list_templates shows them)")
	}
	latest, known := s.cfg.Templates.Get(name)
	if !known && s.cfg.History == nil {
		return nil, errorf(CodeNotFound, "template %q is not known: list_templates shows the templates", name)
	}
	if !known || latest.Version != version {
		// Not kept is 404, refused 409; a history that cannot be read (the API server is down)
		// is no answer about the version: 503, to be retried.
		if _, err := s.keptVersion(ctx, name, version); err != nil {
			return nil, err
		}
	}
	groups, err := s.everyWorkspace(ctx)
	if err != nil {
		return nil, err
	}
	// skip: a workspace in maintenance is left alone (asked again on the API server's pods when
	// a write finds its pod changed).
	skip := func(g []*corev1.Pod) (*UpgradeResult, error) {
		reason, ok := workspace.InMaintenance(g)
		if !ok {
			return nil, nil
		}
		a := workspace.Active(g)
		return &UpgradeResult{Namespace: a.Namespace, ID: workspace.ID(a), Owner: workspace.Owner(a), Status: "skipped", From: workspace.TemplateVersion(a), To: version,
			Error: fmt.Sprintf("workspace %q is in maintenance (%q) and was not rolled back: lift the maintenance first, or roll it back on its own", workspace.ID(a), reason)}, nil
	}
	out := []UpgradeResult{}
	for _, g := range groups {
		a := workspace.Active(g)
		// The template's key, as upgrade-all resolves it: a workspace of a team namespace that
		// follows its namespace's own template of the same name follows another template.
		if workspace.TemplateKey(a) != name {
			continue
		}
		if workspace.TemplateVersion(a) == version || a.DeletionTimestamp != nil {
			continue
		}
		if r, _ := skip(g); r != nil {
			out = append(out, *r)
			continue
		}
		r, err := s.rollback(ctx, g, version, skip)
		if err != nil {
			// A refusal (an upgrade in flight, a conflict) is a deliberate skip; a write that
			// failed is "failed", as upgrade-all lists it.
			status := "failed"
			if CodeOf(err) == CodeConflict {
				status = "skipped"
			}
			r = &UpgradeResult{Namespace: a.Namespace, ID: workspace.ID(a), Owner: workspace.Owner(a), Status: status, From: workspace.TemplateVersion(a), To: version, Error: err.Error()}
		}
		out = append(out, *r)
	}
	sortResults(out)
	return out, nil
}

// TemplateHistory lists the kept versions of template name of nogoo9's namespace, newest first
// (the current one included). A team namespace's kept versions are in list_templates, for a
// caller who may spawn there; a key such as "team-b/node" is refused here.
func (s *Service) TemplateHistory(ctx context.Context, name string) ([]templates.VersionInfo, error) {
	if _, err := caller(ctx); err != nil {
		return nil, err
	}
	if err := templates.ValidateName(name); err != nil {
		return nil, errorf(CodeInvalid, "%v: name a template of nogoo9's namespace; a team namespace's kept versions are in its template list (GET /api/v1/namespaces/{ns}/templates)", err)
	}
	if s.cfg.History == nil {
		return []templates.VersionInfo{}, nil
	}
	v, err := s.cfg.History.Versions(ctx, name)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: "reading the template history failed; try again", Err: err}
	}
	return v, nil
}

// pinnedSkip is upgrade-all's entry for a pinned workspace.
func pinnedSkip(g []*corev1.Pod, to string) (UpgradeResult, bool) {
	a := workspace.Active(g)
	if !updatepolicy.IsPinned(a) {
		return UpgradeResult{}, false
	}
	return UpgradeResult{Namespace: a.Namespace, ID: workspace.ID(a), Owner: workspace.Owner(a), Status: "skipped", From: workspace.TemplateVersion(a), To: to,
		Error: fmt.Sprintf("workspace %q is pinned to version %s and was not upgraded: unpin it first, or leave it", workspace.ID(a), workspace.TemplateVersion(a))}, true
}
