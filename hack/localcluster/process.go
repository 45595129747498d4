package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane binary started by this package.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	err     error         // Wait's result, valid after done
}

// startProcess runs bin with args, stdout and stderr appended to logPath.
func startProcess(name, bin string, args []string, logPath string, detach bool) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own copy
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = procAttr(detach)
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after timeout. It returns once the
// process has been reaped, or an error if even SIGKILL did not end it in time.
func (p *process) stop(timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	pgid := p.pid() // Setpgid/Setsid: the group id is the leader's pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 10s after SIGKILL", p.name, p.pid())
	}
}

// failure describes a process that did not come up: its name, why, and the end of its log.
func (p *process) failure(reason error) error {
	return fmt.Errorf("%s: %w\n--- last lines of %s ---\n%s", p.name, reason, p.logPath, logTail(p.logPath, 25))
}

// exitError says how the process ended.
func (p *process) exitError() error {
	if p.err == nil {
		return errors.New("exited with status 0 before it was ready")
	}
	return fmt.Errorf("exited before it was ready: %v", p.err)
}

// logTail returns the last n lines of the file at path (at most 8 KiB).
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(data) > 8192 {
		data = data[len(data)-8192:]
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
