package lazylog

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// zapLogger is nogoo9's production logger (main.go), JSON to buf, without timestamps so that two
// runs compare byte for byte.
func zapLogger(buf *bytes.Buffer) logr.Logger {
	return zap.New(zap.WriteTo(buf), zap.Level(zapcore.Level(-1)), zap.RawZapOpts(), func(o *zap.Options) {
		o.Development = false
		o.EncoderConfigOptions = append(o.EncoderConfigOptions, func(c *zapcore.EncoderConfig) { c.TimeKey = "" })
	})
}

// use logs through l the way controller-runtime and nogoo9 do: names, values added in steps
// (controller, request, reconcile id), call-site values, V-levels, errors.
func use(l logr.Logger) {
	l = l.WithName("controller").WithValues("controller", "workspace")
	l.Info("starting")
	r := l.WithValues("namespace", "team-a", "name", "ws-1").WithValues("reconcileID", "1234")
	r.V(1).Info("phase changed", "from", "Ready", "to", "Upgrading")
	r.V(2).Info("not written: V(2) is below the level")
	r.WithName("sub").Error(errors.New("boom"), "upgrade failed", "pod", "ws-1-abc")
	l.WithValues().Info("no values added")
}

func TestLazyWritesWhatTheEagerLoggerWrites(t *testing.T) {
	var eager, lazy bytes.Buffer
	// One call site for both, so that the error's stack traces (which also show that the lazy
	// sink's frame is skipped) compare equal.
	for _, l := range []logr.Logger{zapLogger(&eager), New(zapLogger(&lazy))} {
		use(l)
	}
	if eager.String() != lazy.String() {
		t.Fatalf("lazy logger wrote\n%s\nthe eager logger wrote\n%s", lazy.String(), eager.String())
	}
	if n := strings.Count(eager.String(), "\n"); n != 4 {
		t.Fatalf("want 4 lines (V(2) is not written), got %d:\n%s", n, eager.String())
	}
	if !strings.Contains(lazy.String(), `"reconcileID":"1234"`) || !strings.Contains(lazy.String(), `"logger":"controller.sub"`) {
		t.Fatalf("values or names missing:\n%s", lazy.String())
	}
}

// recorder is a LogSink that counts WithValues calls and records what Info was handed.
type recorder struct {
	withValues *int
	lines      *[][]any
}

func (r recorder) Init(logr.RuntimeInfo)       {}
func (r recorder) Enabled(int) bool            { return true }
func (r recorder) Error(error, string, ...any) {}
func (r recorder) Info(_ int, _ string, kvs ...any) {
	*r.lines = append(*r.lines, kvs)
}
func (r recorder) WithValues(...any) logr.LogSink { *r.withValues++; return r }
func (r recorder) WithName(string) logr.LogSink   { return r }

func TestWithValuesReachesTheSinkOnlyWhenALineIsWritten(t *testing.T) {
	var calls int
	var lines [][]any
	l := New(logr.New(recorder{withValues: &calls, lines: &lines}))
	for i := 0; i < 100; i++ {
		_ = l.WithValues("namespace", "ns", "name", i).WithValues("reconcileID", i)
	}
	if calls != 0 {
		t.Fatalf("the wrapped sink's WithValues ran %d times for loggers that wrote nothing", calls)
	}
	l.WithValues("a", 1).WithValues("b", 2).Info("x", "c", 3)
	if calls != 0 || len(lines) != 1 {
		t.Fatalf("WithValues calls %d, lines %d; want 0 and 1", calls, len(lines))
	}
	want := []any{"a", 1, "b", 2, "c", 3}
	if got := lines[0]; len(got) != len(want) {
		t.Fatalf("line values %v, want %v", got, want)
	}
	for i := range want {
		if lines[0][i] != want[i] {
			t.Fatalf("line values %v, want %v", lines[0], want)
		}
	}
}

func TestNewWrapsOnce(t *testing.T) {
	l := New(zapLogger(&bytes.Buffer{}))
	if New(l).GetSink() != l.GetSink() {
		t.Fatal("New of a lazy logger wrapped it again")
	}
	if New(logr.Discard()).GetSink() != nil {
		t.Fatal("New of a discarding logger should leave it alone")
	}
}
