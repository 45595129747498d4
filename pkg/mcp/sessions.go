package mcp

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// methodInitialize is the JSON-RPC method that opens a session.
const methodInitialize = "initialize"

// sessionLimiter bounds the MCP sessions of each authenticated subject. Each session holds
// goroutines and buffers in the SDK until it is deleted or idles out, and an agent that opens a
// session per call and never sends DELETE would otherwise grow the process for half an hour per
// session. When a subject opens a session beyond max, its least recently used session is closed,
// so a well-behaved client is never refused.
//
// The table holds exactly the sessions the SDK holds: a session is recorded when its initialize
// succeeded (opened, from the SDK's receiving middleware initialized), which is when the SDK keeps
// it; an initialize that fails (no params, a malformed protocol version) also gets a session id
// from the SDK, but the SDK closes that session again, and it is neither recorded nor makes room.
// A session is forgotten when the SDK closes it, whatever closed it (DELETE, its idle timeout,
// the limiter). Only sessions the SDK opened are recorded, never an id a client sends, so a
// client cannot grow the table.
//
// Closing a session to make room does not hold up the initialize that made room: the SDK's close
// waits for the calls in flight on the closed session, so it runs on its own goroutine. The
// closed session's requests in flight end first (as when a client drops them; the SDK would not
// deliver their answers once closing anyway), and its follows of get_workspace_events end with
// them (requestContext), which frees their places among the subject's follows and lets the close
// finish: every other tool returns at once. A DELETE ends the session's requests the same way.
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
	bySubject map[string]map[string]*seen // session id -> the session
}

// sdkSession is the part of an *mcp.ServerSession the limiter uses.
type sdkSession interface {
	ID() string
	Close() error
	// Wait returns once the session is closed.
	Wait() error
}

// seen is a session the SDK holds: when it last had a request, when the SDK last had one, and
// the context its requests end with (ended when the limiter forgets it).
type seen struct {
	last, sdk time.Time
	session   sdkSession
	closed    context.Context
	close     context.CancelFunc
}

func limitSessions(next http.Handler, max int, idle time.Duration) *sessionLimiter {
	if max <= 0 {
		max = DefaultMaxSessionsPerUser
	}
	return &sessionLimiter{next: next, max: max, idle: idle, now: time.Now, bySubject: map[string]map[string]*seen{}}
}

func (l *sessionLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := auth.CallerFrom(r.Context())
	id := r.Header.Get(sessionHeader)
	if !ok || id == "" {
		// A POST without a session id may open a session (initialize): the SDK decides, and
		// opened records it once its initialize succeeded.
		l.next.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodDelete {
		// The SDK's close waits for the session's calls in flight: its requests end first.
		l.forget(c.Subject, id)
		l.next.ServeHTTP(w, r)
		return
	}
	closed, fresh := l.touch(c.Subject, id, false)
	if closed == nil {
		// Not a session the SDK holds for this subject: the SDK answers (404, 403).
		l.next.ServeHTTP(w, r)
		return
	}
	if l.fast != nil && fresh {
		var done bool
		if done, r = l.fast(w, r); done {
			return
		}
	}
	l.touch(c.Subject, id, true)
	// The request ends when the session is closed (evicted or deleted): the SDK's close waits
	// for the calls in flight, and a follow ends with its request.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(closed, cancel)()
	l.next.ServeHTTP(w, r.WithContext(ctx))
}

// initialized is the SDK's receiving middleware that records each session whose initialize
// succeeded: the SDK keeps exactly those (it closes a session whose initialize failed when the
// POST ends). It runs before the SDK writes the answer, so before the client can read it and open
// its next session: two sessions opened back to back are recorded in their order, and the older
// one is the one closed first.
func (l *sessionLimiter) initialized(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || method != methodInitialize {
			return res, err
		}
		ss, ok := req.GetSession().(*mcp.ServerSession)
		ex := req.GetExtra()
		if !ok || ss.ID() == "" || ex == nil || ex.TokenInfo == nil {
			return res, err
		}
		if c, ok := ex.TokenInfo.Extra[callerExtra].(*auth.Caller); ok {
			l.opened(c.Subject, ss)
		}
		return res, err
	}
}

// opened records s, a session the SDK opened and keeps for subject, closes the subject's least
// recently used sessions to make room for it, and forgets s once the SDK closed it.
func (l *sessionLimiter) opened(subject string, s sdkSession) {
	for _, old := range l.admit(subject, s) {
		old.close()
		// The SDK's close waits for the calls in flight on old: not on this goroutine, which
		// answers the new session's initialize. It ends once those calls return: the requests
		// of old just ended, and its follows with them; every other tool returns at once.
		go func() { _ = old.session.Close() }()
	}
	go func() {
		_ = s.Wait()
		l.forget(subject, s.ID())
	}()
}

// admit records s for subject and returns the least recently used sessions that must close to
// make room for it (forgotten already). One lock for both: two sessions opened at once never
// both take the last place.
func (l *sessionLimiter) admit(subject string, s sdkSession) []*seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.bySubject[subject]
	if m == nil {
		m = map[string]*seen{}
		l.bySubject[subject] = m
	}
	id := s.ID()
	if m[id] != nil {
		return nil // the SDK names each session once
	}
	var out []*seen
	for len(m) >= l.max {
		var oldest *seen
		for _, t := range m {
			if oldest == nil || t.last.Before(oldest.last) {
				oldest = t
			}
		}
		delete(m, oldest.session.ID())
		out = append(out, oldest)
	}
	now := l.now()
	closed, end := context.WithCancel(context.Background())
	m[id] = &seen{last: now, sdk: now, session: s, closed: closed, close: end}
	return out
}

// touch records a request on the subject's session id, one the SDK has too when sdk is set. It
// returns the context the session's requests end with (nil when the SDK holds no such session
// for the subject), and whether the SDK saw the session within half its idle timeout.
func (l *sessionLimiter) touch(subject, id string, sdk bool) (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.bySubject[subject][id]
	if s == nil {
		return nil, false
	}
	s.last = l.now()
	if sdk {
		s.sdk = s.last
	}
	return s.closed, s.last.Sub(s.sdk) < l.idle/2
}

// forget drops the subject's session id and ends its requests.
func (l *sessionLimiter) forget(subject, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.bySubject[subject]
	if s := m[id]; s != nil {
		s.close()
		delete(m, id)
		if len(m) == 0 {
			delete(l.bySubject, subject)
		}
	}
}

// held reports whether the limiter holds subject's session id (tests).
func (l *sessionLimiter) held(subject, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bySubject[subject][id] != nil
}
