package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Cluster is a running local cluster. Its fields are read-only.
type Cluster struct {
	// Dir holds data, keys, logs (<process>.log) and state.json.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (group system:masters).
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string
	// CAFile is the PEM CA that signed the API server's certificate.
	CAFile string
	// IssuerURL is the service-account token issuer (the API server: discovery at
	// IssuerURL/.well-known/openid-configuration is readable without credentials).
	IssuerURL string
	// AdminToken is the admin bearer token the kubeconfig holds.
	AdminToken string
	// NodeNames are the kwok nodes.
	NodeNames []string

	clientset kubernetes.Interface
	layout    layout
	opts      Options
	procs     []*process

	stopOnce sync.Once
	stopErr  error
}

// Start starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok on
// loopback, creates the kwok nodes and returns once a node is Ready. On any failure it stops
// what it started and returns an error naming the process with the end of its log. Every wait is
// bounded by Options.StartTimeout and by ctx. The ports are free when picked, but something may
// take one before its process binds it: when a process fails with "address already in use",
// Start stops everything and starts again on fresh ports (portTries in all, within StartTimeout).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for try := 1; ; try++ {
		c, cleanedUp, err := startOnce(ctx, dir, opts)
		if err == nil {
			return c, nil
		}
		if try < portTries && cleanedUp && ctx.Err() == nil && portTaken(err) {
			opts.Progress("a port was taken before its process bound it; starting again on fresh ports (try %d of %d): %v", try+1, portTries, err)
			continue
		}
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("local cluster not ready within %s (Options.StartTimeout): %w", opts.StartTimeout, err)
		}
		return nil, err
	}
}

// portTries bounds Start's tries on fresh ports.
const portTries = 3

// portTaken reports whether a start failed because a process could not bind its port.
func portTaken(err error) bool { return strings.Contains(err.Error(), "address already in use") }

// startOnce starts the cluster once in dir on freshly picked ports. On failure it stops what it
// started; cleanedUp reports whether that left nothing running.
func startOnce(ctx context.Context, dir string, opts Options) (c *Cluster, cleanedUp bool, err error) {
	if err := prepareDir(dir); err != nil {
		return nil, false, err
	}
	l := newLayout(dir)
	l.serviceCIDR = opts.ServiceClusterIPRange
	if err := allocatePorts(&l, opts); err != nil {
		return nil, false, err
	}
	c = &Cluster{
		Dir:          dir,
		Kubeconfig:   l.kubeconfig(),
		APIServerURL: l.apiServerURL(),
		CAFile:       l.caCert(),
		IssuerURL:    l.issuerURL(),
		layout:       l,
		opts:         opts,
	}
	if err := c.start(ctx); err != nil {
		if stopErr := c.Stop(); stopErr != nil {
			return nil, false, errors.Join(err, fmt.Errorf("while cleaning up: %w", stopErr))
		}
		return nil, true, err
	}
	return c, false, nil
}

func (c *Cluster) start(ctx context.Context) error {
	l, o := c.layout, c.opts
	token, err := writePKI(l)
	if err != nil {
		return fmt.Errorf("write keys: %w", err)
	}
	c.AdminToken = token
	if err := WriteKubeconfig(l.kubeconfig(), l.apiServerURL(), l.caCert(), token); err != nil {
		return err
	}
	if err := os.WriteFile(l.kwokConfigFile(), KwokConfig(o.KwokPodWorkers), 0o644); err != nil {
		return err
	}
	// The CA by value, not by path: client-go caches TLS transports by their configuration, and
	// a start again on fresh ports (Start) writes a new CA to the same path.
	ca, err := os.ReadFile(l.caCert())
	if err != nil {
		return fmt.Errorf("read the CA: %w", err)
	}
	c.Config = &rest.Config{
		Host:            l.apiServerURL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             200,
		Burst:           400,
	}
	if c.clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}

	etcd, err := c.run(Etcd, etcdArgs(l, o.ExtraEtcdFlags))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, etcd, l.etcdURL()+"/health", nil); err != nil {
		return err
	}
	api, err := c.run(KubeAPIServer, apiServerArgs(l, o.ExtraAPIServerFlags))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, api, l.apiServerURL()+"/readyz", c.httpClient()); err != nil {
		return err
	}
	if err := c.allowIssuerDiscovery(ctx); err != nil {
		return err
	}
	sched, err := c.run(KubeScheduler, schedulerArgs(l, o.ExtraSchedulerFlags))
	if err != nil {
		return err
	}
	kcm, err := c.run(KubeControllerManager, controllerManagerArgs(l, o.ExtraControllerManagerFlags))
	if err != nil {
		return err
	}
	kwok, err := c.run(Kwok, kwokArgs(l, o.ExtraKwokFlags))
	if err != nil {
		return err
	}
	if err := c.createNodes(ctx); err != nil {
		return err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The components serve self-signed certificates; /healthz carries no secrets.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	if err := waitHTTP(ctx, sched, fmt.Sprintf("https://127.0.0.1:%d/healthz", l.schedulerPort), insecure); err != nil {
		return err
	}
	if err := waitHTTP(ctx, kcm, fmt.Sprintf("https://127.0.0.1:%d/healthz", l.kcmPort), insecure); err != nil {
		return err
	}
	return c.waitNodeReady(ctx, kwok)
}

