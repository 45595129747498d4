package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/net/websocket"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// poApex is the spec's --proxy-workspace-domain=http://<poApex>. Plain http is taken only on
// localhost names (workspace.ParseOrigins): Chromium treats them as secure contexts, as it does
// https, and sends fetch metadata there, which the proxy's checks need. No DNS is involved: the
// spec's Chromium maps poApex and every name under it to the proxy's loopback port (poBrowser), so
// the browser sees http://<poApex> and http://<label>.<poApex> on the default port, exactly as it
// would behind a wildcard DNS name, and still reaches the proxy's real port.
const poApex = "ws.localhost"

// poBrowser starts headless Chromium like newUIBrowser, with every host name under apex (and
// apex itself) resolved to the proxy at proxyAddr, and no proxy server. It stops after the
// current node (BeforeAll: the container).
func poBrowser(proxyAddr, apex string) context.Context {
	GinkgoHelper()
	_, port, err := net.SplitHostPort(proxyAddr)
	Expect(err).NotTo(HaveOccurred())
	rules := fmt.Sprintf("MAP *.%s 127.0.0.1:%s, MAP %s 127.0.0.1:%s", apex, port, apex, port)
	return newUIBrowser(
		chromedp.Flag("host-resolver-rules", rules),
		chromedp.Flag("no-proxy-server", true),
	)
}

// poBackend stands in for a workspace's web server on its pod's IP: it serves fixed HTML pages,
// /secret (the workspace's private data, answered to any origin with credentials, as a careless
// development server with permissive CORS would) and /echo, a WebSocket that sends the secret as
// soon as it opens. It records every request that reaches it ("<method> <path> <a>", a being the
// query parameter the pages tag their requests with) and counts the WebSockets it opened.
type poBackend struct {
	srv  *http.Server
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	reqs    []string // every request, in order
	wsOpens int
	conns   map[*websocket.Conn]struct{}
}

func poStartBackend(ip string, port int, name, secret string, pages map[string]string) *poBackend {
	GinkgoHelper()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	Expect(err).NotTo(HaveOccurred(), "listen on workspace %s's pod address %s", name, addr)
	b := &poBackend{done: make(chan struct{}), conns: map[*websocket.Conn]struct{}{}}
	mux := http.NewServeMux()
	// websocket.Server with no Handshake takes any Origin: the workspace itself checks nothing.
	mux.Handle("/echo", websocket.Server{Handler: func(c *websocket.Conn) {
		b.mu.Lock()
		b.wsOpens++
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			delete(b.conns, c)
			b.mu.Unlock()
		}()
		if websocket.Message.Send(c, secret) != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
	}})
	mux.HandleFunc("/secret", func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" {
			w.Header().Set("Access-Control-Allow-Origin", o)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Vary", "Origin")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, secret)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, page)
	})
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.reqs = append(b.reqs, r.Method+" "+r.URL.Path+" "+r.URL.Query().Get("a"))
		b.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
	b.srv = &http.Server{Handler: record, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(GinkgoWriter, "backend "+name+": ", 0)}
	go func() {
		_ = b.srv.Serve(ln)
		close(b.done)
	}()
	DeferCleanup(b.Close)
	return b
}

// Close stops the server and ends its WebSockets (hijacked connections outlive http.Server.Close).
func (b *poBackend) Close() {
	b.once.Do(func() {
		_ = b.srv.Close()
		<-b.done
		b.mu.Lock()
		for c := range b.conns {
			_ = c.Close()
		}
		b.mu.Unlock()
	})
}

// Requests is every request that reached the server so far; WSOpens the WebSockets it opened.
func (b *poBackend) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reqs)
}

func (b *poBackend) WSOpens() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wsOpens
}

