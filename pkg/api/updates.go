package api

import (
	"net/http"
	"strconv"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Routes of the updates area (docs/api.md, "Update policies, pin, dry run, history").

// upgradeWith serves POST /workspaces/{id}/upgrade with its query: dryRun=true answers the
// preview and writes nothing; version=V (admins) moves the workspace to a kept earlier version.
func (h *rest) upgradeWith(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	if !q.Has("dryRun") && !q.Has("version") {
		return false
	}
	dry := false
	if v := q.Get("dryRun"); q.Has("dryRun") {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: "dryRun=" + workspace.Quote(v) + " is not a boolean: use dryRun=true or leave it out"})
			return true
		}
		dry = b
	}
	version := q.Get("version")
	if q.Has("version") && version == "" {
		writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: "version is empty: give the kept version to roll the workspace to (?version=V; GET /api/v1/templates/{name}/history lists them), or leave version out to upgrade to the latest; nothing was changed"})
		return true
	}
	if dry {
		res, err := h.svc.PreviewUpgrade(r.Context(), r.PathValue("id"), version)
		if err != nil {
			writeError(w, r, err)
			return true
		}
		writeJSON(w, http.StatusOK, res)
		return true
	}
	if version == "" {
		return false // dryRun=false: the upgrade itself
	}
	res, err := h.svc.Rollback(r.Context(), r.PathValue("id"), version)
	if err != nil {
		writeError(w, r, err)
		return true
	}
	status := http.StatusAccepted
	if res.Status == "upToDate" {
		status = http.StatusOK
	}
	writeJSON(w, status, res)
	return true
}

func (h *rest) pin(w http.ResponseWriter, r *http.Request) {
	h.setPinned(w, r, true)
}

func (h *rest) unpin(w http.ResponseWriter, r *http.Request) {
	h.setPinned(w, r, false)
}

func (h *rest) setPinned(w http.ResponseWriter, r *http.Request, pinned bool) {
	ws, err := h.svc.SetPinned(r.Context(), r.PathValue("id"), pinned)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (h *rest) setUpdatePolicy(w http.ResponseWriter, r *http.Request) {
	var in frontend.UpdatePolicyInput
	if err := decode(w, r, &in); err != nil {
		writeError(w, r, err)
		return
	}
	if in.Policy == "" {
		writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: "policy is empty: give manual, on-start, when-idle or window (DELETE makes the workspace follow its template)"})
		return
	}
	ws, err := h.svc.SetUpdatePolicy(r.Context(), r.PathValue("id"), in)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (h *rest) clearUpdatePolicy(w http.ResponseWriter, r *http.Request) {
	ws, err := h.svc.SetUpdatePolicy(r.Context(), r.PathValue("id"), frontend.UpdatePolicyInput{})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ws)
}

func (h *rest) templateHistory(w http.ResponseWriter, r *http.Request) {
	res, err := h.svc.TemplateHistory(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"versions": res})
}

type rollbackBody struct {
	Version string `json:"version"`
}

func (h *rest) rollbackTemplate(w http.ResponseWriter, r *http.Request) {
	var in rollbackBody
	if err := decode(w, r, &in); err != nil {
		writeError(w, r, err)
		return
	}
	if in.Version == "" {
		writeError(w, r, &frontend.Error{Code: frontend.CodeInvalid, Message: "version is empty: name the kept version to roll the template's workspaces back to (GET /api/v1/templates/{name}/history lists them)"})
		return
	}
	res, err := h.svc.RollbackTemplate(r.Context(), r.PathValue("name"), in.Version)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"upgrades": res})
}