// run starts one binary and records it in the state file at once, so that even a start that
// fails half-way leaves nothing StopDir cannot find.
func (c *Cluster) run(name string, args []string) (*process, error) {
	c.opts.Progress("starting %s", name)
	p, err := startProcess(name, filepath.Join(c.opts.BinDir, name), args, c.layout.logFile(name), c.opts.Detach)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, c.saveState()
}

func (c *Cluster) saveState() error {
	s := &State{APIServerURL: c.APIServerURL, Kubeconfig: c.Kubeconfig}
	for _, p := range c.procs {
		start, _, err := procStat(p.pid())
		if err != nil && !p.exited() {
			return fmt.Errorf("read start time of %s (pid %d): %w", p.name, p.pid(), err)
		}
		s.Processes = append(s.Processes, ProcessState{Name: p.name, PID: p.pid(), StartTime: start})
	}
	return writeState(c.Dir, s)
}

// Stop stops every process in reverse start order (kwok, controller-manager, scheduler,
// apiserver, etcd): SIGTERM to its process group, SIGKILL after Options.StopTimeout. It then
// removes the state file. Calling it again returns the first call's result. Dir is kept (logs).
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.procs) - 1; i >= 0; i-- {
			if err := c.procs[i].stop(c.opts.StopTimeout); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			if err := os.Remove(c.layout.stateFile()); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// Clientset returns an admin clientset.
func (c *Cluster) Clientset() kubernetes.Interface { return c.clientset }

// PIDs returns the pids of the processes, by binary name (for tests and diagnostics).
func (c *Cluster) PIDs() map[string]int {
	out := map[string]int{}
	for _, p := range c.procs {
		out[p.name] = p.pid()
	}
	return out
}

func (c *Cluster) httpClient() *http.Client {
	tr, err := rest.TransportFor(c.Config)
	if err != nil {
		return &http.Client{Timeout: 5 * time.Second}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// allowIssuerDiscovery lets anyone read the OIDC discovery document and keys, as an OIDC
// relying party (nogoo9's auth) must, without credentials.
func (c *Cluster) allowIssuerDiscovery(ctx context.Context) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nogoo9-local:service-account-issuer-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
	}
	_, err := c.clientset.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind issuer discovery to system:unauthenticated: %w", err)
	}
	return nil
}

func (c *Cluster) createNodes(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(c.opts.NodePods), resource.DecimalSI),
	}
	for i := 0; i < c.opts.Nodes; i++ {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{KwokNodeAnnotation: KwokNodeValue, "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{
					"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"type": "kwok",
				},
			},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if _, err := c.clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create kwok node %s: %w", name, err)
		}
		c.NodeNames = append(c.NodeNames, name)
	}
	return nil
}

func (c *Cluster) waitNodeReady(ctx context.Context, kwok *process) error {
	c.opts.Progress("waiting for node %s to be Ready", c.NodeNames[0])
	return poll(ctx, kwok, func(ctx context.Context) error {
		for _, name := range c.NodeNames {
			n, err := c.clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(n) {
				return fmt.Errorf("node %s is not Ready yet", name)
			}
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitHTTP waits until url answers 200 (through client, or a plain one).
func waitHTTP(ctx context.Context, p *process, url string, client *http.Client) error {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	return poll(ctx, p, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}

// poll calls check every 200 ms until it succeeds, p exits, or ctx ends; the error names p and
// carries the end of its log.
func poll(ctx context.Context, p *process, check func(context.Context) error) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if p.exited() {
			return p.failure(p.exitError())
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return p.failure(fmt.Errorf("not ready: %w (last check: %v)", ctx.Err(), last))
		case <-p.done:
		case <-tick.C:
		}
	}
}

// allocatePorts picks free loopback ports for everything not pinned in opts, and checks that the
// pinned ones are free.
func allocatePorts(l *layout, o Options) error {
	pinned := []struct {
		port int
		what string
		dst  *int
	}{
		{o.APIServerPort, "kube-apiserver (Options.APIServerPort)", &l.apiPort},
		{o.EtcdPort, "etcd (Options.EtcdPort)", &l.etcdPort},
	}
	for _, p := range pinned {
		if p.port == 0 {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
		if err != nil {
			return fmt.Errorf("port 127.0.0.1:%d for %s is in use: stop what listens there (`ss -ltnp | grep :%d`) or pick another port", p.port, p.what, p.port)
		}
		ln.Close()
		*p.dst = p.port
	}
	free, err := FreePorts(6)
	if err != nil {
		return err
	}
	for _, dst := range []*int{&l.apiPort, &l.etcdPort, &l.etcdPeerPort, &l.schedulerPort, &l.kcmPort, &l.kwokPort} {
		if *dst == 0 {
			*dst, free = free[0], free[1:]
		}
	}
	return nil
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment ago.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