// poVictimPage is the victim workspace's own page: its script reads its own secret and opens its
// own WebSocket, as the workspace's own UI reads its data and opens its terminal.
const poVictimPage = `<!doctype html><html><head><meta charset="utf-8"><title>victim page</title></head>
<body><h1>victim workspace</h1><pre id="self">loading</pre><pre id="selfws">loading</pre><script>
const show = (id, t) => { document.getElementById(id).textContent = t; };
fetch("secret?a=self").then(r => r.text()).then(t => show("self", t), e => show("self", "error: " + e));
const u = new URL("echo?a=self-ws", location.href);
u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
const ws = new WebSocket(u.href);
ws.onmessage = ev => { show("selfws", "message: " + ev.data); ws.close(); };
ws.onclose = ev => { if (document.getElementById("selfws").textContent === "loading") show("selfws", "closed " + ev.code); };
</script></body></html>`

const poEvilLanding = `<!doctype html><html><head><meta charset="utf-8"><title>evil page</title></head>
<body><h1>evil workspace</h1></body></html>`

// poAttack is what an attack page tries: each fetch (named, with its URL, relative to the page or
// absolute, and fetch's init), then one WebSocket to ws (an http(s) URL or a path, turned into
// ws(s)), then, when set, an iframe of frame (clickjacking needs the page in a frame).
type poAttack struct {
	Fetches []poFetch `json:"fetches"`
	WS      string    `json:"ws"`
	Frame   string    `json:"frame,omitempty"`
}

type poFetch struct {
	Name string         `json:"name"`
	URL  string         `json:"url"`
	Init map[string]any `json:"init"`
}

// poAttackPage is a page of the evil workspace that runs attack in the viewer's browser and
// writes what each attempt got into #out as a JSON object of strings: for a fetch "<type>
// <status> <body>" or "error: ..."; for the WebSocket "message: ..." or "closed <code> before
// opening" / "closed <code> after opening"; for the frame "loaded" once its load event fired. The
// title turns "attacks done" when every attempt has ended (each fetch's promise settles once the
// proxy has answered, a WebSocket's once it closed, a frame's once its document arrived).
func poAttackPage(attack poAttack) string {
	GinkgoHelper()
	cfg, err := json.Marshal(attack)
	Expect(err).NotTo(HaveOccurred())
	return `<!doctype html><html><head><meta charset="utf-8"><title>evil: attacking</title></head>
<body><h1>evil workspace</h1><pre id="out"></pre><script>
(async () => {
	const cfg = ` + string(cfg) + `;
	const r = {};
	for (const a of cfg.fetches) {
		try {
			const res = await fetch(a.url, a.init);
			let body;
			try { body = await res.text(); } catch (e) { body = "unreadable: " + e; }
			r[a.name] = res.type + " " + res.status + " " + body;
		} catch (e) {
			r[a.name] = "error: " + e;
		}
	}
	r.ws = await new Promise(done => {
		const u = new URL(cfg.ws, location.href);
		u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
		let opened = false, ws;
		try { ws = new WebSocket(u.href); } catch (e) { done("error: " + e); return; }
		ws.onopen = () => { opened = true; };
		ws.onmessage = ev => { done("message: " + ev.data); ws.close(); };
		ws.onclose = ev => done("closed " + ev.code + (opened ? " after opening" : " before opening"));
	});
	if (cfg.frame) {
		r.frame = await new Promise(done => {
			const f = document.createElement("iframe");
			f.onload = () => done("loaded");
			f.src = cfg.frame;
			document.body.appendChild(f);
		});
	}
	document.getElementById("out").textContent = JSON.stringify(r);
	document.title = "attacks done";
})();
</script></body></html>`
}

// poResults reads an attack page's results once it has finished (bounded by waitJS).
func poResults(tab *uiTab) map[string]string {
	GinkgoHelper()
	tab.waitJS(`document.title === "attacks done"`)
	var r map[string]string
	Expect(json.Unmarshal([]byte(tab.eval(`document.getElementById("out").textContent`)), &r)).To(Succeed())
	return r
}

