package ui

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// listFilter is the workspace list's query: an admin may list every user's (All) and filter;
// anyone may keep to one watched namespace (NS, the query's namespace).
type listFilter struct {
	All      bool
	Owner    string
	Phase    string
	Q        string
	Outdated bool
	NS       string
}

func parseFilter(r *http.Request) listFilter {
	q := r.URL.Query()
	return listFilter{
		All: q.Get("all") == "1", Owner: strings.TrimSpace(q.Get("owner")), Phase: q.Get("phase"),
		Q: strings.TrimSpace(q.Get("q")), Outdated: q.Get("outdated") == "1", NS: strings.TrimSpace(q.Get("namespace")),
	}
}

func (f listFilter) match(w *frontend.Workspace) bool {
	switch {
	case f.NS != "" && w.Namespace != f.NS:
		return false
	case f.Owner != "" && !strings.Contains(w.Owner, f.Owner):
		return false
	case f.Phase != "" && string(w.Phase) != f.Phase:
		return false
	case f.Q != "" && !strings.Contains(w.ID, f.Q) && !strings.Contains(strings.ToLower(w.Name), strings.ToLower(f.Q)):
		return false
	case f.Outdated && !w.IsOutdated:
		return false
	}
	return true
}

// values encodes the filter as a query.
func (f listFilter) values() url.Values {
	v := url.Values{}
	if f.All {
		v.Set("all", "1")
	}
	if f.Owner != "" {
		v.Set("owner", f.Owner)
	}
	if f.Phase != "" {
		v.Set("phase", f.Phase)
	}
	if f.Q != "" {
		v.Set("q", f.Q)
	}
	if f.Outdated {
		v.Set("outdated", "1")
	}
	if f.NS != "" {
		v.Set("namespace", f.NS)
	}
	return v
}

// path is the list page showing the filter (what its forms come back to).
func (f listFilter) path() string {
	if q := f.values().Encode(); q != "" {
		return "/?" + q
	}
	return "/"
}

type listData struct {
	Filter    listFilter
	Rows      []rowView
	Total     int
	StreamURL string
	Phases    []workspace.PhaseName
	Notice    string
	// Namespaces are the namespace filter's choices (none when nogoo9 watches only its own);
	// NSError says why the namespace asked for cannot be listed.
	Namespaces []string
	NSError    string
}

// rows lists the workspaces the filter shows, through the service: one namespace's when the
// filter names one (the service refuses a namespace it does not watch), else every watched one's.
func (u *UI) rows(r *request, f listFilter) ([]rowView, int, error) {
	o := frontend.ListOptions{AllUsers: f.All}
	var list []frontend.Workspace
	var err error
	if f.NS != "" {
		list, err = u.svc.ListWorkspaces(frontend.WithNamespace(r.ctx, f.NS), o)
	} else {
		list, err = u.listAll(r.ctx, o)
	}
	if err != nil {
		return nil, 0, err
	}
	out := make([]rowView, 0, len(list))
	for i := range list {
		if f.match(&list[i]) {
			out = append(out, u.row(r, list[i], f.All, f.path()))
		}
	}
	return out, len(list), nil
}

func (u *UI) listPage(w http.ResponseWriter, r *request) {
	f := parseFilter(r.Request)
	var seq uint64
	if u.o.Hub != nil {
		seq = u.o.Hub.Seq() // before the list: a change after this is replayed by the stream
	}
	d := listData{Filter: f, Phases: phases, Notice: notice(r.Request, r.sess.CSRF)}
	if nss := u.svc.Namespaces(); len(nss) > 1 {
		d.Namespaces = nss
	}
	title, nav := "My workspaces", "mine"
	if f.All {
		title, nav = "All workspaces", "all"
	}
	if f.All && !r.sess.Caller.IsAdmin {
		// The service's refusal names its API's parameter (allUsers); this page's is all=1.
		u.renderError(w, r.Request, r.sess, http.StatusForbidden, msgAllForAdmin)
		return
	}
	rows, total, err := u.rows(r, f)
	if err != nil {
		if code := frontend.CodeOf(err); f.NS == "" || (code != frontend.CodeNotFound && code != frontend.CodeInvalid) {
			status, msg := message(r.Request, err)
			u.renderError(w, r.Request, r.sess, status, msg)
			return
		}
		// A namespace the filter cannot show (unwatched, or no namespace name): the page with
		// the reason next to the choice, so another can be picked, and without the namespace
		// asked for (text of the link's choosing). No stream.
		status, msg := u.namespaceMessage(r.Request, err)
		d.NSError = msg
		u.render(w, r.Request, status, "list", u.page(r, title, nav, d))
		return
	}
	d.Rows, d.Total = rows, total
	if u.o.Hub != nil {
		v := f.values()
		v.Set("since", strconv.FormatUint(seq, 10))
		v.Set("rows", rowsDigest(rows)) // which rows the page shows: see listStream
		d.StreamURL = "/stream?" + v.Encode()
	}
	u.render(w, r.Request, http.StatusOK, "list", u.page(r, title, nav, d))
}

