// Package envvar reads settings from environment variables, for flag defaults in the binary and
// the benchmark and for the end-to-end tests' knobs. An unset or empty variable means the
// default; a value that does not parse is an error that names the variable, its value and what to
// write instead, never a silent fallback to the default.
package envvar

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// String is the value of key, or def when key is unset or empty.
func String(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Int is key as a non-negative integer, or def when key is unset or empty.
func Int(key string, def int) (int, error) {
	return parse(key, def, "a non-negative integer: set it to a number such as 3", func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 0
	})
}

// Duration is key as a positive duration (time.ParseDuration's syntax), or def when key is unset
// or empty.
func Duration(key string, def time.Duration) (time.Duration, error) {
	return parse(key, def, "a positive duration: set it to a value such as 90s or 20m", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d > 0
	})
}

// Bool is key as a boolean (strconv.ParseBool's syntax: 1, t, true, 0, f, false, ...), or def
// when key is unset or empty.
func Bool(key string, def bool) (bool, error) {
	return parse(key, def, "a boolean: set it to 1 or 0", func(v string) (bool, bool) {
		b, err := strconv.ParseBool(v)
		return b, err == nil
	})
}

func parse[T any](key string, def T, want string, conv func(string) (T, bool)) (T, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	if x, ok := conv(v); ok {
		return x, nil
	}
	return def, fmt.Errorf("environment variable %s=%q is not %s, or unset it", key, v, want)
}

// OrExit is v, or, when err is not nil, ends the program with err on standard error, after the
// program's name, and exit status 2 (a usage error, as the flag package's): for flag defaults,
// read before flags are parsed.
func OrExit[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(2)
	}
	return v
}
