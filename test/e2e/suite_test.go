// Package e2e runs nogoo9's end-to-end tests: the real nogoo9 binary, as a separate process,
// against a full local cluster (etcd, kube-apiserver, kube-scheduler, kube-controller-manager and
// kwok from hack/localcluster), started once for the whole suite.
//
// Run with `make test-e2e`, or by hand:
//
//	make tools build
//	NOGOO9_BIN=$PWD/bin/nogoo9 NOGOO9_TOOLS=$PWD/bin go test -count=1 ./test/e2e/...
//
// Environment: NOGOO9_TOOLS is the control-plane bin dir (default ../../bin), NOGOO9_BIN the nogoo9
// binary (default ../../bin/nogoo9), NOGOO9_E2E_KEEP=1 keeps the cluster dir (logs) even on success.
//
// Shared helpers for specs (see helpers_test.go):
//
//	Cluster                   the *localcluster.Cluster: Kubeconfig, Config, APIServerURL, CAFile,
//	                          IssuerURL, CreateVolumes, ServiceAccountToken, WriteKubeconfig
//	K8s                       a controller-runtime client.Client (admin, uncached)
//	Clientset                 a client-go clientset (admin), for subresources like logs or tokens
//	NewNamespace()            a fresh namespace for this spec (default service account ready),
//	                          deleted after the spec
//	StartNogoo9(args...)      runs bin/nogoo9 against the cluster with free loopback ports and
//	                          --leader-elect=false --auth=kubernetes, waits for /readyz, stops it after the spec;
//	                          fields MetricsAddr, ProbeAddr, APIAddr, ProxyAddr, APIURL, ProxyURL,
//	                          Namespace, LogPath; methods Kill, Stop, Restart, Exited, LogTail
//	WaitPodReady(ns, name)    waits until the pod is Running and Ready and returns it
//	FailingImage(name)        an image under nonexistent.invalid/: its pod stays in ErrImagePull
//
// Specs must use a namespace of their own (NewNamespace) and pass --namespace to StartNogoo9, so
// specs never see each other's pods. Waits use Eventually with the suite defaults (60 s); never
// sleep.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/hack/localcluster"
	"github.com/nogoo9/no-crd/pkg/envvar"
)

var (
	// Cluster is the suite's local cluster.
	Cluster *localcluster.Cluster
	// K8s is an admin controller-runtime client (no cache: reads see every write at once).
	K8s client.Client
	// Clientset is an admin client-go clientset.
	Clientset kubernetes.Interface

	// nogoo9Bin is the nogoo9 binary under test; artifactsDir holds its logs.
	nogoo9Bin    string
	artifactsDir string
	suiteFailed  bool
)

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e starts a full local cluster; skipped with -short")
	}
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)
	RunSpecs(t, "nogoo9 e2e")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	tools, err := filepath.Abs(envvar.String("NOGOO9_TOOLS", "../../bin"))
	Expect(err).NotTo(HaveOccurred())
	nogoo9Bin, err = filepath.Abs(envvar.String("NOGOO9_BIN", "../../bin/nogoo9"))
	Expect(err).NotTo(HaveOccurred())
	if _, err := os.Stat(nogoo9Bin); err != nil {
		Fail("nogoo9 binary " + nogoo9Bin + " not found: run `make build` (or set NOGOO9_BIN)")
	}
	dir, err := os.MkdirTemp("", "nogoo9-e2e-")
	Expect(err).NotTo(HaveOccurred())
	artifactsDir = filepath.Join(dir, "nogoo9")
	Expect(os.MkdirAll(artifactsDir, 0o755)).To(Succeed())

	start := time.Now()
	Cluster, err = localcluster.Start(ctx, localcluster.Options{
		BinDir: tools,
		Dir:    filepath.Join(dir, "cluster"),
		Progress: func(format string, args ...any) {
			GinkgoWriter.Printf(format+"\n", args...)
		},
	})
	Expect(err).NotTo(HaveOccurred(), "start the local cluster (cluster dir %s)", dir)
	GinkgoWriter.Printf("local cluster ready in %s at %s (dir %s)\n", time.Since(start).Round(time.Millisecond), Cluster.APIServerURL, dir)

	K8s, err = client.New(Cluster.Config, client.Options{Scheme: clientgoscheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	Clientset = Cluster.Clientset()
}, NodeTimeout(5*time.Minute))

// AfterSuite also runs when the suite is interrupted (Ctrl-C, or a failed BeforeSuite). If the
// test process is killed outright, the cluster's processes and every nogoo9 die with it
// (Pdeathsig).
var _ = AfterSuite(func() {
	stopAllNogoo9()
	if Cluster == nil {
		return
	}
	Expect(Cluster.Stop()).To(Succeed())
	root := filepath.Dir(Cluster.Dir)
	if suiteFailed || os.Getenv("NOGOO9_E2E_KEEP") != "" {
		// Not GinkgoWriter: a passing AfterSuite's GinkgoWriter output is shown only with -ginkgo.v.
		fmt.Fprintf(os.Stderr, "kept cluster and nogoo9 logs in %s\n", root)
		return
	}
	_ = os.RemoveAll(root)
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		suiteFailed = true
	}
})

// ctxTimeout is a context for one API call sequence outside Eventually.
func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
