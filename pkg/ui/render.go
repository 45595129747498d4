package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/session"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

//go:embed templates
var templateFS embed.FS

// assetVersion changes whenever an embedded asset does, so asset URLs can be cached for long.
var assetVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(staticFS, "static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := staticFS.ReadFile(path)
			h.Write([]byte(path))
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

// page is what every template gets.
type page struct {
	Title string
	// Caller and CSRF are set on pages with a session.
	Caller *auth.Caller
	CSRF   string
	// Outdated is, for an admin, how many workspaces are outdated (the header's button).
	Outdated int
	// Nav names the current section: mine, all, new.
	Nav     string
	Data    any
	Version string
}

type pageSet struct{ byName map[string]*template.Template }

var funcs = template.FuncMap{
	"phaseClass": func(p workspace.PhaseName) string { return "phase-" + strings.ToLower(string(p)) },
	"phaseIcon":  phaseIcon,
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"plural": func(n int, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	},
}

// phaseIcon is a glyph beside the phase's name, so a phase is told by its text and shape, not by
// colour alone.
func phaseIcon(p workspace.PhaseName) string {
	switch p {
	case workspace.PhaseReady:
		return "●"
	case workspace.PhaseUpgrading:
		return "↻"
	case workspace.PhaseScheduling, workspace.PhaseInitializing:
		return "◌"
	case workspace.PhaseUnavailable:
		return "⚠"
	case workspace.PhaseFailed:
		return "✖"
	case workspace.PhaseTerminating:
		return "⌫"
	case workspace.PhaseStopped:
		return "■"
	}
	return "?"
}

func parsePages() (*pageSet, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parse layout: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/pages/*.html")
	if err != nil {
		return nil, err
	}
	ps := &pageSet{byName: map[string]*template.Template{"partials": base}}
	for _, n := range names {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("ui: parse %s: %w", n, err)
		}
		ps.byName[strings.TrimSuffix(n[len("templates/pages/"):], ".html")] = t
	}
	return ps, nil
}

// render writes page name with status.
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t, ok := u.pages.byName[name]
	if !ok {
		http.Error(w, "500 Internal Server Error: no page "+name, http.StatusInternalServerError)
		return
	}
	p.Version = assetVersion
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		ctrl.LoggerFrom(r.Context()).WithName("ui").Error(err, "render page", "page", name)
		http.Error(w, "500 Internal Server Error: the page could not be rendered; try again", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// partial renders one named template of the partials (rows, slots) into buf.
func (u *UI) partial(buf *bytes.Buffer, name string, data any) error {
	return u.pages.byName["partials"].ExecuteTemplate(buf, name, data)
}

// page fills the session part of a page for r.
func (u *UI) page(r *request, title, nav string, data any) page {
	p := page{Title: title, Caller: r.sess.Caller, CSRF: r.sess.CSRF, Nav: nav, Data: data}
	if r.sess.Caller.IsAdmin {
		p.Outdated, _ = u.outdated(r.ctx)
	}
	return p
}

// outdated counts the outdated workspaces of every user and their owners (what Upgrade All
// Outdated would touch), through the service's admin list.
func (u *UI) outdated(ctx context.Context) (int, int) {
	l, err := u.listAll(ctx, frontend.ListOptions{AllUsers: true})
	if err != nil {
		return 0, 0
	}
	n, owners := 0, map[string]bool{}
	for i := range l {
		if upgradable(&l[i]) {
			n++
			owners[l[i].Owner] = true
		}
	}
	return n, len(owners)
}

// listAll lists the workspaces o selects in every watched namespace, nogoo9's own first.
func (u *UI) listAll(ctx context.Context, o frontend.ListOptions) ([]frontend.Workspace, error) {
	out, err := u.svc.ListWorkspaces(ctx, o)
	if err != nil {
		return nil, err
	}
	for _, ns := range u.svc.Namespaces() {
		if ns == u.svc.HomeNamespace() {
			continue
		}
		l, err := u.svc.ListWorkspaces(frontend.WithNamespace(ctx, ns), o)
		if err != nil {
			return nil, err
		}
		out = append(out, l...)
	}
	return out, nil
}

// rowKey is a row's Key, the part of its element ids that names the workspace: the id in nogoo9's
// own namespace (as before namespaces), "<ns>_<id>" in another. An id is a pod label that anyone
// who may write pods can set, not only what a spawn checked: an id or namespace with characters
// besides lower-case letters, digits and '-' ('_' would make two workspaces one key, '.' or ':'
// break the CSS selectors htmx swaps by) gives "_" and the hex of "<ns>/<id>" instead. So keys of
// different workspaces differ, and a key is made of [a-z0-9_-], never holds "__" and never ends
// in '_' (the element ids of a row rely on it: see the "row" template).
func (u *UI) rowKey(ns, id string) string {
	if ns == "" {
		ns = u.svc.HomeNamespace()
	}
	if !plainKeyPart(id) || !plainKeyPart(ns) {
		return "_" + hex.EncodeToString([]byte(ns+"/"+id))
	}
	if ns == u.svc.HomeNamespace() {
		return id
	}
	return ns + "_" + id
}

func plainKeyPart(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// before orders workspaces as listAll lists them: nogoo9's own namespace first, then the others by
// name; by id within a namespace.
func (u *UI) before(a, b ref) bool {
	home := u.svc.HomeNamespace()
	if (a.ns == home) != (b.ns == home) {
		return a.ns == home
	}
	if a.ns != b.ns {
		return a.ns < b.ns
	}
	return a.id < b.id
}

// upgradable mirrors which workspaces Service.UpgradeAll requests an upgrade of: outdated, not
// being deleted, neither pinned nor in maintenance (those it skips: they are not counted on its
// button nor listed on its confirmation).
func upgradable(w *frontend.Workspace) bool {
	return w.IsOutdated && w.Phase != workspace.PhaseTerminating && !w.Pinned && w.Maintenance == ""
}

// canUpgrade mirrors which workspaces Service.Upgrade upgrades for caller: outdated, not being
// deleted nor upgrading already, not pinned (unpin first), and in maintenance only for an admin.
func canUpgrade(w *frontend.Workspace, caller *auth.Caller) bool {
	return w.IsOutdated && w.Phase != workspace.PhaseTerminating && w.UpgradePod == "" && !w.Pinned &&
		(w.Maintenance == "" || caller != nil && caller.IsAdmin)
}

// message is the text of a service error as REST and MCP show it.
func message(r *http.Request, err error) (int, string) {
	code := frontend.CodeOf(err)
	var fe *frontend.Error
	if code == frontend.CodeInternal {
		ctrl.LoggerFrom(r.Context()).WithName("ui").Error(err, "request failed", "method", r.Method, "path", r.URL.Path)
		if !errors.As(err, &fe) {
			return http.StatusInternalServerError, "Something went wrong on the server; try again."
		}
	}
	if code == frontend.CodeUnavailable {
		ctrl.LoggerFrom(r.Context()).WithName("ui").Info("request failed: the API server is unavailable", "method", r.Method, "path", r.URL.Path, "error", err.Error())
		return http.StatusServiceUnavailable, "The Kubernetes API server cannot be reached or did not answer in time, so nogoo9 could not complete this; try again in a few seconds and reload to see whether it took effect."
	}
	status := code.HTTPStatus()
	return status, err.Error()
}

// addressMessage is message for a failed read or action on the workspace the request's path
// names. The service's texts for a path that names none quote the path's id or namespace
// ("workspace %q not found", "namespace %q is not watched"): text a link wrote, which no page
// shows (docs/security.md: a link could make nogoo9's page say "nogoo9 has moved: log in at ...").
// Those become fixed sentences; every other text names a workspace that exists.
func addressMessage(r *http.Request, err error) (int, string) {
	status, msg := message(r, err)
	switch frontend.CodeOf(err) {
	case frontend.CodeNotFound:
		return status, "Not found: no workspace you can see has this address (it was deleted, or the link is wrong); go back to your workspaces."
	case frontend.CodeInvalid:
		return status, "This address names no workspace: a workspace id is lower-case letters, digits and '-', in a namespace nogoo9 watches; go back to your workspaces."
	}
	return status, msg
}

// namespaceMessage is message for a namespace the query asked for that the service refused: as
// addressMessage, the service's text quotes the query; this one names the watched namespaces
// instead (the service's choice, not the link's).
func (u *UI) namespaceMessage(r *http.Request, err error) (int, string) {
	status, msg := message(r, err)
	watched := strings.Join(u.svc.Namespaces(), ", ")
	switch frontend.CodeOf(err) {
	case frontend.CodeNotFound:
		return status, "The namespace asked for is not watched by nogoo9: choose one of [" + watched + "], or ask the platform team to add yours to --namespaces."
	case frontend.CodeInvalid:
		return status, "The namespace asked for is not a namespace name: choose one of [" + watched + "]."
	}
	return status, msg
}

// renderError shows an error page; sess may be nil (no session).
func (u *UI) renderError(w http.ResponseWriter, r *http.Request, sess *session.Session, status int, msg string) {
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<span class="error" role="alert">%s</span>`, template.HTMLEscapeString(msg))
		return
	}
	p := page{Title: http.StatusText(status), Data: msg}
	if sess != nil {
		p.Caller, p.CSRF = sess.Caller, sess.CSRF
	}
	u.render(w, r, status, "error", p)
}

// rowView is one workspace as a row shows it.
type rowView struct {
	frontend.Workspace
	WorkspaceURL, PreviewURL string
	ShowOwner, CanUpgrade    bool
	// CanDelete offers Delete: not to the owner of a workspace in maintenance, whose delete
	// Service.Delete refuses (an operator's maintenance outlives no delete and re-spawn).
	CanDelete bool
	// CanStart and CanStop offer the Start and Stop buttons (docs/lifecycle.md).
	CanStart, CanStop bool
	CSRF              string
	// Path is the workspace's page (wsPath); ShowNamespace names the namespace in the row, when
	// nogoo9 watches more than one.
	Path          string
	ShowNamespace bool
	// Key names the workspace in the page's element ids (rowKey).
	Key string
	// Back is the page the row is on (a path of this site), where its forms return to without
	// JavaScript: the list with its filter, or the workspace's page.
	Back string
}

// row is workspace w as r's caller sees it on the page at back.
func (u *UI) row(r *request, w frontend.Workspace, showOwner bool, back string) rowView {
	v := rowView{Workspace: w, ShowOwner: showOwner, CSRF: r.sess.CSRF, Path: u.wsPath(w.Namespace, w.ID), ShowNamespace: len(u.svc.Namespaces()) > 1,
		Key: u.rowKey(w.Namespace, w.ID), Back: back}
	v.CanUpgrade = canUpgrade(&w, r.sess.Caller)
	v.CanDelete = w.Maintenance == "" || r.sess.Caller != nil && r.sess.Caller.IsAdmin
	v.CanStart = w.Phase == workspace.PhaseStopped
	v.CanStop = w.Phase != workspace.PhaseStopped && w.Phase != workspace.PhaseTerminating
	v.WorkspaceURL = u.routeURL(r.Request, w, w.WorkspacePath, false)
	v.PreviewURL = u.routeURL(r.Request, w, w.PreviewPath, true)
	return v
}

// routeURL is the link to the proxy's route of w for the path annotation p (its workspace or its
// preview), or "" for none. The annotation is tenant data (a pod's, or its template author's):
// the link is the route prefix the proxy makes of it (workspace.RoutePrefix, the proxy's own
// rules), never the annotation, which could continue the base URL into another host
// ("@evil.example/", ".evil.example/"). An annotation the proxy routes nothing for gets no link.
func (u *UI) routeURL(r *http.Request, w frontend.Workspace, p string, preview bool) string {
	if p == "" {
		return ""
	}
	prefix, err := workspace.RoutePrefix(p)
	if err != nil {
		return ""
	}
	if o := u.o.Origins; o != nil {
		// Each route on its own host (--proxy-workspace-domain), as the proxy serves it: the
		// workspace and its preview are two origins, neither the UI's.
		return o.URLFor(w.Namespace, w.ID, preview) + prefix
	}
	if base := u.proxyBase(r); base != "" {
		return base + prefix
	}
	return ""
}

// phases are the filter's choices, in the order a workspace goes through them.
var phases = []workspace.PhaseName{
	workspace.PhaseScheduling, workspace.PhaseInitializing, workspace.PhaseReady, workspace.PhaseUpgrading,
	workspace.PhaseUnavailable, workspace.PhaseFailed, workspace.PhaseTerminating, workspace.PhaseStopped,
}

// owners returns the distinct owners of ws, sorted.
func owners(ws []frontend.Workspace) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range ws {
		if !seen[w.Owner] {
			seen[w.Owner] = true
			out = append(out, w.Owner)
		}
	}
	sort.Strings(out)
	return out
}
