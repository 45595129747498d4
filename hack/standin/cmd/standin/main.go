// Command standin runs nogoo9's demo stand-in for workspace containers (package hack/standin) and
// is a terminal client for it. `make demo` starts `standin serve`; its printed WebSocket example
// is `standin term`.
//
//	standin serve --kubeconfig .cluster/kubeconfig --namespace default
//	standin term --token "$USER_TOKEN" ws://127.0.0.1:8091/ws/<namespace>/<id>/term
//	standin term --token "$USER_TOKEN" --send hello ws://127.0.0.1:8091/ws/<namespace>/<id>/term
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nogoo9/no-crd/hack/standin"
)

const usage = `usage:
  standin serve --kubeconfig FILE [--namespace NS] [-v]
      follow the workspace pods and serve each Running pod with a loopback IP on its ports
  standin term [--token T] [--send MSG ...] URL
      open the terminal at URL (ws:// or http://, through nogoo9's proxy: the workspace's path,
      /ws/<namespace>/<id>/, then term, e.g. ws://127.0.0.1:8091/ws/default/demo/term); type lines,
      see them echoed; reconnects when the proxy closes it (e.g. after an upgrade). With --send:
      send each MSG, print the banner and the replies, and exit.`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("missing command\n" + usage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:])
	case "term":
		return term(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "Kubeconfig of the demo cluster (required).")
	namespace := fs.String("namespace", "", "Namespace to follow (default: all).")
	verbose := fs.Bool("v", false, "Also log the HTTP servers' errors.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required: pass the demo cluster's kubeconfig, e.g. .cluster/kubeconfig")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", *kubeconfig, err)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s, err := standin.New(cfg, standin.Options{Namespace: *namespace, Log: log})
	if err != nil {
		return err
	}
	ns := *namespace
	if ns == "" {
		ns = "(all)"
	}
	return s.Run(ctx, func() { log.Info("watching workspace pods", "namespace", ns) })
}

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func term(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("term", flag.ContinueOnError)
	token := fs.String("token", os.Getenv("NOGOO9_TOKEN"), "Bearer token for the proxy (default $NOGOO9_TOKEN).")
	var send multiFlag
	fs.Var(&send, "send", "Send this message, print the reply, and exit after the last one (repeatable).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("term needs exactly one URL, e.g. ws://127.0.0.1:8091/ws/<namespace>/<id>/term\n" + usage)
	}
	url := fs.Arg(0)
	if len(send) > 0 {
		t, err := standin.DialTerminal(ctx, url, *token)
		if err != nil {
			return err
		}
		defer t.Close()
		fmt.Println(t.Banner)
		for _, m := range send {
			r, err := t.Send(m)
			if err != nil {
				return err
			}
			fmt.Println(r)
		}
		return nil
	}

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		t, err := dialRetrying(ctx, url, *token)
		if err != nil {
			return err
		}
		fmt.Println(t.Banner)
	session:
		for {
			select {
			case <-ctx.Done():
				_ = t.Close()
				return nil
			case l, ok := <-lines:
				if !ok {
					_ = t.Close()
					return nil
				}
				r, err := t.Send(l)
				if err != nil {
					fmt.Println("--", err)
					break session
				}
				fmt.Println(r)
			case <-t.Closed():
				break session
			}
		}
		_ = t.Close()
		fmt.Println("-- connection closed by the proxy (the pod went away?); reconnecting")
	}
}

// dialRetrying dials until it succeeds, ctx ends or 60 s of failures pass (a workspace between
// pods answers 502/503 for a moment).
func dialRetrying(ctx context.Context, url, token string) (*standin.Terminal, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		t, err := standin.DialTerminal(ctx, url, token)
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}