// msgAllForAdmin refuses a user's list of every user's workspaces (/?all=1) in the UI's words.
const msgAllForAdmin = "Forbidden: only admin users can list every user's workspaces; remove all=1 from the address, or follow My workspaces, to list yours."

// notice is the one-line confirmation of the action that redirected here (doneURL). Only fixed
// texts, and the workspace's id only when nogoo9 signed it for this session: a link cannot make the
// page say something of its choosing, nor name a workspace that is none ("Workspace
// nogoo9-has-moved-to-... is being deleted").
func notice(r *http.Request, csrf string) string {
	q := r.URL.Query()
	done, id := q.Get("done"), q.Get("id")
	format, ok := notices[done]
	if !ok || workspace.ValidateID(id) != nil || !hmac.Equal([]byte(q.Get("sig")), []byte(noticeSig(csrf, done, id))) {
		return ""
	}
	return fmt.Sprintf(format, id)
}

// doneURL is path (a path of this site) with the confirmation that done was done to workspace id,
// signed with the session's CSRF token (a secret of the session's pages) for notice to show it.
func doneURL(r *request, path, done, id string) string {
	to, _ := url.Parse(path)
	q := to.Query()
	q.Set("done", done)
	q.Set("id", id)
	q.Set("sig", noticeSig(r.sess.CSRF, done, id))
	to.RawQuery = q.Encode()
	return to.String()
}

