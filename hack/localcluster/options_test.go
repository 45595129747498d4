package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeBinDir(t *testing.T, skip ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range binaries {
		if len(skip) > 0 && b == skip[0] {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr []string // substrings; none means valid
	}{
		{name: "complete bin dir and a dir are valid", opts: Options{BinDir: fakeBinDir(t), Dir: "x"}},
		{name: "no bin dir says what to set", opts: Options{Dir: "x"}, wantErr: []string{"BinDir is empty"}},
		{name: "no dir says what to set", opts: Options{BinDir: fakeBinDir(t)}, wantErr: []string{"Dir is empty"}},
		{
			name:    "a missing binary is named and `make tools` suggested",
			opts:    Options{BinDir: fakeBinDir(t, "kwok"), Dir: "x"},
			wantErr: []string{"[kwok]", "make tools"},
		},
		{
			name:    "an empty bin dir lists every binary",
			opts:    Options{BinDir: t.TempDir(), Dir: "x"},
			wantErr: []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok", "make tools"},
		},
		{
			name:    "an out-of-range port names the option and value",
			opts:    Options{BinDir: fakeBinDir(t), Dir: "x", APIServerPort: 70000},
			wantErr: []string{"APIServerPort = 70000"},
		},
		{
			name:    "negative kwok pod workers says the default",
			opts:    Options{BinDir: fakeBinDir(t), Dir: "x", KwokPodWorkers: -1},
			wantErr: []string{"KwokPodWorkers = -1", "32"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.defaults()
			err := tt.opts.validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q, got nil", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	var o Options
	o.defaults()
	if o.Nodes != 1 || o.NodePods != 20000 || o.ServiceClusterIPRange == "" || o.StartTimeout == 0 || o.StopTimeout == 0 || o.Progress == nil {
		t.Errorf("defaults not filled: %+v", o)
	}
}
