// Command proxybench measures the workspace proxy on loopback (figure 6 of `make bench`): HTTP
// keep-alive requests with 1 KiB bodies at 32 connections (wrk) and WebSocket echo round trips,
// each against the same backend hit directly, through nogoo9's proxy, through nginx (a plain
// reverse proxy with upstream keep-alive), through a plain httputil.ReverseProxy, through
// nogoo9's proxy on net/http's Transport and through nogoo9's proxy on net/http's server. The load generator runs on CPU 0, backend and proxies on
// CPU 1 (taskset). Rounds are interleaved and the median is reported with min and max, as a
// markdown table. Figure 7 (cutover) follows: a real kube-apiserver (envtest), the manager's
// informer and proxy.Setup, timing a side-by-side upgrade's switch and WebSocket close.
//
// Usage: go run ./hack/bench/proxybench [-rounds 3] [-duration 5s] [-cutover-rounds 5]
// [-rows direct,nogoo9,nginx,httputil,nogoo9std,nogoo9rp,nogoo9srv] [-cpuprofile f] [-out bench/proxy.md]
// [-base /tmp/proxybench-main] (other builds' proxies as extra rows of the same rounds)
// Needs wrk, nginx and taskset (Debian: apt-get install wrk nginx util-linux), and for figure 7
// kube-apiserver and etcd in $KUBEBUILDER_ASSETS or ./bin.
//
// The same binary is re-executed for its parts: backend, nogoo9, baseline and wsload.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/proxy"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

const benchToken = "bench-token"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "backend":
			exitOn(runBackend(os.Args[2:]))
			return
		case "nogoo9":
			exitOn(runNogoo9(os.Args[2:]))
			return
		case "baseline":
			exitOn(runBaseline(os.Args[2:]))
			return
		case "wsload":
			exitOn(runWSLoad(os.Args[2:]))
			return
		}
	}
	exitOn(runBench(os.Args[1:]))
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

// ---- parts ----

var body1K = bytes.Repeat([]byte("x"), 1024)

func runBackend(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	addr := fs.String("addr", "127.1.200.1:18080", "listen address (a kwok-style pod IP)")
	_ = fs.Parse(args)
	mux := http.NewServeMux()
	mux.Handle("/echo", websocket.Server{Handler: func(c *websocket.Conn) {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", "1024")
		_, _ = w.Write(body1K)
	})
	return serve(*addr, mux)
}

func serve(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, os.Interrupt)
		<-c
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

type staticAuth struct{}

func (staticAuth) Authenticate(r *http.Request) (*auth.Caller, error) {
	t, err := auth.TokenFromRequest(r)
	if err != nil {
		return nil, err
	}
	if t != benchToken {
		return nil, &auth.Error{Reason: "unknown token"}
	}
	return &auth.Caller{Subject: "bench"}, nil
}

// runNogoo9 serves nogoo9's proxy with one workspace whose ready pod is the backend. The pod is
// fed to the proxy as the informer would; no API server is involved in the request path anyway.
func runNogoo9(args []string) error {
	fs := flag.NewFlagSet("nogoo9", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18081", "listen address")
	backend := fs.String("backend", "127.1.200.1:18080", "backend address (pod IP:port)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the proxy to this file")
	std := fs.Bool("std-transport", false, "forward through net/http's Transport (proxy.Options.StandardTransport)")
	noFast := fs.Bool("no-fast-path", false, "forward every request through httputil.ReverseProxy (proxy.Options.NoFastPath)")
	stdServer := fs.Bool("standard-server", false, "serve every request with net/http's server (proxy.Options.StandardServer)")
	_ = fs.Parse(args)
	host, port, err := net.SplitHostPort(*backend)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	p, err := proxy.New(staticAuth{}, proxy.Options{Listener: ln, AllowedOrigins: []string{"*"}, StandardTransport: *std, NoFastPath: *noFast, StandardServer: *stdServer})
	if err != nil {
		return err
	}
	p.PodChanged(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "ws-bench-demo", Namespace: "default", UID: "bench-uid", CreationTimestamp: metav1.Now(),
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "demo"},
			Annotations: map[string]string{
				workspace.AnnOwner: "bench", workspace.AnnWorkspacePath: "/ws/bench/demo/", workspace.AnnWorkspacePort: port,
			},
		},
		Spec: corev1.PodSpec{NodeName: "kwok-node"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
		}},
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return p.Start(ctx)
}

// runBaseline is the plain httputil.ReverseProxy that FACTS.md measured (idle pool raised).
func runBaseline(args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18082", "listen address")
	backend := fs.String("backend", "127.1.200.1:18080", "backend address")
	_ = fs.Parse(args)
	u := &url.URL{Scheme: "http", Host: *backend}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() }, Transport: tr}
	return serve(*listen, rp)
}

// runWSLoad opens conns WebSockets and does echo round trips of a 64-byte message for duration;
// it prints {"rps":..., "p50_ms":..., "p99_ms":...} as JSON.
func runWSLoad(args []string) error {
	fs := flag.NewFlagSet("wsload", flag.ExitOnError)
	target := fs.String("url", "", "ws:// URL")
	conns := fs.Int("conns", 32, "connections")
	dur := fs.Duration("duration", 3*time.Second, "duration")
	_ = fs.Parse(args)
	u, err := url.Parse(*target)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(*dur)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg, err := websocket.NewConfig(u.String(), "http://"+u.Host)
			if err != nil {
				errs <- err
				return
			}
			cfg.Header.Set("Authorization", "Bearer "+benchToken)
			c, err := websocket.DialConfig(cfg)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := bytes.Repeat([]byte("m"), 64)
			buf := make([]byte, 4096)
			local := make([]time.Duration, 0, 1<<16)
			for time.Now().Before(deadline) {
				start := time.Now()
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadAtLeast(c, buf, len(msg)); err != nil {
					errs <- err
					return
				}
				local = append(local, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return fmt.Errorf("websocket %s: %w", *target, err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		return fmt.Errorf("no round trips completed")
	}
	out := map[string]float64{
		"rps":    float64(len(lat)) / dur.Seconds(),
		"p50_ms": ms(lat[len(lat)/2]),
		"p99_ms": ms(lat[len(lat)*99/100]),
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
