package mcp

import (
	"net/http"
	"sync"
	"time"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// DefaultMaxSessionsPerUser bounds the MCP sessions one subject holds at once (Options).
const DefaultMaxSessionsPerUser = 16

// sessionIdle is how long a session without requests lives: the SDK closes it then
// (StreamableHTTPOptions.SessionTimeout), and the limiter forgets it.
const sessionIdle = 30 * time.Minute

// sessionHeader and protocolVersionHeader are the Streamable HTTP transport's session id and
// protocol version headers.
const (
	sessionHeader         = "Mcp-Session-Id"
	protocolVersionHeader = "Mcp-Protocol-Version"
)

// sessionLimiter bounds the MCP sessions of each authenticated subject. Each session holds
// goroutines and buffers in the SDK until it is deleted or idles out, and an agent that opens a
// session per call and never sends DELETE would otherwise grow the process for half an hour per
// session. When a subject opens a session beyond max, its least recently used session is closed
// (a DELETE to the SDK on the subject's behalf), so a well-behaved client is never refused.
// Only a session the SDK did open makes room: a POST without a session id that opens none (a
// wrong content type, a call before initialize) closes nothing.
//
// Only session ids the SDK handed out are recorded (taken from its response), never an id a
// client sends, so a client cannot grow the table.
//
// It also routes a subject's list_workspaces calls on its own sessions to fast (fastList), but
// only while the SDK saw the session within half its idle timeout: the calls fast answers do not
// reach the SDK, whose idle timer a client that only lists would otherwise run out.
type sessionLimiter struct {
	next http.Handler
	max  int
	idle time.Duration
	now  func() time.Time
	fast func(http.ResponseWriter, *http.Request) (bool, *http.Request) // nil: every request to next

	mu        sync.Mutex
	bySubject map[string]map[string]*seen // session id -> when
}

// seen is when a session last had a request, and when the SDK last had one.
type seen struct{ last, sdk time.Time }

func limitSessions(next http.Handler, max int, idle time.Duration) *sessionLimiter {
	if max <= 0 {
		max = DefaultMaxSessionsPerUser
	}
	return &sessionLimiter{next: next, max: max, idle: idle, now: time.Now, bySubject: map[string]map[string]*seen{}}
}

func (l *sessionLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := auth.CallerFrom(r.Context())
	if !ok {
		l.next.ServeHTTP(w, r)
		return
	}
	if id := r.Header.Get(sessionHeader); id != "" {
		if r.Method == http.MethodDelete {
			l.forget(c.Subject, id)
			l.next.ServeHTTP(w, r)
			return
		}
		if l.fast != nil && l.touch(c.Subject, id, false) {
			var done bool
			if done, r = l.fast(w, r); done {
				return
			}
		}
		l.touch(c.Subject, id, true)
		l.next.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost {
		l.next.ServeHTTP(w, r)
		return
	}
	// A POST without a session id may open a session (initialize); the SDK decides, and names
	// the session it opened in the response's header. The session is recorded, and room made for
	// it, when the SDK writes that header, before the client can read the answer and open its
	// next session: recorded after ServeHTTP returned, two sessions opened back to back could be
	// recorded in the wrong order and the wrong one closed first. The sessions that make room
	// are closed then too, so the client never holds more than max (the SDK's DELETE waits for
	// the calls in flight on the closed session).
	l.next.ServeHTTP(&recordSession{ResponseWriter: w, record: func(id string) {
		for _, old := range l.admit(c.Subject, id) {
			del := r.Clone(r.Context())
			del.Method, del.Body, del.ContentLength = http.MethodDelete, http.NoBody, 0
			del.Header.Set(sessionHeader, old)
			l.next.ServeHTTP(discard{h: http.Header{}}, del)
		}
	}}, r)
}

// recordSession hands the session id of a response to record once, when its header is written.
type recordSession struct {
	http.ResponseWriter
	record func(id string)
	done   bool
}

func (w *recordSession) see() {
	if w.done {
		return
	}
	w.done = true
	if id := w.Header().Get(sessionHeader); id != "" {
		w.record(id)
	}
}

func (w *recordSession) WriteHeader(code int) {
	w.see()
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordSession) Write(b []byte) (int, error) {
	w.see()
	return w.ResponseWriter.Write(b)
}

func (w *recordSession) Flush() {
	w.see()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recordSession) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// admit records the session id the SDK just opened for subject, after dropping the subject's
// sessions that idled out, and returns the least recently used ones that must close to make room
// for it. One lock for both: two sessions opened at once never both take the last place.
func (l *sessionLimiter) admit(subject, id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.bySubject[subject]
	if m == nil {
		m = map[string]*seen{}
		l.bySubject[subject] = m
	}
	now := l.now()
	for id, at := range m {
		if now.Sub(at.sdk) > l.idle {
			delete(m, id) // the SDK closed it
		}
	}
	var out []string
	for len(m) >= l.max {
		oldest, at := "", time.Time{}
		for id, t := range m {
			if oldest == "" || t.last.Before(at) {
				oldest, at = id, t.last
			}
		}
		delete(m, oldest)
		out = append(out, oldest)
	}
	m[id] = &seen{last: now, sdk: now}
	return out
}

// touch records a request on the subject's session id (one the SDK handed the subject), and one
// the SDK has too when sdk is set. It returns whether the SDK saw the session within half its
// idle timeout.
func (l *sessionLimiter) touch(subject, id string, sdk bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.bySubject[subject][id]
	if s == nil {
		return false
	}
	s.last = l.now()
	if sdk {
		s.sdk = s.last
	}
	return s.last.Sub(s.sdk) < l.idle/2
}

func (l *sessionLimiter) forget(subject, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.bySubject[subject]; m != nil {
		delete(m, id)
		if len(m) == 0 {
			delete(l.bySubject, subject)
		}
	}
}

// sessions is how many sessions subject holds (tests).
func (l *sessionLimiter) sessions(subject string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bySubject[subject])
}

// discard is the ResponseWriter of the limiter's own DELETEs.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}
