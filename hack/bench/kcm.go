package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
)

// RolloutControllers are the controllers that roll Deployments. The cluster's own
// controller-manager runs without them (ClusterControllerManagerFlags) and the benchmark runs
// them in a kube-controller-manager of its own, restarted with default or raised client limits
// between rounds, so both settings are measured interleaved on the same cluster.
const rolloutControllers = "deployment-controller,replicaset-controller"

// ClusterControllerManagerFlags turn the rollout controllers off in the cluster's
// controller-manager (pflag appends a repeated --controllers to the earlier list) and raise its
// client limits. Its PersistentVolume controller binds every ReadWriteOncePod claim of the
// set-up, about five writes each: at the default 20 requests per second that is about four
// claims per second, four minutes per 1,000 claims and most of an N=1000 set-up (four sets of
// claims, five with an earlier binary), while the scheduler retries the pods that wait for them
// over and over. The measured rollouts give it nothing to write: the claims stay bound, the
// workspaces' and the floors' pods have no owner, and the Deployments' controllers run in
// RolloutKCM with limits of their own.
var ClusterControllerManagerFlags = append([]string{"--controllers=-deployment-controller,-replicaset-controller"},
	raisedClientLimits...)

// RaisedKCMFlags are the raised client limits and worker counts of the "raised" baseline.
var RaisedKCMFlags = append(append([]string{}, raisedClientLimits...),
	"--concurrent-deployment-syncs=50", "--concurrent-replicaset-syncs=50")

// raisedClientLimits are the client limits both controller-managers above raise.
var raisedClientLimits = []string{"--kube-api-qps=1000", "--kube-api-burst=2000"}

// RolloutKCM runs the deployment and replicaset controllers in their own kube-controller-manager.
type RolloutKCM struct {
	Bin        string // kube-controller-manager binary
	Kubeconfig string // admin kubeconfig
	Dir        string // for the log
	Client     kubernetes.Interface
	proc       *Process
	probe      *Deployments
}

// Start starts the controller-manager with extra flags and returns once it demonstrably rolls
// Deployments (a one-Deployment probe rollout completes), so a measured rollout never includes
// the controllers' start-up.
func (k *RolloutKCM) Start(ctx context.Context, extra []string, ports func() (int, error)) error {
	port, err := ports()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + k.Kubeconfig,
		"--authentication-kubeconfig=" + k.Kubeconfig,
		"--authorization-kubeconfig=" + k.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--use-service-account-credentials=false",
		"--controllers=" + rolloutControllers,
		"--profiling=false",
	}
	p, err := StartProcess("kube-controller-manager (rollout)", k.Bin, append(args, extra...), filepath.Join(k.Dir, "rollout-kcm.log"))
	if err != nil {
		return err
	}
	k.proc = p
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := p.WaitHTTP(sctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), nil); err != nil {
		return err
	}
	if k.probe == nil {
		k.probe = &Deployments{Client: k.Client, Namespace: "bench-kcm-probe", N: 1}
		return k.probe.Setup(sctx)
	}
	_, err = k.probe.Roll(sctx, time.Minute)
	return err
}

// Stop stops the controller-manager.
func (k *RolloutKCM) Stop() error {
	if k.proc == nil {
		return nil
	}
	err := k.proc.Stop()
	k.proc = nil
	return err
}
