package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
)

// NewNamespace creates a namespace for the current spec, waits until its default service account
// exists (pods are refused before that) and deletes the namespace after the spec.
func NewNamespace() string {
	GinkgoHelper()
	name := "e2e-" + randomSuffix()
	ctx, cancel := ctxTimeout()
	defer cancel()
	Expect(K8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		err := K8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		Expect(client.IgnoreNotFound(err)).To(Succeed())
	}, NodeTimeout(30*time.Second))
	Eventually(func() error {
		return K8s.Get(context.Background(), client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{})
	}).Should(Succeed(), "default service account of namespace %s", name)
	return name
}

// FailingImage returns an image that can never be pulled: a pod using it stays Pending and
// un-ready, its container waiting with reason ErrImagePull.
func FailingImage(name string) string { return localcluster.FailingImageRegistry + name + ":latest" }

// WaitPodReady waits until pod namespace/name is Running and Ready and returns it.
func WaitPodReady(namespace, name string) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{}
	Eventually(func(g Gomega) {
		g.Expect(K8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(podCondition(pod, corev1.PodReady)).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed(), "pod %s/%s Running and Ready", namespace, name)
	return pod
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Nogoo9Process is a running nogoo9 binary started by StartNogoo9.
type Nogoo9Process struct {
	// Args are the command-line arguments (defaults first; the caller's, which win, after).
	Args []string
	// Namespace is the effective --namespace.
	Namespace string
	// Loopback host:port of each listener, and base URLs of the API and proxy.
	MetricsAddr, ProbeAddr, APIAddr, ProxyAddr string
	APIURL, ProxyURL                           string
	// LogPath is the file with the process's stdout and stderr (kept across Restart).
	LogPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// logStart is the size of the log when the process was last started.
	logStart int64
}

var (
	nogoo9Mu    sync.Mutex
	nogoo9Procs []*Nogoo9Process
	nogoo9Count int
)

// StartNogoo9 starts bin/nogoo9 against the suite's cluster with --kubeconfig (admin),
// --namespace default, free loopback ports for metrics, probes, API and proxy,
// --leader-elect=false and --auth=kubernetes; args are appended, so they override any of these (Go flags: last wins).
// It waits for /readyz to answer 200 and stops the process after the current spec. The ports
// were free when picked, but something may take one before nogoo9 binds it: if nogoo9 then exits
// with "address already in use", it is started again on fresh ports (nogoo9StartTries in all).
func StartNogoo9(args ...string) *Nogoo9Process {
	GinkgoHelper()
	nogoo9Mu.Lock()
	nogoo9Count++
	n := nogoo9Count
	nogoo9Mu.Unlock()
	p := &Nogoo9Process{LogPath: filepath.Join(artifactsDir, fmt.Sprintf("nogoo9-%d.log", n))}
	nogoo9Mu.Lock()
	nogoo9Procs = append(nogoo9Procs, p)
	nogoo9Mu.Unlock()
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			AddReportEntry("nogoo9 log "+p.LogPath, p.LogTail(60))
		}
		p.Stop()
	})
	for try := 1; ; try++ {
		ports, err := localcluster.FreePorts(4)
		Expect(err).NotTo(HaveOccurred())
		p.setArgs(ports, args)
		err = p.tryStart()
		if err == nil {
			return p
		}
		if try == nogoo9StartTries || !strings.Contains(p.logOfLastStart(), "address already in use") {
			Fail(err.Error())
		}
		GinkgoWriter.Printf("nogoo9 %d lost a port before it bound it (try %d of %d); starting it again on fresh ports\n", n, try, nogoo9StartTries)
	}
}

// nogoo9StartTries bounds StartNogoo9's starts on fresh ports.
const nogoo9StartTries = 3

// setArgs sets the listeners' addresses to ports (metrics, probes, API, proxy) and the arguments:
// the defaults, then args.
func (p *Nogoo9Process) setArgs(ports []int, args []string) {
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	p.MetricsAddr, p.ProbeAddr, p.APIAddr, p.ProxyAddr = addr(0), addr(1), addr(2), addr(3)
	p.APIURL, p.ProxyURL = "http://"+p.APIAddr, "http://"+p.ProxyAddr
	p.Args = append([]string{
		"--kubeconfig=" + Cluster.Kubeconfig,
		"--namespace=default",
		"--metrics-bind-address=" + p.MetricsAddr,
		"--health-probe-bind-address=" + p.ProbeAddr,
		"--api-bind-address=" + p.APIAddr,
		"--proxy-bind-address=" + p.ProxyAddr,
		"--leader-elect=false",
		// Callers authenticate with tokens the cluster's TokenReview accepts (Cluster.ServiceAccountToken
		// with audience Cluster.IssuerURL); pass --auth=oidc --oidc-issuer-url=... to test OIDC.
		"--auth=kubernetes",
		// Specs use minimal templates (one container, no securityContext); the template policy is
		// tested where it matters (rbac_test.go runs the binary's defaults on the samples,
		// admission_test.go the API server's side). Pass --template-policy=restricted
		// --template-allow-automount-token=false to get the defaults back.
		"--template-policy=privileged",
		"--template-allow-automount-token",
		// One key for every nogoo9 of the suite, as a Secret mounted in every replica would be:
		// a restarted or standby nogoo9 can verify what the previous one signed.
		"--integrity-key-file=" + integrityKeyFile(),
	}, args...)
	p.Namespace = lastFlag(p.Args, "namespace")
}

