// Command cluster starts and stops nogoo9's local Kubernetes cluster (hack/localcluster) for
// `make cluster-up`, `make cluster-down` and `make demo`:
//
//	go run ./hack/cluster up --bin bin --dir .cluster
//	go run ./hack/cluster down --dir .cluster
//
// up leaves the processes running in their own sessions and records them in <dir>/state.json;
// down stops exactly those processes and is safe to run twice.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nogoo9/no-crd/hack/localcluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  cluster up   [--bin DIR] [--dir DIR] [--nodes N] [--timeout D] [--kcm-flag F ...]
  cluster down [--dir DIR] [--timeout D]`

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("missing command\n" + usage)
	}
	switch args[0] {
	case "up":
		return up(args[1:])
	case "down":
		return down(args[1:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	bin := fs.String("bin", "bin", "Directory with etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok (`make tools`).")
	dir := fs.String("dir", ".cluster", "Directory for the cluster's data, keys, kubeconfig, logs and state.json.")
	nodes := fs.Int("nodes", 1, "Number of kwok nodes.")
	timeout := fs.Duration("timeout", 3*time.Minute, "How long to wait for the cluster to be ready.")
	var kcmFlags multiFlag
	fs.Var(&kcmFlags, "kcm-flag", "Extra kube-controller-manager flag (repeatable), e.g. --kcm-flag=--kube-api-qps=1000.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		BinDir:                      *bin,
		Dir:                         *dir,
		Nodes:                       *nodes,
		ExtraControllerManagerFlags: kcmFlags,
		Detach:                      true,
		StartTimeout:                *timeout,
		Progress: func(format string, a ...any) {
			fmt.Printf("==> "+format+"\n", a...)
		},
	})
	if err != nil {
		return err
	}
	kubeconfig, _ := filepath.Rel(mustWd(), c.Kubeconfig)
	if kubeconfig == "" || strings.HasPrefix(kubeconfig, "..") {
		kubeconfig = c.Kubeconfig
	}
	fmt.Printf(`==> local cluster ready in %s
  API server:  %s
  kubeconfig:  %s
  OIDC issuer: %s
  logs:        %s/*.log
  try:         kubectl --kubeconfig %s get nodes
  stop:        make cluster-down   (or: go run ./hack/cluster down --dir %s)
`, time.Since(start).Round(100*time.Millisecond), c.APIServerURL, kubeconfig, c.IssuerURL, c.Dir, kubeconfig, *dir)
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	dir := fs.String("dir", ".cluster", "The directory given to `up`.")
	timeout := fs.Duration("timeout", 10*time.Second, "How long each process gets after SIGTERM before SIGKILL.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := localcluster.ReadState(*dir)
	if err != nil {
		return err
	}
	if s == nil {
		fmt.Printf("==> no cluster recorded in %s: nothing to stop\n", *dir)
		return nil
	}
	if err := localcluster.StopDir(*dir, *timeout, func(format string, a ...any) {
		fmt.Printf("==> "+format+"\n", a...)
	}); err != nil {
		return err
	}
	fmt.Printf("==> local cluster in %s stopped\n", *dir)
	return nil
}

func mustWd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "/"
	}
	return wd
}
