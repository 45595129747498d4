package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const stateFileName = "state.json"

// State is what Dir/state.json records about a running cluster, so another command (hack/cluster
// down, or the next Start) can find and stop exactly the processes it started.
type State struct {
	APIServerURL string         `json:"apiServerURL"`
	Kubeconfig   string         `json:"kubeconfig"`
	Processes    []ProcessState `json:"processes"`
}

// ProcessState identifies one process: a pid alone could have been reused, so the kernel's start
// time of the process (field 22 of /proc/<pid>/stat) is recorded with it.
type ProcessState struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

// ReadState reads dir's state file; it returns (nil, nil) if there is none.
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s is not a localcluster state file (%v): remove it if no cluster runs there", filepath.Join(dir, stateFileName), err)
	}
	return &s, nil
}

func writeState(dir string, s *State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFileName+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFileName))
}

// Running returns the recorded processes that still run as the same process (same pid and same
// start time), in recorded order.
func (s *State) Running() []ProcessState {
	var out []ProcessState
	for _, p := range s.Processes {
		if sameProcess(p) {
			out = append(out, p)
		}
	}
	return out
}

// sameProcess reports whether p's pid is alive (not a zombie) and started when recorded.
func sameProcess(p ProcessState) bool {
	if p.PID <= 0 {
		return false
	}
	st, state, err := procStat(p.PID)
	if err != nil || state == "Z" || state == "X" {
		return false
	}
	return st == p.StartTime
}

// procStat returns a process's start time (clock ticks after boot) and state letter.
func procStat(pid int) (uint64, string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	return parseStat(string(data))
}

// parseStat reads fields 3 (state) and 22 (starttime) of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may itself hold spaces or parentheses, so fields are
// counted from the last ')'.
func parseStat(line string) (uint64, string, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("malformed stat line %q", line)
	}
	fields := strings.Fields(line[i+1:])
	if len(fields) < 20 {
		return 0, "", fmt.Errorf("malformed stat line %q", line)
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("malformed start time in stat line: %w", err)
	}
	return start, fields[0], nil
}

// StopDir stops the cluster recorded in dir's state file: each recorded process that still runs
// as the same process gets SIGTERM on its process group, then SIGKILL after timeout, in reverse
// start order. Pids that now belong to other processes are left alone. It removes the state file
// once nothing recorded runs, and does nothing (no error) when there is no state file, so it is
// safe to call twice. logf, if set, gets one line per process.
func StopDir(dir string, timeout time.Duration, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s, err := ReadState(dir)
	if err != nil || s == nil {
		return err
	}
	var errs []error
	for i := len(s.Processes) - 1; i >= 0; i-- {
		p := s.Processes[i]
		if !sameProcess(p) {
			continue
		}
		logf("stopping %s (pid %d)", p.Name, p.PID)
		if err := stopRecorded(p, timeout); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(filepath.Join(dir, stateFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// stopRecorded stops a process this package started but that is not our child (so it cannot be
// waited for): signal its group, then poll until it is gone or a zombie.
func stopRecorded(p ProcessState, timeout time.Duration) error {
	_ = syscall.Kill(-p.PID, syscall.SIGTERM)
	if waitGone(p, timeout) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	if waitGone(p, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still running 10s after SIGKILL", p.Name, p.PID)
}

func waitGone(p ProcessState, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !sameProcess(p) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// prepareDir makes dir ready for a new cluster: it refuses a dir whose recorded cluster still
// runs, and clears what a dead one left behind (data, keys, logs, state) so the new cluster
// starts clean. Files it does not know are left alone.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cluster dir: %w", err)
	}
	s, err := ReadState(dir)
	if err != nil {
		return err
	}
	if s != nil {
		if running := s.Running(); len(running) > 0 {
			var names []string
			for _, p := range running {
				names = append(names, fmt.Sprintf("%s pid %d", p.Name, p.PID))
			}
			return fmt.Errorf("a cluster is already running in %s (%s): stop it with `make cluster-down` (or `go run ./hack/cluster down --dir %s`), or use another dir",
				dir, strings.Join(names, ", "), dir)
		}
	}
	l := newLayout(dir)
	stale := []string{l.etcdDataDir(), l.pkiDir(), l.kubeconfig(), l.kwokConfigFile(), l.stateFile(), l.volumesDir()}
	for _, b := range binaries {
		stale = append(stale, l.logFile(b))
	}
	for _, p := range stale {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("clear stale %s: %w", p, err)
		}
	}
	return nil
}
