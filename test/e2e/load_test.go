package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/hack/standin"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// loadDuration is how long the load runs (NOGOO9_E2E_LOAD, default 15s; a longer soak behind
// the variable).
func loadDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("NOGOO9_E2E_LOAD")); err == nil && d > 0 {
		return d
	}
	return 15 * time.Second
}

// procStats reads a process's open file descriptors and resident memory from /proc.
func procStats(pid int) (fds int, rssKiB int) {
	GinkgoHelper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	Expect(err).NotTo(HaveOccurred())
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			rssKiB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return len(ents), rssKiB
}

// goroutines reads the total from the pprof goroutine profile.
func goroutines(pprofAddr string) (int, error) {
	resp, err := resClient.Get("http://" + pprofAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscanf(line, "goroutine profile: total %d", &n)
	return n, err
}

func (p *Nogoo9Process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// baseID is user i's workspace that the load proxies to.
func baseID(i int) string { return fmt.Sprintf("base-u%d", i) }

// latencies collects request durations by kind.
type latencies struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (l *latencies) add(kind string, d time.Duration) {
	l.mu.Lock()
	l.d[kind] = append(l.d[kind], d)
	l.mu.Unlock()
}

func (l *latencies) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := make([]string, 0, len(l.d))
	for k := range l.d {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for _, k := range kinds {
		ds := l.d[k]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		q := func(f float64) time.Duration {
			return ds[min(len(ds)-1, int(f*float64(len(ds))))].Round(100 * time.Microsecond)
		}
		fmt.Fprintf(&b, "%-8s n=%-6d p50=%-8s p99=%-8s max=%s\n", k, len(ds), q(0.5), q(0.99), ds[len(ds)-1].Round(time.Millisecond))
	}
	return b.String()
}

var _ = Describe("Resilience: load", Label("resilience", "load"), func() {
	It("100 concurrent clients on REST, MCP and the proxy (HTTP and WebSocket): no 5xx, every spawn in the cluster, nothing leaked", func(ctx SpecContext) {
		ns := NewNamespace()
		const clients, users, perUser = 100, 10, 3
		Expect(K8s.Create(ctx, pxTemplate(ns, "py", "1", "example.com/ide:1", 8080))).To(Succeed())
		ports, err := localcluster.FreePorts(1)
		Expect(err).NotTo(HaveOccurred())
		pprofAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		proc := StartNogoo9("--namespace="+ns, "--max-workspaces-per-user="+strconv.Itoa(perUser), "--pprof-bind-address="+pprofAddr,
			"--auth=oidc", "--oidc-issuer-url="+Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file="+Cluster.CAFile)
		proc.WaitControllersRunning() // their workers belong in the goroutine baseline below
		StartStandin(ns)
		tokens := make([]string, users)
		for i := range tokens {
			tokens[i], err = Cluster.ServiceAccountToken(ctx, ns, fmt.Sprintf("u%d", i), "nogoo9", 0)
			Expect(err).NotTo(HaveOccurred())
		}
		By("one ready workspace per user to proxy to")
		paths := make([]string, users)
		for i, t := range tokens {
			Eventually(func(g Gomega) {
				// Ids are unique per namespace. A retried spawn whose first answer was lost finds the
				// workspace there: 409, then get it.
				code, body, err := resCall(proc, t, "POST", "/api/v1/workspaces", map[string]any{"template": "py", "id": baseID(i)})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(BeElementOf(http.StatusCreated, http.StatusConflict), string(body))
				w := pxWorkspace(g, proc, t, baseID(i))
				g.Expect(w.WorkspacePath).To(HavePrefix("/ws/"))
				paths[i] = w.WorkspacePath
			}).Should(Succeed())
		}
		for i, t := range tokens {
			pxExpectPhase(proc, t, baseID(i), workspace.PhaseReady, "", "")
			Eventually(func(g Gomega) {
				code, _, body, err := pxDo(proc.ProxyURL+paths[i], t)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), body)
			}).Should(Succeed())
		}
		g0, err := goroutines(pprofAddr)
		Expect(err).NotTo(HaveOccurred())
		fd0, rss0 := procStats(proc.pid())

		By(fmt.Sprintf("%d clients for %s", clients, loadDuration()))
		lat := &latencies{d: map[string][]time.Duration{}}
		var fivexx, transportErrs atomic.Int64
		var mu sync.Mutex
		accepted := map[string]bool{} // "user/id" of every 201
		failures := []string{}
		fail := func(s string) {
			mu.Lock()
			if len(failures) < 20 {
				failures = append(failures, s)
			}
			mu.Unlock()
		}
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: clients}}
		do := func(kind, token, method, url, body string, hdr ...string) (int, []byte, http.Header) {
			req, _ := http.NewRequest(method, url, strings.NewReader(body))
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			start := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				transportErrs.Add(1)
				fail(kind + ": " + err.Error())
				return 0, nil, nil
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			lat.add(kind, time.Since(start))
			if resp.StatusCode >= 500 {
				fivexx.Add(1)
				fail(fmt.Sprintf("%s %s: %d %.200s", kind, url, resp.StatusCode, b))
			}
			return resp.StatusCode, b, resp.Header
		}
		end := time.Now().Add(loadDuration())
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				u := c % users
				tok := tokens[u]
				var term *standin.Terminal
				if c%5 == 4 {
					dctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					t, err := standin.DialTerminal(dctx, "ws://"+proc.ProxyAddr+paths[u]+"term", tok)
					cancel()
					if err != nil {
						transportErrs.Add(1)
						fail("websocket dial: " + err.Error())
					} else {
						term = t
						defer t.Close()
					}
				}
				for i := 0; time.Now().Before(end); i++ {
					switch (c + i) % 7 {
					case 0:
						id := fmt.Sprintf("l%d-%d", c, i)
						code, _, _ := do("spawn", tok, "POST", proc.APIURL+"/api/v1/workspaces", `{"template":"py","id":"`+id+`"}`)
						if code == http.StatusCreated {
							mu.Lock()
							accepted[fmt.Sprintf("u%d/%s", u, id)] = true
							mu.Unlock()
						} else if code != http.StatusTooManyRequests && code != 0 && code < 500 {
							fail(fmt.Sprintf("spawn %s: %d", id, code))
						}
					case 1:
						do("list", tok, "GET", proc.APIURL+"/api/v1/workspaces", "")
					case 2:
						do("get", tok, "GET", proc.APIURL+"/api/v1/workspaces/"+baseID(u), "")
					case 3:
						do("upgrade", tok, "POST", proc.APIURL+"/api/v1/workspaces/"+baseID(u)+"/upgrade", "")
					case 4:
						do("events", tok, "GET", proc.APIURL+"/api/v1/workspaces/"+baseID(u)+"/events?follow=true&timeout=1s", "")
					case 5:
						// A well-behaved agent: initialize, then end its session with DELETE. (Sessions
						// left without DELETE live until the 30-minute idle timeout: docs/reliability.md.)
						_, _, h := do("mcp", tok, "POST", proc.APIURL+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"load","version":"1"}}}`)
						if sid := h.Get("Mcp-Session-Id"); sid != "" {
							do("mcp-end", tok, "DELETE", proc.APIURL+"/mcp", "", "Mcp-Session-Id", sid)
						}
					case 6:
						if term != nil {
							start := time.Now()
							if _, err := term.Send("ping"); err != nil {
								transportErrs.Add(1)
								fail("websocket: " + err.Error())
								term = nil
							} else {
								lat.add("ws", time.Since(start))
							}
						} else {
							do("proxy", tok, "GET", proc.ProxyURL+paths[u], "")
						}
					}
				}
			}()
		}
		wg.Wait()
		report := lat.report()
		GinkgoWriter.Print(report)
		AddReportEntry("load latencies", report)
		Expect(failures).To(BeEmpty())
		Expect(fivexx.Load()).To(BeZero())
		Expect(transportErrs.Load()).To(BeZero())

		By("every accepted spawn is a workspace in the cluster, and no user is over the quota")
		var pods corev1.PodList
		Expect(K8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace})).To(Succeed())
		perOwner := map[string]map[string]bool{}
		have := map[string]bool{}
		for _, p := range pods.Items {
			o := workspace.Owner(&p)
			if perOwner[o] == nil {
				perOwner[o] = map[string]bool{}
			}
			perOwner[o][workspace.ID(&p)] = true
			have[strings.TrimPrefix(o, "system:serviceaccount:"+ns+":")+"/"+workspace.ID(&p)] = true
		}
		for k := range accepted {
			Expect(have).To(HaveKey(k))
		}
		for o, ids := range perOwner {
			Expect(len(ids)).To(BeNumerically("<=", perUser), "owner %s has %d workspaces", o, len(ids))
		}
		GinkgoWriter.Printf("accepted spawns: %d\n", len(accepted))

		By("afterwards: goroutines and file descriptors back to the baseline (idle keep-alives to pods swept), memory within 64 MiB of it")
		hc.CloseIdleConnections()
		var g1, fd1, rss1 int
		Eventually(func(g Gomega) {
			var err error
			g1, err = goroutines(pprofAddr)
			g.Expect(err).NotTo(HaveOccurred())
			fd1, rss1 = procStats(proc.pid())
			g.Expect(g1).To(BeNumerically("<=", g0+10), "goroutines %d, baseline %d", g1, g0)
			// Beside the 10 of the goroutine bound: the proxy may keep an idle keep-alive connection
			// to each of the `users` pods it served until its sweep.
			g.Expect(fd1).To(BeNumerically("<=", fd0+10+users), "fds %d, baseline %d", fd1, fd0)
		}, 200*time.Second).Should(Succeed(), "the proxy closes keep-alive connections to pods idle for 90 s, on a sweep that may come up to 90 s later")
		Expect(rss1).To(BeNumerically("<=", rss0+64*1024), "RSS %d KiB, baseline %d KiB", rss1, rss0)
		figures := fmt.Sprintf("goroutines %d -> %d, fds %d -> %d, RSS %d -> %d KiB", g0, g1, fd0, fd1, rss0, rss1)
		GinkgoWriter.Println(figures)
		AddReportEntry("load resources", figures)
		b, _ := json.Marshal(map[string]any{"accepted": len(accepted)})
		AddReportEntry("load spawns", string(b))
	})

	It("quota across two front-end replicas under concurrent spawns is never exceeded", func(ctx SpecContext) {
		ns := NewNamespace()
		const perUser = 3
		Expect(K8s.Create(ctx, pxTemplate(ns, "py", "1", "example.com/ide:1", 8080))).To(Succeed())
		args := []string{"--namespace=" + ns, "--max-workspaces-per-user=" + strconv.Itoa(perUser), "--components=api,proxy",
			"--auth=oidc", "--oidc-issuer-url=" + Cluster.IssuerURL, "--oidc-client-id=nogoo9", "--oidc-ca-file=" + Cluster.CAFile}
		a, b := StartNogoo9(args...), StartNogoo9(args...)
		tok, err := Cluster.ServiceAccountToken(ctx, ns, "q", "nogoo9", 0)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			for _, p := range []*Nogoo9Process{a, b} {
				code, body, err := resCall(p, tok, "GET", "/api/v1/templates", nil)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(body)).To(ContainSubstring(`"py"`), "%d", code)
			}
		}).Should(Succeed())
		var created atomic.Int64
		var wg sync.WaitGroup
		for i := range 24 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				p := a
				if i%2 == 1 {
					p = b
				}
				code, body, err := resCall(p, tok, "POST", "/api/v1/workspaces", map[string]any{"template": "py", "id": fmt.Sprintf("q%d", i)})
				Expect(err).NotTo(HaveOccurred())
				Expect(code).To(BeElementOf(http.StatusCreated, http.StatusTooManyRequests, http.StatusConflict), string(body))
				if code == http.StatusCreated {
					created.Add(1)
				}
			}()
		}
		wg.Wait()
		Expect(created.Load()).To(BeNumerically("<=", perUser))
		Expect(created.Load()).To(BeNumerically(">=", 1))
		var pods corev1.PodList
		Expect(K8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workspace.LabelType: workspace.TypeWorkspace})).To(Succeed())
		Expect(len(pods.Items)).To(BeNumerically("==", created.Load()))
	})
})
