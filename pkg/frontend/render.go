package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

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

// clockNote is how a view's message depends on the clock. since is a Unix time in nanoseconds
// rather than a time.Time (24 bytes): that keeps a view's entry in the 96-byte size class
// instead of 112 (bench/history.md, "Seventh round").
type clockNote struct {
	kind  clockKind
	since int64
}

// noteSince is the clockNote of kind from t; clockOpaque when t does not fit in int64
// nanoseconds (before 1678 or after 2262).
func noteSince(kind clockKind, t time.Time) clockNote {
	n := t.UnixNano()
	if !time.Unix(0, n).Equal(t) {
		return clockNote{kind: clockOpaque}
	}
	return clockNote{kind: kind, since: n}
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
		return pendingNote(time.Unix(0, c.since), now)
	case clockGrace:
		return graceNote(time.Unix(0, c.since), now)
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
			return noteSince(clockPending, p.CreationTimestamp.Time)
		}
		if p.DeletionTimestamp != nil && msg == base.Message+graceNote(p.DeletionTimestamp.Time, probe) {
			return noteSince(clockGrace, p.DeletionTimestamp.Time)
		}
	}
	return clockNote{kind: clockOpaque}
}

// view is the entry's Workspace for the template's latest version at time now: what
// workspace.Describe(e.pods, latest, now) returns.
func (e *entry) view(latest string, now time.Time) Workspace {
	if e.clock.kind == clockOpaque {
		return e.describe(latest, now)
	}
	w := e.info()
	w.LatestTemplateVersion = latest
	w.IsOutdated = latest != "" && w.TemplateVersion != latest
	w.Message += e.clock.note(now)
	return w
}

// encoded is an entry's JSON for one latest template version, kept compact: the members whose
// values many workspaces share (their keys, the namespace, template and version, the phase) are
// in shape, one interned copy per combination, and only the values that are the workspace's own
// (id, names, owner, paths, times, message) in vals. Together they are what json.Marshal of the
// view gives: shape's literal parts with vals' runs (ending at ends) in the holes between them.
// With a clock note, noteByte in a value stands for the note's JSON-escaped text. For a typical
// workspace this holds about 240 bytes instead of 420 with the whole JSON (bench/history.md,
// "Seventh round").
type encoded struct {
	latest string
	// none: the view cannot be encoded ahead (see encoding); kept so that it is not tried again
	// for every list.
	none  bool
	shape unique.Handle[shape]
	vals  string
	ends  [maxHoles]uint16
	// esc is vals escaped as inside a JSON string, for the text copy of an MCP answer: made by
	// the first escaped write (the first MCP list of the workspace at this version), then kept,
	// so that later lists copy it instead of escaping again (escaping was three quarters of the
	// text copy's time, BenchmarkEscapedText). Views that no MCP list reads never make it.
	esc atomic.Pointer[escapedVals]
}

// escapedVals is an encoded's vals escaped (AppendEscaped), noteByte kept as it is, with the
// ends of its runs; or, with tooLong, the mark that they do not fit ends.
type escapedVals struct {
	vals    string
	ends    [maxHoles]uint16
	tooLong bool
}

// escaped returns enc's vals escaped, made once; nil when the end of a run but the last no
// longer fits ends once escaped (values near 64 KiB, set by hand: they are escaped at every
// write instead).
func (enc *encoded) escaped() *escapedVals {
	if e := enc.esc.Load(); e != nil {
		if e.tooLong {
			return nil
		}
		return e
	}
	s := enc.shape.Value()
	var e escapedVals
	b := make([]byte, 0, len(enc.vals)+len(enc.vals)/4)
	for i := range s.holes {
		before, after, note := cutNote(run(enc.vals, &enc.ends, s.holes, i))
		b = AppendEscaped(b, before)
		if note { // the note is put in at write time
			b = AppendEscaped(append(b, noteByte), after)
		}
		if i < s.holes-1 {
			if len(b) > math.MaxUint16 {
				enc.esc.Store(&escapedVals{tooLong: true}) // not tried again at every write
				return nil
			}
			e.ends[i] = uint16(len(b))
		}
	}
	e.vals = string(b)
	enc.esc.Store(&e)
	return &e
}

