package envvar

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestStringIsTheValueOrTheDefaultWhenUnsetOrEmpty(t *testing.T) {
	t.Setenv("NOGOO9_T_SET", "x")
	t.Setenv("NOGOO9_T_EMPTY", "")
	if got := String("NOGOO9_T_SET", "d"); got != "x" {
		t.Errorf("set: got %q, want x", got)
	}
	if got := String("NOGOO9_T_EMPTY", "d"); got != "d" {
		t.Errorf("empty: got %q, want the default d", got)
	}
	if got := String("NOGOO9_T_UNSET_NEVER", "d"); got != "d" {
		t.Errorf("unset: got %q, want the default d", got)
	}
}

func TestParsedValues(t *testing.T) {
	tests := []struct {
		name, value string
		check       func() (any, error)
		want        any
		wantErr     string
	}{
		{name: "int", value: "42", check: func() (any, error) { return Int("NOGOO9_T", 3) }, want: 42},
		{name: "int zero", value: "0", check: func() (any, error) { return Int("NOGOO9_T", 3) }, want: 0},
		{name: "empty int is the default", value: "", check: func() (any, error) { return Int("NOGOO9_T", 3) }, want: 3},
		{name: "negative int is refused and keeps the default", value: "-1", check: func() (any, error) { return Int("NOGOO9_T", 3) }, want: 3,
			wantErr: `environment variable NOGOO9_T="-1" is not a non-negative integer: set it to a number such as 3, or unset it`},
		{name: "word for an int is refused", value: "ten", check: func() (any, error) { return Int("NOGOO9_T", 3) }, want: 3,
			wantErr: `environment variable NOGOO9_T="ten" is not a non-negative integer: set it to a number such as 3, or unset it`},
		{name: "duration", value: "90s", check: func() (any, error) { return Duration("NOGOO9_T", time.Minute) }, want: 90 * time.Second},
		{name: "bare number for a duration is refused", value: "15", check: func() (any, error) { return Duration("NOGOO9_T", time.Minute) }, want: time.Minute,
			wantErr: `environment variable NOGOO9_T="15" is not a positive duration: set it to a value such as 90s or 20m, or unset it`},
		{name: "zero duration is refused", value: "0s", check: func() (any, error) { return Duration("NOGOO9_T", time.Minute) }, want: time.Minute,
			wantErr: `environment variable NOGOO9_T="0s" is not a positive duration: set it to a value such as 90s or 20m, or unset it`},
		{name: "bool", value: "1", check: func() (any, error) { return Bool("NOGOO9_T", false) }, want: true},
		{name: "false bool", value: "false", check: func() (any, error) { return Bool("NOGOO9_T", true) }, want: false},
		{name: "yes is not a bool", value: "yes", check: func() (any, error) { return Bool("NOGOO9_T", false) }, want: false,
			wantErr: `environment variable NOGOO9_T="yes" is not a boolean: set it to 1 or 0, or unset it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NOGOO9_T", tt.value)
			got, err := tt.check()
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestOrExitStopsWithTheMessageAndStatusTwo runs this test binary again with a bad value and
// checks the child ends as a program reading a flag default would.
func TestOrExitStopsWithTheMessageAndStatusTwo(t *testing.T) {
	if os.Getenv("NOGOO9_T_CHILD") == "1" {
		OrExit(Int("NOGOO9_T", 3))
		return // not reached when the value is bad
	}
	if got := OrExit(Int("NOGOO9_T_UNSET_NEVER", 3)); got != 3 {
		t.Fatalf("OrExit with no error: got %d, want 3", got)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrExitStopsWithTheMessageAndStatusTwo$")
	cmd.Env = append(os.Environ(), "NOGOO9_T_CHILD=1", "NOGOO9_T=ten")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("child ended with %v, want exit status 2; stderr: %s", err, stderr.String())
	}
	want := `: environment variable NOGOO9_T="ten" is not a non-negative integer: set it to a number such as 3, or unset it`
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not say %q", stderr.String(), want)
	}
}
