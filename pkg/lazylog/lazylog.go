// Package lazylog defers a logger's WithValues until something is logged.
//
// controller-runtime gives every reconcile a logger of its own: the controller's name, the
// request's namespace and name and a reconcile id, added with three WithValues calls before the
// reconciler runs. zap (through zapr) encodes those values at once, into a cloned encoder with a
// buffer of its own, about a kilobyte per call. A reconcile that logs nothing, which is nearly
// every reconcile, throws all of it away: at start nogoo9's two controllers make a first pass over
// every workspace, and at 10,000 workspaces that was tens of MB of garbage in a few seconds
// (bench/history.md, "Start-up garbage").
//
// New wraps a logger so that WithValues only remembers its key/value pairs (one small slice);
// they are handed to the wrapped sink with the message when a line is actually written, which
// gives the same output: zapr encodes a logger's values and a call's key/value pairs alike, the
// logger's first. One difference: a value is rendered when a line is written, not when it was
// added, so a pointer to something that changes in between shows its later state (pass values:
// klog.KObj and klog.KRef copy the name; nogoo9 passes nothing else by pointer).
package lazylog

import "github.com/go-logr/logr"

// New returns l with WithValues deferred until a line is written.
func New(l logr.Logger) logr.Logger {
	s := l.GetSink()
	if s == nil {
		return l
	}
	if _, ok := s.(*sink); ok {
		return l
	}
	// The wrapper is one more frame between the caller and the sink: skip it, so a sink that
	// records the call site (zap's caller) names the caller, not this package.
	if cd, ok := s.(logr.CallDepthLogSink); ok {
		s = cd.WithCallDepth(1)
	}
	return logr.New(&sink{base: s})
}

// sink wraps base, holding the values of WithValues calls not yet handed to it. It is immutable:
// each WithValues and WithName returns a new sink.
type sink struct {
	base logr.LogSink
	kvs  []any
}

var (
	_ logr.LogSink          = (*sink)(nil)
	_ logr.CallDepthLogSink = (*sink)(nil)
)

// Init does nothing: base was initialised by the logger New wrapped (a second Init would add
// logr's frames to zapr's caller skip twice), and New added this package's frame.
func (s *sink) Init(logr.RuntimeInfo) {}

func (s *sink) Enabled(level int) bool { return s.base.Enabled(level) }

func (s *sink) Info(level int, msg string, kvs ...any) {
	s.base.Info(level, msg, s.with(kvs)...)
}

func (s *sink) Error(err error, msg string, kvs ...any) {
	s.base.Error(err, msg, s.with(kvs)...)
}

// with is the pending values followed by a call's own.
func (s *sink) with(kvs []any) []any {
	if len(s.kvs) == 0 {
		return kvs
	}
	out := make([]any, 0, len(s.kvs)+len(kvs))
	return append(append(out, s.kvs...), kvs...)
}

// WithValues remembers kvs; nothing is encoded until a line is written.
func (s *sink) WithValues(kvs ...any) logr.LogSink {
	if len(kvs) == 0 {
		return s
	}
	n := make([]any, 0, len(s.kvs)+len(kvs))
	return &sink{base: s.base, kvs: append(append(n, s.kvs...), kvs...)}
}

// WithName names the wrapped sink (cheap in zapr: no encoding) and keeps the pending values.
func (s *sink) WithName(name string) logr.LogSink {
	return &sink{base: s.base.WithName(name), kvs: s.kvs}
}

// WithCallDepth passes a helper's extra frames on to the wrapped sink.
func (s *sink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.base.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &sink{base: cd.WithCallDepth(depth), kvs: s.kvs}
}