// shape is the part of a view's JSON that many workspaces share: literal parts, with a hole for
// a run of the workspace's own members between each two. Consecutive members of a workspace's
// own make one run, their keys included: fewer parts make the list's writing faster (each part
// is a copy), at the price of those keys' bytes.
type shape struct {
	lits  [maxHoles + 1]string
	holes int
	// esc are lits escaped as inside a JSON string (AppendEscaped), for the text copy of an MCP
	// answer (WriteEscapedJSON): made once per shape, which every workspace of the same
	// template, version and phase shares, so a list escapes only the workspaces' own values.
	esc [maxHoles + 1]string
}

// makeShape interns s, its escaped literals filled in (derived from lits, so equal shapes
// stay equal).
func makeShape(s shape) unique.Handle[shape] {
	for i := range s.holes + 1 {
		s.esc[i] = string(AppendEscaped(nil, s.lits[i]))
	}
	return unique.Make(s)
}

// maxHoles is the most runs of its own members a view's JSON may have to be kept compact; a view
// with more, or more than 64 KiB of its own, is kept whole instead (as one run). Info's members make two:
// id to userLabel, message to lastActivity.
const maxHoles = 3

// noteByte marks the clock note's place in a value. encoding/json escapes every control
// character inside a string and writes none outside one, so it never occurs in its output.
const noteByte = 1

// sharedMembers are the members written whole into an encoding's shape: values from a small set
// that many workspaces share. Every other member's value is the workspace's own.
var sharedMembers = map[string]bool{
	"namespace": true, "template": true, "templateNamespace": true, "templateVersion": true,
	"latestTemplateVersion": true, "isOutdated": true, "phase": true, "reason": true,
	"pinned": true, "updatePolicy": true, "updateWindow": true,
}

// noteMark stands for the clock note while encoding: JSON writes it as \u0000, which no
// message of a workspace contains.
const noteMark = "\x00"

var noteMarkJSON = []byte(`\u0000`)

// encoding returns e's JSON for latest, encoding it at most once per template version; nil for
// a clockOpaque entry, or one whose message holds the note's mark itself, which are encoded at
// read time.
func (e *entry) encoding(latest string) *encoded {
	if enc := e.enc.Load(); enc != nil && enc.latest == latest {
		if enc.none {
			return nil
		}
		return enc
	}
	if e.clock.kind == clockOpaque {
		return nil
	}
	w := e.view(latest, time.Time{})
	if e.clock.kind != clockNone {
		w.Message += noteMark
	}
	b, _ := json.Marshal(w)
	if e.clock.kind != clockNone {
		i := bytes.Index(b, noteMarkJSON)
		if i < 0 || bytes.Count(b, noteMarkJSON) != 1 {
			e.enc.Store(&encoded{latest: latest, none: true})
			return nil
		}
		b = append(append(b[:i:i], noteByte), b[i+len(noteMarkJSON):]...)
	}
	enc := encode(b)
	enc.latest = latest
	e.enc.Store(enc)
	return enc
}

// encode is b's compact form, or b kept whole, as one run of its own, when it cannot be split
// (more runs of its own than maxHoles, or over 64 KiB of them: an oversized annotation set by
// hand), so that a list still encodes such a view once per template version.
func encode(b []byte) *encoded {
	if enc := compact(b); enc != nil {
		return enc
	}
	return &encoded{shape: makeShape(shape{holes: 1}), vals: string(b)}
}

