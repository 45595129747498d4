package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// A phase message may end with a note that depends on the clock: " (pending for 2m0s)" on a pod
// waiting for the scheduler, "; its grace period ended 1m0s ago, ..." on a pod being deleted.
// Views are computed once per informer event, so that note is added at read time.
type clockKind uint8

const (
	clockNone    clockKind = iota // the view does not depend on the clock
	clockPending                  // message + pendingNote(since, now)
	clockGrace                    // message + graceNote(since, now)
	clockOpaque                   // depends on the clock some other way: Describe at read time
)

type clockNote struct {
	kind  clockKind
	since time.Time
}

// pendingNote and graceNote mirror the notes workspace.Phase appends. probeClock checks the
// mirror against workspace.Describe for every view it builds, and TestRenderMatchesDescribe for
// every threshold, so a change of wording there makes views fall back to clockOpaque (correct,
// slower) and fails that test, never shows a wrong message.
func pendingNote(created, now time.Time) string {
	if created.IsZero() {
		return ""
	}
	age := now.Sub(created)
	if age < time.Second {
		return ""
	}
	return fmt.Sprintf(" (pending for %s)", age.Round(time.Second))
}

func graceNote(deleted, now time.Time) string {
	over := now.Sub(deleted)
	if over <= 0 {
		return ""
	}
	return fmt.Sprintf("; its grace period ended %s ago, the node may be unreachable", over.Round(time.Second))
}

func (c clockNote) note(now time.Time) string {
	switch c.kind {
	case clockPending:
		return pendingNote(c.since, now)
	case clockGrace:
		return graceNote(c.since, now)
	}
	return ""
}

// probeClock finds out how base (Describe at the zero time) changes with the clock, by describing
// the same pods long after every timestamp they carry.
func probeClock(pods []*corev1.Pod, base workspace.Info) clockNote {
	var last time.Time
	for _, p := range pods {
		if t := p.CreationTimestamp.Time; t.After(last) {
			last = t
		}
		if p.DeletionTimestamp != nil && p.DeletionTimestamp.After(last) {
			last = p.DeletionTimestamp.Time
		}
	}
	probe := last.Add(100 * time.Hour)
	far := workspace.Describe(pods, "", probe)
	msg := far.Message
	far.Message = base.Message
	switch {
	case far != base:
		return clockNote{kind: clockOpaque}
	case msg == base.Message:
		return clockNote{kind: clockNone}
	case base.Message == "":
		return clockNote{kind: clockOpaque}
	}
	for _, p := range pods {
		if msg == base.Message+pendingNote(p.CreationTimestamp.Time, probe) {
			return clockNote{kind: clockPending, since: p.CreationTimestamp.Time}
		}
		if p.DeletionTimestamp != nil && msg == base.Message+graceNote(p.DeletionTimestamp.Time, probe) {
			return clockNote{kind: clockGrace, since: p.DeletionTimestamp.Time}
		}
	}
	return clockNote{kind: clockOpaque}
}

// view is the entry's Workspace for the template's latest version at time now: what
// workspace.Describe(e.pods, latest, now) returns.
func (e *entry) view(latest string, now time.Time) Workspace {
	if e.clock.kind == clockOpaque {
		return describe(e.pods, latest, now)
	}
	w := e.info()
	w.LatestTemplateVersion = latest
	w.IsOutdated = latest != "" && w.TemplateVersion != latest
	w.Message += e.clock.note(now)
	return w
}

// encoded is an entry's JSON for one latest template version. With a clock note, the note's
// (JSON-escaped) text goes between head and tail; without, head is the whole object.
type encoded struct {
	latest     string
	head, tail []byte
}

// noteMark stands for the clock note while encoding: JSON writes it as \u0000, which no
// message of a workspace contains.
const noteMark = "\x00"

var noteMarkJSON = []byte(`\u0000`)

// encoding returns e's JSON for latest, encoding it at most once per template version; nil for
// a clockOpaque entry, which is encoded at read time.
func (e *entry) encoding(latest string) *encoded {
	if enc := e.enc.Load(); enc != nil && enc.latest == latest {
		return enc
	}
	if e.clock.kind == clockOpaque {
		return nil
	}
	w := e.view(latest, time.Time{})
	enc := &encoded{latest: latest}
	if e.clock.kind == clockNone {
		enc.head, _ = json.Marshal(w)
	} else {
		w.Message += noteMark
		b, _ := json.Marshal(w)
		i := bytes.Index(b, noteMarkJSON)
		if i < 0 || bytes.Count(b, noteMarkJSON) != 1 {
			return nil
		}
		enc.head, enc.tail = b[:i:i], b[i+len(noteMarkJSON):]
	}
	e.enc.Store(enc)
	return enc
}

// WorkspaceList is a consistent snapshot of workspace views, ready to encode.
type WorkspaceList struct {
	entries []*entry
	latest  map[string]string // template -> latest version, looked up once per list
	now     time.Time
	// Continue, when not empty, is the opaque value to pass as ListOptions.Continue for the next
	// page.
	Continue string
}

// Len is the number of workspaces in the list.
func (l *WorkspaceList) Len() int { return len(l.entries) }

// Workspaces returns the list as values (what ListWorkspaces returns).
func (l *WorkspaceList) Workspaces() []Workspace {
	out := make([]Workspace, len(l.entries))
	for i, e := range l.entries {
		out[i] = e.view(l.latest[e.template], l.now)
	}
	return out
}

// WriteJSON writes the list as a JSON array, each element what json.Marshal of its Workspace
// gives, from the views' cached encodings.
func (l *WorkspaceList) WriteJSON(w io.Writer) error {
	buf := make([]byte, 0, min(32<<10, 1024*(len(l.entries)+1)))
	buf = append(buf, '[')
	notes := map[clockNote][]byte{} // entries created in the same second share a note
	for i, e := range l.entries {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = l.appendEntry(buf, e, notes)
		if len(buf) >= 28<<10 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	buf = append(buf, ']')
	_, err := w.Write(buf)
	return err
}

// MarshalJSON implements json.Marshaler.
func (l *WorkspaceList) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	err := l.WriteJSON(&b)
	return b.Bytes(), err
}

func (l *WorkspaceList) appendEntry(buf []byte, e *entry, notes map[clockNote][]byte) []byte {
	latest := l.latest[e.template]
	enc := e.encoding(latest)
	if enc == nil {
		b, _ := json.Marshal(e.view(latest, l.now))
		return append(buf, b...)
	}
	buf = append(buf, enc.head...)
	if e.clock.kind == clockNone {
		return buf
	}
	note, ok := notes[e.clock]
	if !ok {
		note = jsonStringContent(e.clock.note(l.now))
		notes[e.clock] = note
	}
	buf = append(buf, note...)
	return append(buf, enc.tail...)
}

// jsonStringContent is s escaped as inside a JSON string, without the quotes.
func jsonStringContent(s string) []byte {
	b, _ := json.Marshal(s)
	return b[1 : len(b)-1]
}