// lastFlag returns the value of the last --name=value or --name value in args.
func lastFlag(args []string, name string) string {
	var v string
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		switch {
		case strings.HasPrefix(a, "-"+name+"="):
			v = strings.TrimPrefix(a, "-"+name+"=")
		case a == "-"+name && i+1 < len(args):
			v = args[i+1]
		}
	}
	return v
}

// start starts the process and waits for /readyz, failing if it exits first.
func (p *Nogoo9Process) start() {
	GinkgoHelper()
	if err := p.tryStart(); err != nil {
		Fail(err.Error())
	}
}

// tryStart starts the process and waits for /readyz; it returns an error (with the end of the
// log) if the process exits first.
func (p *Nogoo9Process) tryStart() error {
	GinkgoHelper()
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Expect(err).NotTo(HaveOccurred())
	defer logFile.Close()
	info, err := logFile.Stat()
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339), nogoo9Bin, strings.Join(p.Args, " "))
	cmd := exec.Command(nogoo9Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group; SIGKILL if the test process dies, so no nogoo9 outlives the suite.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	Expect(cmd.Start()).To(Succeed(), "start %s", nogoo9Bin)
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err, p.logStart = cmd, done, nil, info.Size()
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return p.waitReady()
}

// waitReady waits for GET /readyz to answer 200. If the process exits first, it returns at once
// an error with the end of the log.
func (p *Nogoo9Process) waitReady() error {
	GinkgoHelper()
	httpc := &http.Client{Timeout: 2 * time.Second}
	exited := false
	Eventually(func() error {
		if p.Exited() {
			exited = true
			return nil // reported below
		}
		resp, err := httpc.Get("http://" + p.ProbeAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}).Should(Succeed(), "nogoo9 /readyz on %s (log %s)", p.ProbeAddr, p.LogPath)
	if exited {
		return fmt.Errorf("nogoo9 exited before it was ready (%v); log %s:\n%s", p.exitErr(), p.LogPath, p.LogTail(40))
	}
	return nil
}

// logOfLastStart is what the process logged since it was last started.
func (p *Nogoo9Process) logOfLastStart() string {
	p.mu.Lock()
	off := p.logStart
	p.mu.Unlock()
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if off > int64(len(data)) {
		off = 0
	}
	return string(data[off:])
}

// Exited reports whether the process has ended.
func (p *Nogoo9Process) Exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (p *Nogoo9Process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill ends the process with SIGKILL (a crash: no cleanup, no lease release) and waits for it.
func (p *Nogoo9Process) Kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// Stop ends the process with SIGTERM (a graceful shutdown), SIGKILL after 15 s. It does nothing
// if the process has already ended.
func (p *Nogoo9Process) Stop() {
	if !p.signal(syscall.SIGTERM, 15*time.Second) {
		p.signal(syscall.SIGKILL, 10*time.Second)
	}
}

// Restart stops the process gracefully and starts it again with the same arguments and ports,
// waiting for /readyz. After Kill, it just starts it again.
func (p *Nogoo9Process) Restart() {
	GinkgoHelper()
	p.Stop()
	p.start()
}

// signal sends sig to the process group and reports whether the process ended within timeout.
func (p *Nogoo9Process) signal(sig syscall.Signal, timeout time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || p.Exited() {
		return true
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// WaitControllersRunning waits until the replica's controllers run: it holds the lease (with
// leader election) and, --controllers-start-delay after it turned ready, the upgrade
// controller's workers have started, its watches with them.
func (p *Nogoo9Process) WaitControllersRunning() {
	GinkgoHelper()
	Eventually(func() string { return p.LogTail(2000) }).Should(ContainSubstring(`"msg":"Starting workers","controller":"workspace-upgrade"`))
}

// LogTail returns the last n lines of the process's log.
func (p *Nogoo9Process) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func stopAllNogoo9() {
	nogoo9Mu.Lock()
	procs := nogoo9Procs
	nogoo9Mu.Unlock()
	for _, p := range procs {
		p.Stop()
	}
}

var integrityKey struct {
	once sync.Once
	path string
}

// integrityKeyFile writes the suite's --integrity-key-file once (a random key) and returns its path.
func integrityKeyFile() string {
	GinkgoHelper()
	integrityKey.once.Do(func() {
		key := make([]byte, 32)
		_, err := rand.Read(key)
		Expect(err).NotTo(HaveOccurred())
		integrityKey.path = filepath.Join(artifactsDir, "integrity-keys")
		Expect(os.WriteFile(integrityKey.path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)).To(Succeed())
	})
	return integrityKey.path
}