func noticeSig(csrf, done, id string) string {
	mac := hmac.New(sha256.New, []byte(csrf))
	mac.Write([]byte("notice\x00" + done + "\x00" + id))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// notices are the confirmations notice shows, by the redirect's done=, each with the workspace id.
var notices = map[string]string{
	"created":         "Workspace %s is being created; its row below turns Ready when it can be opened.",
	"deleted":         "Workspace %s is being deleted; its volume is kept.",
	"upgrading":       "Upgrade of workspace %s requested.",
	"stopping":        "Workspace %s is stopping; its files and address are kept.",
	"starting":        "Workspace %s is starting.",
	"maintenance-on":  "Workspace %s is in maintenance.",
	"maintenance-off": "Workspace %s is back in service.",
	"pinned":          "Workspace %s is pinned to its version.",
	"unpinned":        "Workspace %s is no longer pinned.",
}

type workspaceData struct {
	Row         rowView
	Events      []frontend.Event
	EventsError string
	StreamURL   string
	Notice      string
	ReasonError string
}

func (u *UI) workspacePage(w http.ResponseWriter, r *request) {
	id := r.PathValue("id")
	var seq uint64
	if u.o.Hub != nil {
		seq = u.o.Hub.Seq()
	}
	ws, err := u.svc.GetWorkspace(r.ctx, id)
	if err != nil {
		status, msg := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	d := workspaceData{Row: u.row(r, *ws, true, u.wsPath(ws.Namespace, ws.ID)), Notice: notice(r.Request, r.sess.CSRF)}
	if r.URL.Query().Get("err") == "reason" {
		d.ReasonError = "Reason is empty: say why the workspace is out of service (users see it), e.g. \"disk migration until 14:00\"."
	}
	evs, _, err := u.svc.Events(r.ctx, id, false)
	if err != nil {
		_, d.EventsError = message(r.Request, err)
	}
	d.Events = evs
	if u.o.Hub != nil {
		d.StreamURL = fmt.Sprintf("%s/stream?since=%d", u.wsPath(ws.Namespace, id), seq)
	}
	u.render(w, r.Request, http.StatusOK, "workspace", u.page(r, "Workspace "+id, "", d))
}

// back is where an action returns to: the page the form was on (a path of this site).
func back(r *request, id, done string) string {
	return doneURL(r, safeNext(r.PostFormValue("back")), done, id)
}

func (u *UI) upgrade(w http.ResponseWriter, r *request) {
	id := r.PathValue("id")
	res, err := u.svc.Upgrade(r.ctx, id)
	if err != nil {
		status, msg := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	if r.Header.Get("HX-Request") == "" {
		http.Redirect(w, r.Request, back(r, id, "upgrading"), http.StatusSeeOther)
		return
	}
	var msg string
	switch res.Status {
	case "upToDate":
		msg = fmt.Sprintf("Already at the template's latest version %s.", res.To)
	case "upgrading":
		if res.To != "" {
			msg = fmt.Sprintf("Upgrade to %s requested.", res.To)
		} else {
			msg = "An upgrade is already in progress."
		}
	default:
		msg = res.Status
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<span role="status">%s</span>`, escape(msg))
}

func escape(s string) string {
	var b bytes.Buffer
	for _, c := range s {
		switch c {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&#34;")
		case '\'':
			b.WriteString("&#39;")
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

func (u *UI) deletePage(w http.ResponseWriter, r *request) {
	ws, err := u.svc.GetWorkspace(r.ctx, r.PathValue("id"))
	if err != nil {
		status, msg := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	u.render(w, r.Request, http.StatusOK, "delete", u.page(r, "Delete "+ws.ID, "", u.row(r, *ws, true, u.wsPath(ws.Namespace, ws.ID))))
}

func (u *UI) delete(w http.ResponseWriter, r *request) {
	id := r.PathValue("id")
	if _, err := u.svc.Delete(r.ctx, id); err != nil {
		status, msg := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	http.Redirect(w, r.Request, doneURL(r, "/", "deleted", id), http.StatusSeeOther)
}

func (u *UI) maintenance(w http.ResponseWriter, r *request) {
	id := r.PathValue("id")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	on := r.PostFormValue("action") == "on"
	if on && reason == "" {
		http.Redirect(w, r.Request, u.wsPath(r.PathValue("ns"), id)+"?err=reason#maintenance", http.StatusSeeOther)
		return
	}
	if !on {
		reason = ""
	}
	if _, err := u.svc.SetMaintenance(r.ctx, id, reason); err != nil {
		status, msg := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	done := "maintenance-off"
	if on {
		done = "maintenance-on"
	}
	http.Redirect(w, r.Request, doneURL(r, u.wsPath(r.PathValue("ns"), id), done, id), http.StatusSeeOther)
}

// pin pins or unpins a workspace (its owner or an admin; the service decides).
func (u *UI) pin(w http.ResponseWriter, r *request) {
	id := r.PathValue("id")
	on := r.PostFormValue("action") == "on"
	if _, err := u.svc.SetPinned(r.ctx, id, on); err != nil {
		status, msg := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	done := "unpinned"
	if on {
		done = "pinned"
	}
	http.Redirect(w, r.Request, doneURL(r, u.wsPath(r.PathValue("ns"), id), done, id), http.StatusSeeOther)
}

type upgradeAllData struct {
	Workspaces []frontend.Workspace
	// Users counts the owners of Workspaces (the confirmation), or of the upgrades requested (the
	// result).
	Users   int
	Results []resultView
	// Requested, Skipped and Failed count the results by status: "upgrading", "skipped" (pinned
	// or in maintenance; the result's Error says which) and "failed".
	Requested, Skipped, Failed int
}

// resultView is one workspace's result of Upgrade All, with the path of its page and its Key
// (rowKey) for its row's element id.
type resultView struct {
	frontend.UpgradeResult
	Path, Key string
}

func (u *UI) upgradeAllPage(w http.ResponseWriter, r *request) {
	list, err := u.listAll(r.ctx, frontend.ListOptions{AllUsers: true})
	if err != nil {
		status, msg := message(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	var d upgradeAllData
	for i := range list {
		if upgradable(&list[i]) {
			d.Workspaces = append(d.Workspaces, list[i])
		}
	}
	d.Users = len(owners(d.Workspaces))
	u.render(w, r.Request, http.StatusOK, "upgradeall", u.page(r, "Upgrade All Outdated", "", d))
}

func (u *UI) upgradeAll(w http.ResponseWriter, r *request) {
	res, err := u.svc.UpgradeAll(r.ctx)
	if err != nil {
		status, msg := message(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	d := upgradeAllData{}
	seen := map[string]bool{}
	for _, x := range res {
		d.Results = append(d.Results, resultView{UpgradeResult: x, Path: u.wsPath(x.Namespace, x.ID), Key: u.rowKey(x.Namespace, x.ID)})
		switch x.Status {
		case "upgrading":
			d.Requested++
			seen[x.Owner] = true
		case "skipped":
			d.Skipped++
		case "failed":
			d.Failed++
		}
	}
	d.Users = len(seen)
	u.render(w, r.Request, http.StatusOK, "upgraderesult", u.page(r, "Upgrade All Outdated: result", "", d))
}

// templateChoice is one template on the new-workspace form.
type templateChoice struct {
	frontend.TemplateInfo
	Context []string
}

type newData struct {
	Templates []templateChoice
	// ContextKeys is every key any valid template needs, with the templates needing it.
	ContextKeys []contextKey
	Form        spawnForm
	Errors      map[string]string
	// Namespaces are the watched namespaces to choose from (none when only nogoo9's own).
	Namespaces []string
	// TemplatesNamespace is the namespace whose spawn Templates are offered for.
	TemplatesNamespace string
}

type contextKey struct {
	Key   string
	For   []string
	Value string
}

type spawnForm struct {
	Template, ID, Name, Namespace string
	Context                       map[string]string
}

var contextRef = regexp.MustCompile(`\$?\$\{context\.([^}]*)\}`)

// requiredContext lists the context keys a template's placeholders use (${context.KEY}); key is
// the template's registry key (templateKey).
func (u *UI) requiredContext(key string) []string {
	t, ok := u.o.Templates.Get(key)
	if !ok || t == nil {
		return nil
	}
	raw, _ := json.Marshal(struct {
		Spec   any
		Claims any
	}{t.Spec, t.VolumeClaims})
	seen := map[string]bool{}
	var keys []string
	for _, m := range contextRef.FindAllSubmatch(raw, -1) {
		if bytes.HasPrefix(m[0], []byte("$$")) {
			continue // an escaped, literal "${"
		}
		if k := string(m[1]); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// templateKey is the registry key of a template offered to a spawn: the name for nogoo9's own,
// <namespace>/<name> for a team namespace's (templates.md, "Where a template is looked up").
func (u *UI) templateKey(t frontend.TemplateInfo) string {
	return templates.Key(t.Namespace, t.Name, u.svc.HomeNamespace())
}

// templatesFor lists the templates a spawn in ns can use: that namespace's own and nogoo9's not
// shadowed by one of them.
func (u *UI) templatesFor(r *request, ns string) ([]frontend.TemplateInfo, error) {
	return u.svc.ListTemplates(frontend.WithNamespace(r.ctx, ns))
}

func (u *UI) newData(r *request, form spawnForm, errs map[string]string) (newData, error) {
	d := newData{Form: form, Errors: errs}
	if nss := u.svc.Namespaces(); len(nss) > 1 {
		d.Namespaces = nss
	}
	if d.Form.Namespace == "" {
		d.Form.Namespace = u.svc.HomeNamespace()
	}
	d.TemplatesNamespace = d.Form.Namespace
	ts, err := u.templatesFor(r, d.Form.Namespace)
	if err != nil && d.Form.Namespace != u.svc.HomeNamespace() {
		// A namespace that is not watched (or not a name), or one the caller may not spawn in: say
		// so next to the choice and offer nogoo9's own namespace's templates.
		code := frontend.CodeOf(err)
		if code == frontend.CodeNotFound || code == frontend.CodeInvalid || code == frontend.CodeForbidden {
			if d.Errors == nil {
				d.Errors = map[string]string{}
			}
			if _, ok := d.Errors["namespace"]; !ok {
				// Not the service's text for a namespace that is none: it quotes the link's.
				_, d.Errors["namespace"] = u.namespaceMessage(r.Request, err)
			}
			if code != frontend.CodeForbidden {
				d.Form.Namespace = u.svc.HomeNamespace() // keep a refused choice, drop one that is not a namespace
			}
			d.TemplatesNamespace = u.svc.HomeNamespace()
			ts, err = u.templatesFor(r, d.TemplatesNamespace)
		}
	}
	if err != nil {
		return newData{}, err
	}
	need := map[string][]string{}
	for _, t := range ts {
		c := templateChoice{TemplateInfo: t}
		if t.Valid || t.Version != "" {
			c.Context = u.requiredContext(u.templateKey(t))
		}
		for _, k := range c.Context {
			need[k] = append(need[k], t.Name)
		}
		d.Templates = append(d.Templates, c)
	}
	for k, for_ := range need {
		d.ContextKeys = append(d.ContextKeys, contextKey{Key: k, For: for_, Value: form.Context[k]})
	}
	sort.Slice(d.ContextKeys, func(i, j int) bool { return d.ContextKeys[i].Key < d.ContextKeys[j].Key })
	if d.Form.Template == "" && len(ts) == 1 {
		d.Form.Template = ts[0].Name
	}
	return d, nil
}

func (u *UI) newPage(w http.ResponseWriter, r *request) {
	d, err := u.newData(r, spawnForm{Template: r.URL.Query().Get("template"), Namespace: r.URL.Query().Get("namespace")}, nil)
	if err != nil {
		status, msg := message(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	u.render(w, r.Request, http.StatusOK, "new", u.page(r, "New workspace", "new", d))
}

func (u *UI) spawn(w http.ResponseWriter, r *request) {
	form := spawnForm{
		Template: r.PostFormValue("template"), ID: strings.TrimSpace(r.PostFormValue("id")),
		Name: strings.TrimSpace(r.PostFormValue("name")), Namespace: r.PostFormValue("namespace"), Context: map[string]string{},
	}
	for k, v := range r.PostForm {
		if key, ok := strings.CutPrefix(k, "ctx."); ok && len(v) > 0 && strings.TrimSpace(v[0]) != "" {
			form.Context[key] = strings.TrimSpace(v[0])
		}
	}
	// Only the chosen template's keys go to the service: the form shows every template's. The
	// template is the one a spawn in the chosen namespace finds (its own first, then nogoo9's).
	// The registry answers this from memory; the service checks the namespace itself.
	need := u.requiredContext(u.svc.SpawnKey(form.Namespace, form.Template))
	ctx := map[string]string{}
	for _, k := range need {
		if v, ok := form.Context[k]; ok {
			ctx[k] = v
		}
	}
	ws, err := u.svc.Spawn(r.ctx, frontend.SpawnInput{Template: form.Template, ID: form.ID, Name: form.Name, Namespace: form.Namespace, Context: ctx})
	if err == nil {
		http.Redirect(w, r.Request, doneURL(r, "/", "created", ws.ID), http.StatusSeeOther)
		return
	}
	status, msg := message(r.Request, err)
	errs := map[string]string{spawnErrorField(err): msg}
	d, derr := u.newData(r, form, errs)
	if derr != nil {
		status, msg := message(r.Request, derr)
		u.renderError(w, r.Request, r.sess, status, msg)
		return
	}
	u.render(w, r.Request, status, "new", u.page(r, "New workspace", "new", d))
}

// spawnErrorField names the form field a spawn error belongs next to: the error texts are the
// service's (identical to REST and MCP), this only places them.
func spawnErrorField(err error) string {
	msg := strings.ToLower(err.Error())
	switch code := frontend.CodeOf(err); {
	case code == frontend.CodeQuotaExceeded:
		return "form"
	case strings.HasPrefix(msg, "namespace "), code == frontend.CodeForbidden && strings.Contains(msg, "in namespace"):
		return "namespace"
	case strings.Contains(msg, "context"):
		return "context"
	case strings.Contains(msg, "template"):
		return "template"
	case code == frontend.CodeConflict, strings.Contains(msg, " id"), strings.Contains(msg, "name"):
		return "id"
	}
	return "form"
}

// stop and start record the intent through the front end; the controller does the rest.
func (u *UI) stop(w http.ResponseWriter, r *request) {
	u.lifecycle(w, r, u.svc.Stop, "stopping", "Stop requested: the workspace keeps its files and address.")
}

func (u *UI) start(w http.ResponseWriter, r *request) {
	u.lifecycle(w, r, u.svc.Start, "starting", "Start requested: reload the workspace once it is Ready.")
}

func (u *UI) lifecycle(w http.ResponseWriter, r *request, op func(context.Context, string) (*frontend.Workspace, error), done, msg string) {
	id := r.PathValue("id")
	if _, err := op(r.ctx, id); err != nil {
		status, m := addressMessage(r.Request, err)
		u.renderError(w, r.Request, r.sess, status, m)
		return
	}
	if r.Header.Get("HX-Request") == "" {
		http.Redirect(w, r.Request, back(r, id, done), http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<span role="status">%s</span>`, escape(msg))
}
