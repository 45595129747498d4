package localcluster

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// layout names every file and port of one cluster; the flag builders below are pure functions of it.
type layout struct {
	dir string

	etcdPort, etcdPeerPort int
	apiPort                int
	schedulerPort, kcmPort int
	kwokPort               int

	serviceCIDR string
}

func newLayout(dir string) layout { return layout{dir: dir} }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.dir}, elem...)...)
}

func (l layout) etcdDataDir() string     { return l.path("etcd") }
func (l layout) pkiDir() string          { return l.path("pki") }
func (l layout) caCert() string          { return l.path("pki", "ca.crt") }
func (l layout) servingCert() string     { return l.path("pki", "apiserver.crt") }
func (l layout) servingKey() string      { return l.path("pki", "apiserver.key") }
func (l layout) saKey() string           { return l.path("pki", "sa.key") }
func (l layout) saPub() string           { return l.path("pki", "sa.pub") }
func (l layout) tokenFile() string       { return l.path("pki", "tokens.csv") }
func (l layout) kubeconfig() string      { return l.path("kubeconfig") }
func (l layout) kwokConfigFile() string  { return l.path("kwok.yaml") }
func (l layout) stateFile() string       { return l.path(stateFileName) }
func (l layout) logFile(n string) string { return l.path(n + ".log") }
func (l layout) volumesDir() string      { return l.path("volumes") }

func (l layout) etcdURL() string      { return "http://127.0.0.1:" + strconv.Itoa(l.etcdPort) }
func (l layout) etcdPeerURL() string  { return "http://127.0.0.1:" + strconv.Itoa(l.etcdPeerPort) }
func (l layout) apiServerURL() string { return "https://127.0.0.1:" + strconv.Itoa(l.apiPort) }

// issuerURL is the service-account issuer: the API server itself, so it serves its own OIDC
// discovery document and keys.
func (l layout) issuerURL() string { return l.apiServerURL() }

func etcdArgs(l layout, extra []string) []string {
	args := []string{
		"--name=nogoo9",
		"--data-dir=" + l.etcdDataDir(),
		"--listen-client-urls=" + l.etcdURL(),
		"--advertise-client-urls=" + l.etcdURL(),
		"--listen-peer-urls=" + l.etcdPeerURL(),
		"--initial-advertise-peer-urls=" + l.etcdPeerURL(),
		"--initial-cluster=nogoo9=" + l.etcdPeerURL(),
		// A throwaway test cluster: durability is not worth the fsync latency.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
	return append(args, extra...)
}

func apiServerArgs(l layout, extra []string) []string {
	args := []string{
		"--etcd-servers=" + l.etcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.apiPort),
		// On loopback the default endpoint reconciler refuses 127.0.0.1 as a public address.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + l.pkiDir(),
		"--tls-cert-file=" + l.servingCert(),
		"--tls-private-key-file=" + l.servingKey(),
		"--client-ca-file=" + l.caCert(),
		"--token-auth-file=" + l.tokenFile(),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + l.issuerURL(),
		"--service-account-key-file=" + l.saPub(),
		"--service-account-signing-key-file=" + l.saKey(),
		"--service-cluster-ip-range=" + l.serviceCIDR,
		"--allow-privileged=true",
		"--profiling=false",
	}
	return append(args, extra...)
}

// componentArgs are the flags kube-scheduler and kube-controller-manager share.
func componentArgs(l layout, port int) []string {
	return []string{
		"--kubeconfig=" + l.kubeconfig(),
		"--authentication-kubeconfig=" + l.kubeconfig(),
		"--authorization-kubeconfig=" + l.kubeconfig(),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
	}
}

func schedulerArgs(l layout, extra []string) []string {
	return append(componentArgs(l, l.schedulerPort), extra...)
}

func controllerManagerArgs(l layout, extra []string) []string {
	args := append(componentArgs(l, l.kcmPort),
		"--service-account-private-key-file="+l.saKey(),
		"--root-ca-file="+l.caCert(),
		"--use-service-account-credentials=false",
		// Legacy secret-based tokens are not wanted; TokenRequest serves tokens.
		"--controllers=*,-serviceaccount-token",
		"--profiling=false",
	)
	return append(args, extra...)
}

func kwokArgs(l layout, extra []string) []string {
	args := []string{
		"--kubeconfig=" + l.kubeconfig(),
		"--config=" + l.kwokConfigFile(),
		"--manage-all-nodes=false",
		fmt.Sprintf("--manage-nodes-with-annotation-selector=%s=%s", KwokNodeAnnotation, KwokNodeValue),
		"--cidr=" + PodCIDR,
		"--node-ip=" + NodeIP,
		"--server-address=127.0.0.1:" + strconv.Itoa(l.kwokPort),
	}
	return append(args, extra...)
}