// compact splits the JSON object b (json.Marshal's output: no spaces, flat members) into its
// shape and its own values; nil when b is not such an object or has too many runs of its own
// (the caller keeps it whole then).
func compact(b []byte) *encoded {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil
	}
	var (
		s    shape
		enc  encoded
		vals = make([]byte, 0, len(b))
		lit  = make([]byte, 0, len(b)) // the literal part being built
		open bool                      // a run of the workspace's own is being built
	)
	lit = append(lit, '{')
	for i := 1; i < len(b)-1; {
		start := i // the member with its comma
		if b[i] == ',' {
			i++
		}
		// The key: encoding/json's field names need no escapes.
		if b[i] != '"' {
			return nil
		}
		k := bytes.IndexByte(b[i+1:], '"')
		if k < 0 || i+k+2 >= len(b) || b[i+k+2] != ':' {
			return nil
		}
		key := b[i+1 : i+1+k]
		i += k + 3
		end := valueEnd(b, i)
		if end < 0 {
			return nil
		}
		v := b[i:end]
		switch {
		case sharedMembers[string(key)] && bytes.IndexByte(v, noteByte) < 0:
			if open {
				if s.holes == maxHoles || len(vals) > math.MaxUint16 {
					return nil
				}
				s.lits[s.holes], enc.ends[s.holes] = string(lit), uint16(len(vals))
				s.holes++
				lit, open = lit[:0], false
			}
			lit = append(lit, b[start:end]...)
		case open:
			vals = append(vals, b[start:end]...)
		default:
			lit = append(lit, b[start:i]...)
			vals = append(vals, v...)
			open = true
		}
		i = end
	}
	if open {
		if s.holes == maxHoles || len(vals) > math.MaxUint16 {
			return nil
		}
		s.lits[s.holes], enc.ends[s.holes] = string(lit), uint16(len(vals))
		s.holes++
		lit = lit[:0]
	}
	s.lits[s.holes] = string(append(lit, '}'))
	enc.shape, enc.vals = makeShape(s), string(vals)
	return &enc
}

// valueEnd is the end of the flat JSON value (a string, a number, true, false or null) that
// starts at b[i], or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	if b[i] != '"' {
		for j := i; j < len(b); j++ {
			switch b[j] {
			case ',', '}':
				return j
			case '"', '{', '[':
				return -1
			}
		}
		return -1
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// appendTo appends the JSON enc stands for; note, when not nil, is the clock note's
// JSON-escaped text, put in its place.
func (enc *encoded) appendTo(buf []byte, note []byte) []byte { return enc.write(buf, note, false) }

// appendEscapedTo appends what appendTo appends, escaped as inside a JSON string (AppendEscaped):
// the shape's literals from their escaped copies, the workspace's own values escaped here. note,
// when not nil, is the clock note's JSON-escaped text escaped once more.
func (enc *encoded) appendEscapedTo(buf []byte, note []byte) []byte {
	return enc.write(buf, note, true)
}

func (enc *encoded) write(buf, note []byte, escaped bool) []byte {
	s := enc.shape.Value()
	lits, vals, ends := &s.lits, enc.vals, &enc.ends
	escapeVals := false // vals still to be escaped here
	if escaped {
		lits = &s.esc
		if e := enc.escaped(); e != nil {
			vals, ends = e.vals, &e.ends
		} else {
			escapeVals = true
		}
	}
	for i := range s.holes {
		buf = append(buf, lits[i]...)
		v := run(vals, ends, s.holes, i)
		if note != nil {
			if before, after, found := cutNote(v); found {
				buf = append(appendValue(buf, before, escapeVals), note...)
				v = after
			}
		}
		buf = appendValue(buf, v, escapeVals)
	}
	return append(buf, lits[s.holes]...)
}

// run is the i-th of the holes runs of vals whose ends are ends; the last run ends with vals
// (ends may not hold it: a view kept whole).
func run(vals string, ends *[maxHoles]uint16, holes, i int) string {
	start, end := 0, len(vals)
	if i > 0 {
		start = int(ends[i-1])
	}
	if i < holes-1 {
		end = int(ends[i])
	}
	return vals[start:end]
}

// cutNote splits a run at the clock note's place (noteByte), if it has one.
func cutNote(v string) (before, after string, found bool) {
	return strings.Cut(v, string(rune(noteByte)))
}

