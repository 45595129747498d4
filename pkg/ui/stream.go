package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// keepAlive is how often an idle stream sends a comment, so proxies keep it open and a logged-out
// session's stream ends.
const keepAlive = 25 * time.Second

// sse writes Server-Sent Events.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "500 Internal Server Error: streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(": connected\n\n"))
	f.Flush()
	return &sse{w: w, f: f}, true
}

// send writes one "update" event whose data is HTML of out-of-band swaps, with the hub's change
// number as its id (the browser sends it back as Last-Event-ID when it reconnects).
func (s *sse) send(seq uint64, html []byte) error {
	var b bytes.Buffer
	if seq > 0 {
		fmt.Fprintf(&b, "id: %d\n", seq)
	}
	b.WriteString("event: update\n")
	// A browser's event-stream parser ends a line at CR, LF or CRLF: a CR inside a field a tenant
	// wrote (a workspace's name, a container's termination message) would otherwise end the data
	// line and start a field of the attacker's choosing (retry:, id:, or a new event).
	// Each CR becomes a line end of its own: the data the browser joins back is the same but for
	// LF in place of CR, and no CR reaches the stream.
	html = bytes.ReplaceAll(bytes.ReplaceAll(html, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
	for _, line := range bytes.Split(html, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	if _, err := s.w.Write(b.Bytes()); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// closeEvent names the event after which the page's SSE extension closes the stream instead of
// reconnecting (the pages' sse-close attribute).
const closeEvent = "close"

// refuse tells the page why its stream ends for good and closes it: an update that swaps the
// page's live-status banner (every page with a stream has one) with msg, then the close event.
// An EventSource reads no event from an answer other than 200 text/event-stream: a refusal sent
// as a 4xx was an error the page never showed, and the extension retried it forever. login adds
// a link to the login page.
func (s *sse) refuse(msg string, login bool) {
	var b bytes.Buffer
	b.WriteString(`<template><p id="live-status" hx-swap-oob="true" class="error" role="alert">`)
	b.WriteString(escape(msg))
	if login {
		b.WriteString(` <a href="/login">Log in</a>`)
	}
	b.WriteString("</p></template>\n")
	if s.send(0, b.Bytes()) != nil {
		return
	}
	// An event with no data is not dispatched: it carries a word.
	if _, err := s.w.Write([]byte("event: " + closeEvent + "\ndata: " + closeEvent + "\n\n")); err == nil {
		s.f.Flush()
	}
}

// refuseStream answers a stream request nogoo9 does not serve with msg: an EventSource's (a
// page's) as a stream that shows it and closes (refuse), any other client's with status.
func refuseStream(w http.ResponseWriter, r *http.Request, status int, msg string, login bool) {
	if !isStreamRequest(r) {
		http.Error(w, msg, status)
		return
	}
	if out, ok := startSSE(w); ok {
		out.refuse(msg, login)
	}
}

// msgSessionEnded is what a stream says when its session has ended (logged out, in this tab or
// another, or expired).
const msgSessionEnded = "Your session has ended, so this page no longer updates: log in again."

// passing reports whether err is a failure that may pass by itself (the API server away, a
// fault of the server's): a stream it ends is left to the browser's reconnection, not refused.
func passing(err error) bool {
	code := frontend.CodeOf(err)
	return code == frontend.CodeUnavailable || code == frontend.CodeInternal
}

// isStreamRequest reports whether r is an EventSource's (a page's live stream).
func isStreamRequest(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *sse) ping() error {
	if _, err := s.w.Write([]byte(": ping\n\n")); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// since is where a stream starts: the page's change number, or the browser's Last-Event-ID when
// it reconnects.
func since(r *http.Request) uint64 {
	n, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	if id, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && id > n {
		n = id
	}
	return n
}

// listStream keeps a list page current: each change the hub reports is read back through the
// service with the session's caller and sent as the row's new HTML (or its removal).
func (u *UI) listStream(w http.ResponseWriter, r *request) {
	if u.o.Hub == nil {
		http.NotFound(w, r.Request)
		return
	}
	// Each stream holds a subscription, a goroutine and a connection for up to MaxStream, and
	// reads its rows back on every change: one user's are bounded (the workspace page's stream
	// is, by the service's follow limit).
	who := r.sess.Caller.Subject
	if !u.listStreams.take(who) {
		ctrl.LoggerFrom(r.Context()).WithName("ui").Info("request refused: too many live lists", "user", who, "limit", u.o.MaxListStreams)
		refuseStream(w, r.Request, http.StatusTooManyRequests, fmt.Sprintf("This list does not update live: you already have %d live workspace lists open, the most one user may have at once; close the tabs of the list you no longer need and reload this one.", u.o.MaxListStreams), false)
		return
	}
	defer u.listStreams.give(who)
	f := parseFilter(r.Request)
	sub := u.o.Hub.Subscribe(since(r.Request))
	defer sub.Close()
	// The rows the page shows (as far as this stream knows): a change to one of them is a row
	// swap, one that comes into the filter is inserted in order, one that leaves it is removed.
	// They are read here, after the page: if the page shows other rows, a row-by-row update
	// cannot tell (it would swap a row the page lacks, or keep one that is gone), so the first
	// update is then the whole list. That is the case when
	//   - changes between the page and this stream were replayed (the page is older than the
	//     rows below);
	//   - the browser reconnects (Last-Event-ID): the page has what the last stream sent, which
	//     the page's own rows digest no longer describes;
	//   - the rows below differ from the page's (its rows digest, in the stream's URL) although
	//     nothing was replayed: the hub hears of a pod change after the cache holds it (it is
	//     one more handler on the informer), so a change can be in the rows below and not yet in
	//     the hub. Its notice comes later and would update row by row a page that never had
	//     the row: the workspace would never appear (or never leave).
	refreshFirst := sub.Pending() || r.Header.Get("Last-Event-ID") != ""
	rows, _, err := u.rows(r, f)
	if err != nil {
		status, msg := u.namespaceMessage(r.Request, err)
		if passing(err) {
			http.Error(w, msg, status) // the browser reconnects, and the list then streams
			return
		}
		refuseStream(w, r.Request, status, "This list does not update live: "+msg, false)
		return
	}
	refreshFirst = refreshFirst || rowsDigest(rows) != r.URL.Query().Get("rows")
	shown := map[string]ref{} // by Key
	for _, row := range rows {
		shown[row.Key] = u.refOf(row.Workspace)
	}
	out, ok := startSSE(w)
	if !ok {
		return
	}
	// An admin's header counts outdated workspaces of every user. The count is kept from what
	// this stream reads back per change (the cache, which the hub's event already reflects),
	// not from a fresh list: the list's views are fed by another informer handler and may not
	// have seen that event yet.
	var outdatedBy map[string]bool
	sent := -1
	if r.sess.Caller.IsAdmin {
		// The page's button was counted when it was rendered; things may have moved since.
		outdatedBy = u.outdatedSet(r.ctx)
		sent = countTrue(outdatedBy)
		var buf bytes.Buffer
		if err := u.partial(&buf, "upgradeAllSlot", page{Caller: r.sess.Caller, Outdated: sent, CSRF: r.sess.CSRF}); err != nil || out.send(0, buf.Bytes()) != nil {
			return
		}
	}
	flush := func(ids []string, all bool, seq uint64) error {
		var buf bytes.Buffer
		refresh := all || refreshFirst
		refreshFirst = false
		recount := false // the header's count cannot be kept per change: count again
		if !refresh {
			sort.Strings(ids)
			// The hub names a changed workspace by its id: look it up in every watched namespace.
			for _, at := range u.refs(ids) {
				ws, err := u.svc.GetWorkspace(frontend.WithNamespace(r.ctx, at.ns), at.id)
				key := u.rowKey(at.ns, at.id)
				if outdatedBy != nil {
					switch {
					case err == nil:
						outdatedBy[key] = upgradable(ws)
					case frontend.CodeOf(err) == frontend.CodeNotFound:
						delete(outdatedBy, key)
					}
				}
				visible := err == nil && (f.All || ws.Owner == r.sess.Caller.Subject) && f.match(ws)
				switch code := frontend.CodeOf(err); {
				case err != nil && code == frontend.CodeInvalid:
					// An id label the service will not read a workspace by (anyone who may
					// write pods sets it): a list shows such a workspace all the same (an
					// admin's, from the pods), and reads it back with the whole list; a list
					// that does not show it has nothing to change. Before stop 51 every
					// open list of every user reloaded in full on each change of such a pod.
					if shown[key] != (ref{}) {
						refresh = true
					} else if outdatedBy != nil {
						recount = true
					}
				case err != nil && code != frontend.CodeNotFound && code != frontend.CodeForbidden:
					refresh = true // a read failed: start over from a full list
				case visible:
					if err := u.writeRow(&buf, r, f, *ws, shown); err != nil {
						return err
					}
				case shown[key] != (ref{}):
					delete(shown, key)
					fmt.Fprintf(&buf, "<template><tr id=\"ws-%s\" hx-swap-oob=\"delete\"></tr></template>\n", key)
				}
			}
		}
		if recount && !refresh {
			outdatedBy = u.outdatedSet(r.ctx)
		}
		if refresh {
			buf.Reset()
			rows, total, err := u.rows(r, f)
			if err != nil {
				return err
			}
			clear(shown)
			for _, row := range rows {
				shown[row.Key] = u.refOf(row.Workspace)
			}
			buf.WriteString("<template>")
			if err := u.partial(&buf, "rows", listData{Filter: f, Rows: rows, Total: total}); err != nil {
				return err
			}
			buf.WriteString("</template>\n")
			if outdatedBy != nil {
				outdatedBy = u.outdatedSet(r.ctx)
			}
		}
		if outdatedBy != nil {
			if n := countTrue(outdatedBy); n != sent || refresh {
				sent = n
				if err := u.partial(&buf, "upgradeAllSlot", page{Caller: r.sess.Caller, Outdated: n, CSRF: r.sess.CSRF}); err != nil {
					return err
				}
			}
		}
		if buf.Len() == 0 {
			return nil
		}
		return out.send(seq, buf.Bytes())
	}
	if refreshFirst && !sub.Pending() {
		// Nothing pending to bring the first update: send the list now. Without an id: it
		// settles no change number.
		if err := flush(nil, true, 0); err != nil {
			return
		}
	}
	u.streamLoop(r, sub, nil, flush, out)
}

// rowsDigest names the set of rows a list shows (their keys; their content does not matter: a
// change of a row's content is a row swap, which works on any page that has the row).
func rowsDigest(rows []rowView) string {
	keys := make([]string, len(rows))
	for i, row := range rows {
		keys[i] = row.Key
	}
	sort.Strings(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return hex.EncodeToString(sum[:8])
}

// writeRow writes the out-of-band swap of one row: a replacement when the page shows it, else an
// insertion after the row that precedes it in id order (rows stay sorted without a reload).
// shown holds the page's rows by Key.
func (u *UI) writeRow(buf *bytes.Buffer, r *request, f listFilter, ws frontend.Workspace, shown map[string]ref) error {
	key, at := u.rowKey(ws.Namespace, ws.ID), u.refOf(ws)
	if _, ok := shown[key]; ok {
		buf.WriteString("<template>")
		if err := u.partial(buf, "row", u.row(r, ws, f.All, f.path())); err != nil {
			return err
		}
		buf.WriteString("</template>\n")
		return nil
	}
	prev := ""
	for k, other := range shown {
		if u.before(other, at) && (prev == "" || u.before(shown[prev], other)) {
			prev = k
		}
	}
	target := "afterbegin:#rows"
	if prev != "" {
		target = "afterend:#ws-" + prev
	}
	if len(shown) == 0 {
		buf.WriteString(`<template><tr id="rows-empty" hx-swap-oob="delete"></tr></template>` + "\n")
	}
	shown[key] = at
	fmt.Fprintf(buf, `<template><tbody hx-swap-oob="%s">`, target)
	if err := u.partial(buf, "row", u.row(r, ws, f.All, f.path())); err != nil {
		return err
	}
	buf.WriteString("</tbody></template>\n")
	return nil
}

// outdatedSet is, per workspace of every user, whether Upgrade All Outdated would touch it.
func (u *UI) outdatedSet(ctx context.Context) map[string]bool {
	l, err := u.listAll(ctx, frontend.ListOptions{AllUsers: true})
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for i := range l {
		out[u.rowKey(l[i].Namespace, l[i].ID)] = upgradable(&l[i])
	}
	return out
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// workspaceStream keeps a workspace's page current: its summary on every change of its pods, and
// its events as they happen (from a watch the service opens, so the caller must be allowed to
// see them).
func (u *UI) workspaceStream(w http.ResponseWriter, r *request) {
	if u.o.Hub == nil {
		http.NotFound(w, r.Request)
		return
	}
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.ctx, min(u.o.MaxStream, frontend.MaxFollow))
	defer cancel()
	sub := u.o.Hub.Subscribe(since(r.Request))
	defer sub.Close()
	evs, es, err := u.svc.Events(ctx, id, true)
	if err != nil {
		status, msg := addressMessage(r.Request, err)
		if passing(err) {
			http.Error(w, msg, status) // the browser reconnects, and the page then streams
			return
		}
		refuseStream(w, r.Request, status, "This page does not update live: "+msg, false)
		return
	}
	defer es.Stop()
	out, ok := startSSE(w)
	if !ok {
		return
	}
	// The page's events were read before this watch began: replace them with this list, which
	// the watch continues without a gap.
	var buf bytes.Buffer
	buf.WriteString("<template>")
	if err := u.partial(&buf, "events", evs); err != nil {
		return
	}
	buf.WriteString("</template>\n")
	if err := out.send(0, buf.Bytes()); err != nil {
		return
	}
	events := make(chan frontend.Event, 64)
	go func() {
		defer close(events)
		for {
			e, err := es.Next(ctx)
			if err != nil {
				return
			}
			select {
			case events <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	r2 := *r
	r2.ctx = ctx
	u.streamLoop(&r2, sub, events, func(ids []string, all bool, seq uint64) error {
		if !all && !contains(ids, id) {
			return nil
		}
		var buf bytes.Buffer
		buf.WriteString("<template>")
		ws, err := u.svc.GetWorkspace(ctx, id)
		if err != nil {
			_, msg := addressMessage(r.Request, err)
			fmt.Fprintf(&buf, `<div id="summary" hx-swap-oob="true"><p class="error" role="alert">%s</p></div>`, escape(msg))
		} else if err := u.partial(&buf, "summary", u.row(r, *ws, true, u.wsPath(ws.Namespace, ws.ID))); err != nil {
			return err
		}
		buf.WriteString("</template>\n")
		if r.sess.Caller.IsAdmin {
			n, _ := u.outdated(ctx)
			if err := u.partial(&buf, "upgradeAllSlot", page{Caller: r.sess.Caller, Outdated: n, CSRF: r.sess.CSRF}); err != nil {
				return err
			}
		}
		return out.send(seq, buf.Bytes())
	}, out)
}

// ref is one workspace: its namespace and id.
type ref struct{ ns, id string }

// refOf is ws's ref, its namespace always named.
func (u *UI) refOf(ws frontend.Workspace) ref {
	if ws.Namespace == "" {
		return ref{u.svc.HomeNamespace(), ws.ID}
	}
	return ref{ws.Namespace, ws.ID}
}

// refs pairs each id with every watched namespace, nogoo9's own first.
func (u *UI) refs(ids []string) []ref {
	nss := u.svc.Namespaces()
	out := make([]ref, 0, len(ids)*len(nss))
	for _, id := range ids {
		out = append(out, ref{u.svc.HomeNamespace(), id})
		for _, ns := range nss {
			if ns != u.svc.HomeNamespace() {
				out = append(out, ref{ns, id})
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// streamLoop runs a stream until the client leaves, the session ends, the stream's time is up
// or a write fails. flush sends what the hub reported; events (may be nil) are appended to the
// page's event list. Each wake-up (a change, an event, the keep-alive) first checks that the
// stream may go on (goesOn), so nothing is sent for a session that has ended.
func (u *UI) streamLoop(r *request, sub *Sub, events <-chan frontend.Event, flush func(ids []string, all bool, seq uint64) error, out *sse) {
	ctx, cancel := context.WithTimeout(r.ctx, u.o.MaxStream)
	defer cancel()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		// Changes already pending when the stream starts are sent without a check: the
		// request's session was checked a moment ago (withSession).
		if sub.Pending() {
			ids, all, seq := sub.Take()
			if err := flush(ids, all, seq); err != nil {
				return
			}
		}
		var ev *frontend.Event
		ping := false
		select {
		case <-ctx.Done():
			return
		case <-sub.C():
		case e, ok := <-events:
			if !ok {
				return // the watch ended: the browser reconnects and reads the list again
			}
			ev = &e
		case <-tick.C:
			ping = true
		}
		if !u.goesOn(r, out) {
			return
		}
		switch {
		case ev != nil:
			var buf bytes.Buffer
			buf.WriteString(`<template><ol hx-swap-oob="beforeend:#events">`)
			if err := u.partial(&buf, "event", *ev); err != nil {
				return
			}
			buf.WriteString("</ol></template>\n")
			if err := out.send(0, buf.Bytes()); err != nil {
				return
			}
		case ping:
			if err := out.ping(); err != nil {
				return
			}
		}
	}
}

// goesOn reports whether stream r may send more: its session still lives (logged out, expired, or
// its token refused at a recheck: the stream says so and closes) and its caller is still who the
// stream was opened for. A caller whose admin status or groups changed at a recheck ends the
// stream without a word: the browser reconnects, and the new stream serves the caller as now. So
// does a token that could not be checked just now.
func (u *UI) goesOn(r *request, out *sse) bool {
	sess, ok := u.o.Sessions.Get(r.sessID)
	var err error
	if ok {
		sess, ok, err = u.liveSession(r.Request, r.sessID, sess)
	}
	switch {
	case err != nil:
		return false
	case !ok:
		out.refuse(msgSessionEnded, true)
		return false
	}
	return sess.Caller.IsAdmin == r.sess.Caller.IsAdmin && slices.Equal(sess.Caller.Groups, r.sess.Caller.Groups)
}
