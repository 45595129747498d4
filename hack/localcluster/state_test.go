package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tail := " 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10"
	tests := []struct {
		name      string
		line      string
		wantStart uint64
		wantState string
		wantErr   bool
	}{
		{name: "plain command name", line: "1234 (etcd) S" + tail, wantStart: 987654, wantState: "S"},
		{name: "command name with spaces and parentheses", line: "1234 (a) b (c)) R" + tail, wantStart: 987654, wantState: "R"},
		{name: "zombie", line: "1234 (kwok) Z" + tail, wantStart: 987654, wantState: "Z"},
		{name: "no closing parenthesis", line: "1234 etcd S 1 2", wantErr: true},
		{name: "truncated line", line: "1234 (etcd) S 1 2 3", wantErr: true},
		{name: "start time not a number", line: "1234 (etcd) S" + strings.Replace(tail, "987654", "x", 1), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, state, err := parseStat(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && (start != tt.wantStart || state != tt.wantState) {
				t.Errorf("got (%d, %q), want (%d, %q)", start, state, tt.wantStart, tt.wantState)
			}
		})
	}
}

func self(t *testing.T) ProcessState {
	t.Helper()
	start, _, err := procStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	return ProcessState{Name: "test", PID: os.Getpid(), StartTime: start}
}

func TestSameProcessChecksStartTimeNotJustPID(t *testing.T) {
	me := self(t)
	tests := []struct {
		name string
		p    ProcessState
		want bool
	}{
		{name: "this very process", p: me, want: true},
		{name: "same pid but another start time is a reused pid", p: ProcessState{PID: me.PID, StartTime: me.StartTime + 1}, want: false},
		{name: "pid zero", p: ProcessState{PID: 0}, want: false},
		{name: "pid that cannot exist", p: ProcessState{PID: 1 << 30, StartTime: me.StartTime}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameProcess(tt.p); got != tt.want {
				t.Errorf("sameProcess(%+v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestStateFileRoundTripAndBadFile(t *testing.T) {
	dir := t.TempDir()
	if s, err := ReadState(dir); s != nil || err != nil {
		t.Fatalf("ReadState of an empty dir = %v, %v; want nil, nil", s, err)
	}
	want := &State{APIServerURL: "https://127.0.0.1:1", Processes: []ProcessState{{Name: "etcd", PID: 1, StartTime: 2}}}
	if err := writeState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadState(dir)
	if err != nil || got.APIServerURL != want.APIServerURL || len(got.Processes) != 1 || got.Processes[0] != want.Processes[0] {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, stateFileName), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(dir); err == nil || !strings.Contains(err.Error(), "not a localcluster state file") {
		t.Errorf("ReadState of garbage: err = %v", err)
	}
}

func TestPrepareDirRefusesARunningClusterAndClearsADeadOne(t *testing.T) {
	me := self(t)
	t.Run("state naming a live process is refused with the command to run", func(t *testing.T) {
		dir := t.TempDir()
		if err := writeState(dir, &State{Processes: []ProcessState{me}}); err != nil {
			t.Fatal(err)
		}
		err := prepareDir(dir)
		if err == nil || !strings.Contains(err.Error(), "already running") || !strings.Contains(err.Error(), "make cluster-down") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("state of dead processes is stale: data, keys and logs go, other files stay", func(t *testing.T) {
		dir := t.TempDir()
		dead := ProcessState{Name: "etcd", PID: me.PID, StartTime: me.StartTime + 1}
		if err := writeState(dir, &State{Processes: []ProcessState{dead}}); err != nil {
			t.Fatal(err)
		}
		l := newLayout(dir)
		for _, p := range []string{filepath.Join(l.etcdDataDir(), "member", "x"), l.logFile(KubeAPIServer), l.caCert(), filepath.Join(dir, "notes.txt")} {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := prepareDir(dir); err != nil {
			t.Fatal(err)
		}
		for _, gone := range []string{l.etcdDataDir(), l.logFile(KubeAPIServer), l.pkiDir(), l.stateFile()} {
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Errorf("%s survived (err %v)", gone, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
			t.Errorf("an unknown file was removed: %v", err)
		}
	})
}

func TestStopDirIsIdempotentAndLeavesOtherProcessesAlone(t *testing.T) {
	me := self(t)
	dir := t.TempDir()
	if err := StopDir(dir, time.Second, nil); err != nil {
		t.Fatalf("StopDir without a state file: %v", err)
	}
	// A recorded pid that now belongs to another process (here: this test) must not be signalled.
	if err := writeState(dir, &State{Processes: []ProcessState{{Name: "etcd", PID: me.PID, StartTime: me.StartTime + 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := StopDir(dir, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFileName)); !os.IsNotExist(err) {
		t.Errorf("state file left behind: %v", err)
	}
	if err := StopDir(dir, time.Second, nil); err != nil {
		t.Fatalf("second StopDir: %v", err)
	}
}