// poGet is GET path on the proxy with a bearer token and the given Host header.
func poGet(p *Nogoo9Process, host, path, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, p.ProxyURL+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := pxClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Per-workspace origins (--proxy-workspace-domain) in a real browser. The threat: one of jane's
// workspaces serves a hostile page (a cloned repository's dev server, a package's postinstall
// that started one) and jane opens it; the page's script, running in jane's browser with jane's
// login cookie, tries to read and drive her other workspace. With every workspace under one origin
// (path routing, the default) it can, and the first spec shows that it does in this very set-up:
// without it, the second part's "nothing got through" could be a test that cannot see the attack.
var _ = Describe("Proxy: per-workspace origins in a real browser", Ordered, Label("proxy", "ui"), func() {
	var (
		ns, jane             string
		victimPath, evilPath string
		secret               string
		victim               *poBackend
		pathProc             *Nogoo9Process
		// The hosts and addresses under poApex.
		victimHost, evilHost              string
		apexURL, victimOrigin, evilOrigin string
		victimURL, evilURL                string
	)

	// routable waits until p serves both workspaces: a (re)started proxy learns each pod on its
	// own. A bearer token is taken on any host, so the proxy's own address serves in both modes.
	routable := func(p *Nogoo9Process) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			code, body, err := poGet(p, p.ProxyAddr, victimPath, jane)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
			g.Expect(body).To(ContainSubstring("victim workspace"))
			code, body, err = poGet(p, p.ProxyAddr, evilPath, jane)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), "%s", body)
			g.Expect(body).To(ContainSubstring("evil workspace"))
		}).WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the proxy serves both workspaces")
	}

	BeforeAll(func(ctx SpecContext) {
		ns = NewNamespace()
		port := pxFreePort()
		Expect(K8s.Create(ctx, pxTemplate(ns, "web", "1.0", "example.com/web:1.0", port))).To(Succeed())
		jane = pxUserToken(ctx, ns, "jane")
		o, err := workspace.ParseOrigins("http://" + poApex)
		Expect(err).NotTo(HaveOccurred())
		victimHost, evilHost = o.HostFor(ns, "victim", false), o.HostFor(ns, "evil", false)
		apexURL, victimOrigin, evilOrigin = o.Apex(), o.URLFor(ns, "victim", false), o.URLFor(ns, "evil", false)

		pathProc = StartNogoo9("--namespace="+ns, "--insecure-cookie")
		victimWS, evilWS := pxSpawn(pathProc, jane, "web", "victim"), pxSpawn(pathProc, jane, "web", "evil")
		victimPath, evilPath = victimWS.WorkspacePath, evilWS.WorkspacePath
		victimURL, evilURL = victimOrigin+victimPath, evilOrigin+evilPath
		victimPod, evilPod := WaitPodReady(ns, victimWS.ActivePod), WaitPodReady(ns, evilWS.ActivePod)

		secret = "victim-secret-" + randomSuffix()
		victim = poStartBackend(victimPod.Status.PodIP, port, "victim", secret, map[string]string{"/": poVictimPage})
		poStartBackend(evilPod.Status.PodIP, port, "evil", "evil has no secret", map[string]string{
			"/": poEvilLanding,
			// One origin for all: the victim's path on the page's own origin.
			"/path-attack": poAttackPage(poAttack{
				Fetches: []poFetch{{Name: "fetch", URL: victimPath + "secret?a=path-fetch", Init: map[string]any{"credentials": "include"}}},
				WS:      victimPath + "echo?a=path-ws",
			}),
			// Per-workspace origins: every way a page of the evil host can send jane's cookie
			// towards the victim.
			"/origins-attack": poAttackPage(poAttack{
				Fetches: []poFetch{
					{Name: "cross-origin", URL: victimURL + "secret?a=cross-origin-fetch", Init: map[string]any{"credentials": "include"}},
					{Name: "no-cors-post", URL: victimURL + "secret?a=no-cors-post",
						Init: map[string]any{"method": "POST", "mode": "no-cors", "credentials": "include", "body": "rm -rf ~"}},
					{Name: "misdirected", URL: victimPath + "secret?a=misdirected-fetch", Init: map[string]any{"credentials": "include"}},
					{Name: "misdirected-post", URL: victimPath + "secret?a=misdirected-post", Init: map[string]any{"method": "POST", "credentials": "include", "body": "x"}},
					{Name: "apex", URL: apexURL + victimPath + "secret?a=apex-fetch", Init: map[string]any{"credentials": "include"}},
				},
				WS:    victimURL + "echo?a=cross-origin-ws",
				Frame: victimURL + "?a=frame",
			}),
		})
		routable(pathProc)
	}, NodeTimeout(4*time.Minute))

	It("control: with one origin for every workspace, the evil workspace's page reads the victim's secret and opens its WebSocket", func() {
		// This is the attack the origins mode must stop; it succeeds here, so the test can see it.
		// The browser reaches the proxy as http://proxy.test, a name it sends no fetch metadata to
		// (neither https nor localhost): the login form must work there too. With
		// Referrer-Policy: no-referrer on the form, the browser posted it with "Origin: null",
		// which the cross-origin check refused (403).
		const pathHost = "proxy.test"
		tab := newUITab(poBrowser(pathProc.ProxyAddr, pathHost), "http://"+pathHost)
		tab.open("/_nogoo9/login?next=" + url.QueryEscape(evilPath+"path-attack"))
		before, opensBefore := len(victim.Requests()), victim.WSOpens()
		tab.do(
			chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), jane),
			chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
		)
		r := poResults(tab)
		GinkgoWriter.Printf("path mode, the evil page got: %q\n", r)
		Expect(tab.eval(`location.href`)).To(Equal("http://" + pathHost + evilPath + "path-attack"))
		Expect(r["fetch"]).To(Equal("basic 200 "+secret), "the evil page read the victim's secret with jane's cookie")
		Expect(r["ws"]).To(Equal("message: "+secret), "the evil page opened the victim's WebSocket with jane's cookie")
		Expect(victim.Requests()[before:]).To(ContainElements("GET /secret path-fetch", "GET /echo path-ws"))
		Expect(victim.WSOpens()).To(BeNumerically(">", opensBefore))
	})

	Context("with --proxy-workspace-domain=http://"+poApex, func() {
		var (
			proc    *Nogoo9Process
			browser context.Context
			jn      *uiTab // jane's tab, kept from spec to spec
		)

		BeforeAll(func(SpecContext) {
			// The same cluster and workspaces; only the nogoo9 in front of them changes.
			pathProc.Stop()
			proc = StartNogoo9("--namespace="+ns, "--insecure-cookie", "--proxy-workspace-domain=http://"+poApex)
			routable(proc)
			for host, path := range map[string]string{victimHost: victimPath, evilHost: evilPath} {
				code, body, err := poGet(proc, host, path, jane)
				Expect(err).NotTo(HaveOccurred())
				Expect(code).To(Equal(http.StatusOK), "GET %s on its own host %s: %s", path, host, body)
			}
			browser = poBrowser(proc.ProxyAddr, poApex)
			jn = newUITab(browser, "")
		}, NodeTimeout(3*time.Minute))

		It("sends a browser without a login from the victim's host to the apex's form, and the login there back to the victim's host", func() {
			jn.do(chromedp.Navigate(victimURL))
			jn.waitJS(`location.origin === "` + apexURL + `" && location.pathname === "/_nogoo9/login" && document.querySelector('input[name="token"]') !== null`)
			Expect(jn.eval(`new URLSearchParams(location.search).get("next")`)).To(Equal(victimURL))
			jn.do(
				chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), jane),
				chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
			)
			jn.waitJS(`location.href === "` + victimURL + `" && document.title === "victim page" && document.getElementById("self").textContent !== "loading" && document.getElementById("selfws").textContent !== "loading"`)
			Expect(jn.text("#self")).To(Equal(secret), "the victim's own page reads its own data on its own host")
			Expect(jn.text("#selfws")).To(Equal("message: "+secret), "the victim's own page opens its own WebSocket on its own host")
			Expect(victim.Requests()).To(ContainElements("GET /secret self", "GET /echo self-ws"))
			Expect(jn.eval(`document.cookie`)).To(BeEmpty(), "the host's login cookie is HttpOnly")
		})

		It("opens another workspace of a logged-in user on its own host without asking for the token again", func() {
			jn.do(chromedp.Navigate(evilURL))
			jn.waitJS(`location.href === "` + evilURL + `" && document.title === "evil page"`)
			Expect(jn.text("h1")).To(Equal("evil workspace"))
		})

		It("lets no request of the evil workspace's page reach the victim, whatever way it is sent", func() {
			before, opensBefore := victim.Requests(), victim.WSOpens()
			jn.do(chromedp.Navigate(evilURL + "origins-attack"))
			r := poResults(jn)
			GinkgoWriter.Printf("origins mode, the evil page got: %q\n", r)
			Expect(jn.eval(`location.href`)).To(Equal(evilURL + "origins-attack"))
			// Every attempt has been answered (the page reported them all): had the proxy forwarded
			// any, the victim's server would have recorded it by now.
			Expect(victim.Requests()).To(Equal(before), "requests of the evil page reached the victim's server")
			Expect(victim.WSOpens()).To(Equal(opensBefore), "the evil page opened a WebSocket to the victim")
			for name, got := range r {
				Expect(got).NotTo(ContainSubstring(secret), "%s: the evil page read the secret", name)
			}
			// A credentialed cross-origin fetch: refused without CORS headers, so unreadable.
			Expect(r["cross-origin"]).To(HavePrefix("error: "), "cross-origin fetch")
			// no-cors: the answer is opaque either way; the record above says it was not forwarded.
			Expect(r["no-cors-post"]).To(Equal("opaque 0 "), "no-cors POST")
			// The victim's path on the evil host: never the victim's answer (the evil host serves
			// nothing but its own route, or sends the browser to the victim's host, which refuses).
			Expect(r["misdirected"]).To(MatchRegexp(`^(error: |basic 4\d\d )`), "same-origin fetch of the victim's path")
			Expect(r["misdirected-post"]).To(MatchRegexp(`^basic 4\d\d `), "same-origin POST to the victim's path")
			// The victim's path on the apex (with the apex's cookie): sent to the victim's host
			// without CORS headers, so the browser stops there.
			Expect(r["apex"]).To(HavePrefix("error: "), "fetch of the victim's path on the apex")
			Expect(r["ws"]).To(MatchRegexp(`^closed \d+ before opening$`), "WebSocket to the victim's host")
			Expect(r["frame"]).To(Equal("loaded"), "the frame's attempt ended")
			// The proxy logged its refusals on the victim's host.
			Expect(proc.LogTail(400)).To(MatchRegexp(`"msg":"request refused[^"]*".*"host":"%s"`, regexp.QuoteMeta(victimHost)))
		})

		It("never shows a login form on a workspace host: its /_nogoo9/login goes to the apex", func() {
			fresh := newUITab(browser, "")
			fresh.do(chromedp.Navigate(victimOrigin + "/_nogoo9/login"))
			fresh.waitJS(`location.origin === "` + apexURL + `" && location.pathname === "/_nogoo9/login" && document.querySelector('input[name="token"]') !== null`)
			Expect(fresh.eval(`new URLSearchParams(location.search).get("next")`)).To(Equal(victimOrigin + "/"))
		})

		It("logs out of every workspace host with one logout at the apex", func() {
			// Each host has its own cookie: the apex's logout posts a logout to each host it
			// handed a login to, and ends on its login form.
			jn.do(chromedp.Navigate(apexURL + "/_nogoo9/logout"))
			jn.do(chromedp.WaitVisible(chromedp.CSS(`button[type="submit"]`)), chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
			jn.waitJS(`location.origin === "` + apexURL + `" && location.pathname === "/_nogoo9/login" && location.search === "" && document.querySelector('input[name="token"]') !== null`)
			for _, u := range []string{victimURL, evilURL} {
				jn.do(chromedp.Navigate(u))
				jn.waitJS(`location.origin === "` + apexURL + `" && location.pathname === "/_nogoo9/login" && document.querySelector('input[name="token"]') !== null`)
				Expect(jn.eval(`new URLSearchParams(location.search).get("next")`)).To(Equal(u), "%s asks for the token again", u)
			}
		})
	})
})
