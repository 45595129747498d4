//go:build linux && !386

package proxy

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestWriteFDRaisesNoSIGPIPE: writeFD sends with MSG_NOSIGNAL, so a write to a connection that
// can no longer send (the peer reset it, or it was shut down) fails with EPIPE and no SIGPIPE is
// sent to the process; write(2), which the raw writes used before, sends one (the test checks
// that too, so it can tell). It runs in a child process of its own: while it listens for
// SIGPIPE, any other test's write to a broken connection would be counted.
func TestWriteFDRaisesNoSIGPIPE(t *testing.T) {
	if os.Getenv("NOGOO9_SIGPIPE_CHILD") != "1" {
		// -test.short: the child needs no kube-apiserver (TestMain starts one otherwise).
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteFDRaisesNoSIGPIPE$", "-test.count=1", "-test.short", "-test.v")
		cmd.Env = append(os.Environ(), "NOGOO9_SIGPIPE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestWriteFDRaisesNoSIGPIPE") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGPIPE, syscall.SIGALRM)
	defer signal.Stop(sigs)
	a, _ := tcpPair(t)
	if err := a.CloseWrite(); err != nil { // later sends fail with EPIPE
		t.Fatal(err)
	}
	raw, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// marked sends SIGALRM to this thread and returns the signals that arrived before it. A
	// signal sent to the thread is handled before the system call returns, and the process's
	// signals reach the channel lowest number first, so a SIGPIPE (13) raised before the marker
	// (14) is always received before it.
	marked := func() []os.Signal {
		var got []os.Signal
		if err := syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGALRM); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(30 * time.Second)
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGALRM {
					return got
				}
				got = append(got, s)
			case <-deadline:
				t.Fatal("the marker signal did not arrive within 30s")
			}
		}
	}
	msg := []byte("after the shutdown")
	var werr error
	var gotWrite []os.Signal
	if err := raw.Control(func(fd uintptr) {
		runtime.LockOSThread() // the marker goes to the thread that wrote
		defer runtime.UnlockOSThread()
		_, _, werr = writeFD(int(fd), msg)
		gotWrite = marked()
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(werr, syscall.EPIPE) {
		t.Errorf("writeFD after the shutdown: %v, want EPIPE", werr)
	}
	if len(gotWrite) != 0 {
		t.Errorf("writeFD raised %v, want no signal", gotWrite)
	}
	// The control: write(2) on the same socket raises SIGPIPE here.
	var gotControl []os.Signal
	if err := raw.Control(func(fd uintptr) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
		if e != syscall.EPIPE {
			t.Errorf("write(2) after the shutdown: %v, want EPIPE", e)
		}
		gotControl = marked()
	}); err != nil {
		t.Fatal(err)
	}
	if len(gotControl) != 1 || gotControl[0] != syscall.SIGPIPE {
		t.Errorf("write(2) raised %v, want SIGPIPE (the check above cannot tell otherwise)", gotControl)
	}
}
