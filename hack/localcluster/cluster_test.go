package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// binDir returns the directory with the real control plane (these tests start real processes):
// skipped with -short, and a failure when it is not built (`make tools`), not a silent skip.
func binDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real control plane; skipped with -short")
	}
	dir := os.Getenv("NOGOO9_TOOLS")
	if dir == "" {
		dir = "../../bin"
	}
	dir, _ = filepath.Abs(dir)
	o := Options{BinDir: dir, Dir: "x"}
	o.defaults()
	if err := o.validate(); err != nil {
		t.Fatalf("control plane not built (run `make tools`, or set NOGOO9_TOOLS; -short skips these tests): %v", err)
	}
	return dir
}

func TestStartStopLeavesNothingRunning(t *testing.T) {
	bin := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{BinDir: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	if len(pids) != len(binaries) {
		t.Errorf("PIDs() = %v, want one per binary", pids)
	}
	nodes, err := c.Clientset().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 || !nodeReady(&nodes.Items[0]) {
		t.Errorf("nodes = %+v, err %v; want one Ready kwok node", nodes, err)
	}
	// A second cluster in the same dir is refused while this one runs.
	if _, err := Start(ctx, Options{BinDir: bin, Dir: c.Dir}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Start in the same dir: err = %v, want 'already running'", err)
	}
	if running := processesMentioning(t, c.Dir); len(running) != len(binaries) {
		t.Errorf("processes of the cluster while it runs = %v, want %d", running, len(binaries))
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
	if left := processesMentioning(t, c.Dir); len(left) > 0 {
		t.Errorf("processes left running after Stop: %v", left)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, stateFileName)); !os.IsNotExist(err) {
		t.Errorf("state file left after Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStartFailuresAreClearAndCleanUp(t *testing.T) {
	bin := binDir(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	tests := []struct {
		name        string
		opts        Options
		wantErr     []string
		wantRetries int
	}{
		{
			name:    "a pinned API server port in use is named before anything starts",
			opts:    Options{APIServerPort: busyPort},
			wantErr: []string{"in use", "APIServerPort"},
		},
		{
			name:    "a process that fails names itself and shows the end of its log",
			opts:    Options{ExtraAPIServerFlags: []string{"--no-such-flag=1"}},
			wantErr: []string{"kube-apiserver", "exited before it was ready", "last lines of", "no-such-flag"},
		},
		{
			// The scheduler is told to bind the busy port on every try, so every try fails.
			name:        "a process that finds its port taken is started again on fresh ports, then named",
			opts:        Options{ExtraSchedulerFlags: []string{"--secure-port=" + strconv.Itoa(busyPort)}},
			wantErr:     []string{"kube-scheduler", "address already in use"},
			wantRetries: portTries - 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tt.opts.BinDir, tt.opts.Dir = bin, t.TempDir()
			retries := 0
			tt.opts.Progress = func(format string, args ...any) {
				if strings.Contains(format, "starting again on fresh ports") {
					retries++
				}
			}
			c, err := Start(ctx, tt.opts)
			if err == nil {
				_ = c.Stop()
				t.Fatal("Start succeeded, want an error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not mention %q:\n%v", s, err)
				}
			}
			if retries != tt.wantRetries {
				t.Errorf("%d starts again on fresh ports, want %d", retries, tt.wantRetries)
			}
			// Whatever had started (etcd at least) was stopped.
			if left := processesMentioning(t, tt.opts.Dir); len(left) > 0 {
				t.Errorf("processes left running after a failed Start: %v", left)
			}
		})
	}
}

// processesMentioning lists live (non-zombie) processes whose command line mentions dir: every
// process of a cluster has its dir in its flags.
func processesMentioning(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		if _, state, err := procStat(pid); err != nil || state == "Z" {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return out
}
