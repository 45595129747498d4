package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Binaries the cluster runs, looked up in Options.BinDir.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeScheduler         = "kube-scheduler"
	KubeControllerManager = "kube-controller-manager"
	Kwok                  = "kwok"
)

// binaries in start order; Stop goes the other way.
var binaries = []string{Etcd, KubeAPIServer, KubeScheduler, KubeControllerManager, Kwok}

// Kwok node conventions.
const (
	// KwokNodeAnnotation marks a Node as fake; kwok manages only Nodes carrying it.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// KwokNodeValue is KwokNodeAnnotation's value.
	KwokNodeValue = "fake"
	// PodCIDR is the range kwok gives pod IPs from: loopback, so a test server can listen on a
	// pod's IP and be reached through a proxy.
	PodCIDR = "127.1.0.0/16"
	// NodeIP is the fake nodes' InternalIP.
	NodeIP = "127.0.0.1"
)

// Options configures Start. BinDir and Dir are required; everything else has a default.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok
	// (built by `make tools`).
	BinDir string
	// Dir holds the cluster's data, keys, kubeconfig, state.json and one log file per process.
	// It is created if missing. A Dir left by a cluster that is no longer running is cleaned;
	// a Dir whose cluster still runs is refused.
	Dir string

	// APIServerPort and EtcdPort pin ports on 127.0.0.1; 0 picks free ones.
	APIServerPort int
	EtcdPort      int

	// Nodes is the number of kwok nodes (default 1); NodePods is each node's pods capacity
	// (default 20000).
	Nodes    int
	NodePods int

	// KwokPodWorkers is how many pod stages kwok plays at once (its podPlayStageParallelism;
	// default 32). One kwok process plays the kubelet of every node, and each stage is one
	// request (a pod's Ready status, a deletion's confirmation) that waits for the API server:
	// with kwok's own default of 4, a thousand pods started at once queue behind four requests
	// in flight, and the queue's length follows the API server's latency, where real nodes'
	// kubelets each write their own pods' status.
	KwokPodWorkers int

	// ServiceClusterIPRange is the API server's --service-cluster-ip-range (default 10.96.0.0/16;
	// nothing routes to it, kwok has no kube-proxy).
	ServiceClusterIPRange string

	// Extra flags appended to each process's command line (a later flag wins), for example
	// raised --kube-api-qps/--kube-api-burst on the controller-manager for benchmarks.
	ExtraEtcdFlags              []string
	ExtraAPIServerFlags         []string
	ExtraSchedulerFlags         []string
	ExtraControllerManagerFlags []string
	ExtraKwokFlags              []string

	// Detach starts the processes in their own sessions so they outlive the caller (hack/cluster
	// up); stop them with StopDir. Without it they are killed when the caller dies.
	Detach bool

	// StartTimeout bounds the whole start (default 3 minutes: the machine may be busy).
	StartTimeout time.Duration
	// StopTimeout is how long a process gets after SIGTERM before SIGKILL (default 10 s).
	StopTimeout time.Duration

	// Progress, if set, receives one line per step ("starting kube-apiserver", ...).
	Progress func(format string, args ...any)
}

func (o *Options) defaults() {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.NodePods == 0 {
		o.NodePods = 20000
	}
	if o.KwokPodWorkers == 0 {
		o.KwokPodWorkers = DefaultKwokPodWorkers
	}
	if o.ServiceClusterIPRange == "" {
		o.ServiceClusterIPRange = "10.96.0.0/16"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 3 * time.Minute
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
}

// validate checks the options and that every binary is there and executable.
func (o *Options) validate() error {
	if o.BinDir == "" {
		return errors.New("localcluster: Options.BinDir is empty: set it to the directory `make tools` builds into (bin/)")
	}
	if o.Dir == "" {
		return errors.New("localcluster: Options.Dir is empty: set it to a directory for the cluster's data and logs")
	}
	for name, p := range map[string]int{"APIServerPort": o.APIServerPort, "EtcdPort": o.EtcdPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("localcluster: Options.%s = %d: use a port in 1-65535, or 0 for a free one", name, p)
		}
	}
	if o.Nodes < 0 || o.NodePods < 0 {
		return fmt.Errorf("localcluster: Options.Nodes = %d, NodePods = %d: use positive numbers (0 for the defaults)", o.Nodes, o.NodePods)
	}
	if o.KwokPodWorkers < 0 {
		return fmt.Errorf("localcluster: Options.KwokPodWorkers = %d: use a positive number (0 for the default, %d)", o.KwokPodWorkers, DefaultKwokPodWorkers)
	}
	var missing []string
	for _, b := range binaries {
		st, err := os.Stat(filepath.Join(o.BinDir, b))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("localcluster: %v missing or not executable in %s: run `make tools` to build the control plane", missing, o.BinDir)
	}
	return nil
}