// appendValue appends v, escaped or as it is.
func appendValue(buf []byte, v string, escaped bool) []byte {
	if escaped {
		return AppendEscaped(buf, v)
	}
	return append(buf, v...)
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
func (l *WorkspaceList) WriteJSON(w io.Writer) error { return l.write(w, false) }

// WriteEscapedJSON writes what WriteJSON writes, escaped as inside a JSON string
// (AppendEscaped): the text copy of an MCP answer, without escaping the shared parts of every
// view again (TestCompactWritesWhatJSONWrites, TestRenderMatchesDescribe).
func (l *WorkspaceList) WriteEscapedJSON(w io.Writer) error { return l.write(w, true) }

func (l *WorkspaceList) write(w io.Writer, escaped bool) error {
	l.encodeMissing()
	buf := make([]byte, 0, min(32<<10, 1024*(len(l.entries)+1)))
	buf = append(buf, '[')
	notes := map[clockNote][]byte{} // entries created in the same second share a note
	for i, e := range l.entries {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = l.appendEntry(buf, e, notes, escaped)
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

// parallelEncodings is the least number of views without an encoding for which
// encodeMissing encodes them on several cores: fewer are encoded as the list is written.
const parallelEncodings = 512

// encodeMissing encodes the views that have no encoding for their template's latest version yet
// on every core (GOMAXPROCS goroutines), when there are at least parallelEncodings of them: the
// first list after a start encodes every view (describing each workspace and a reflective
// json.Marshal, 0.1-0.2 s at 10,000 workspaces on the cold start's path, bench/history.md,
// "Twelfth round: cold start"), and a new template version every view of the template. Each
// view's encoding is its own (entry.encoding is safe for concurrent use: two callers store the
// same encoding), so the list written is the same, encoded in parallel or not.
func (l *WorkspaceList) encodeMissing() {
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 || len(l.entries) < parallelEncodings {
		return
	}
	missing := 0
	for _, e := range l.entries {
		if e.clock.kind == clockOpaque {
			continue
		}
		if enc := e.enc.Load(); enc == nil || enc.latest != l.latest[e.template] {
			missing++
		}
	}
	if missing < parallelEncodings {
		return
	}
	var wg sync.WaitGroup
	chunk := (len(l.entries) + workers - 1) / workers
	for i := 0; i < len(l.entries); i += chunk {
		part := l.entries[i:min(i+chunk, len(l.entries))]
		wg.Go(func() {
			// A panic here would end the process; recovered, the view stays without an
			// encoding and the request encodes it again as the list is written, where a panic
			// is the request's own (net/http recovers it), as before the parallel encoding.
			defer func() { _ = recover() }()
			for _, e := range part {
				if e.clock.kind != clockOpaque {
					e.encoding(l.latest[e.template])
				}
			}
		})
	}
	wg.Wait()
}

// MarshalJSON implements json.Marshaler.
func (l *WorkspaceList) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	err := l.WriteJSON(&b)
	return b.Bytes(), err
}

// appendEntry appends e's JSON, or with escaped its escaped copy (notes then holds escaped
// notes: one list is written one way).
func (l *WorkspaceList) appendEntry(buf []byte, e *entry, notes map[clockNote][]byte, escaped bool) []byte {
	latest := l.latest[e.template]
	enc := e.encoding(latest)
	if enc == nil {
		b, _ := json.Marshal(e.view(latest, l.now))
		if escaped {
			return AppendEscaped(buf, b)
		}
		return append(buf, b...)
	}
	var note []byte
	if e.clock.kind != clockNone {
		var ok bool
		if note, ok = notes[e.clock]; !ok {
			note = jsonStringContent(e.clock.note(l.now))
			if escaped {
				note = AppendEscaped(make([]byte, 0, len(note)), note) // not nil: an empty note still replaces noteByte
			}
			notes[e.clock] = note
		}
	}
	if escaped {
		return enc.appendEscapedTo(buf, note)
	}
	return enc.appendTo(buf, note)
}

// jsonStringContent is s escaped as inside a JSON string, without the quotes.
func jsonStringContent(s string) []byte {
	b, _ := json.Marshal(s)
	return b[1 : len(b)-1]
}
