package localcluster

import (
	"slices"
	"strings"
	"testing"
)

func testLayout() layout {
	l := newLayout("/c")
	l.etcdPort, l.etcdPeerPort, l.apiPort, l.schedulerPort, l.kcmPort, l.kwokPort = 2379, 2380, 6443, 10259, 10257, 10247
	l.serviceCIDR = "10.96.0.0/16"
	return l
}

func TestFlagBuilders(t *testing.T) {
	l := testLayout()
	tests := []struct {
		name      string
		args      []string
		wantFlags []string
	}{
		{
			name: "etcd listens on loopback only and keeps its data in the cluster dir",
			args: etcdArgs(l, nil),
			wantFlags: []string{"--data-dir=/c/etcd", "--listen-client-urls=http://127.0.0.1:2379",
				"--listen-peer-urls=http://127.0.0.1:2380", "--initial-cluster=nogoo9=http://127.0.0.1:2380"},
		},
		{
			name: "apiserver is a loopback OIDC issuer with token auth, RBAC and no endpoint reconciler",
			args: apiServerArgs(l, nil),
			wantFlags: []string{"--etcd-servers=http://127.0.0.1:2379", "--bind-address=127.0.0.1", "--secure-port=6443",
				"--endpoint-reconciler-type=none", "--authorization-mode=Node,RBAC", "--token-auth-file=/c/pki/tokens.csv",
				"--service-account-issuer=https://127.0.0.1:6443", "--service-account-key-file=/c/pki/sa.pub",
				"--service-account-signing-key-file=/c/pki/sa.key", "--service-cluster-ip-range=10.96.0.0/16",
				"--tls-cert-file=/c/pki/apiserver.crt"},
		},
		{
			name: "scheduler uses the admin kubeconfig for everything and does not elect a leader",
			args: schedulerArgs(l, nil),
			wantFlags: []string{"--kubeconfig=/c/kubeconfig", "--authentication-kubeconfig=/c/kubeconfig",
				"--authorization-kubeconfig=/c/kubeconfig", "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259"},
		},
		{
			name: "controller-manager signs with the service-account key and skips legacy token secrets",
			args: controllerManagerArgs(l, nil),
			wantFlags: []string{"--kubeconfig=/c/kubeconfig", "--secure-port=10257", "--service-account-private-key-file=/c/pki/sa.key",
				"--use-service-account-credentials=false", "--controllers=*,-serviceaccount-token", "--leader-elect=false"},
		},
		{
			name: "kwok manages only annotated fake nodes and hands out loopback pod IPs",
			args: kwokArgs(l, nil),
			wantFlags: []string{"--kubeconfig=/c/kubeconfig", "--config=/c/kwok.yaml", "--manage-all-nodes=false",
				"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--cidr=127.1.0.0/16", "--node-ip=127.0.0.1",
				"--server-address=127.0.0.1:10247"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range tt.wantFlags {
				if !slices.Contains(tt.args, f) {
					t.Errorf("flag %q missing from %v", f, tt.args)
				}
			}
			for _, a := range tt.args {
				if strings.Contains(a, "0.0.0.0") {
					t.Errorf("flag %q binds beyond loopback", a)
				}
			}
		})
	}
}

func TestExtraFlagsComeLastSoTheyWin(t *testing.T) {
	l := testLayout()
	extra := []string{"--kube-api-qps=1000", "--kube-api-burst=2000"}
	builders := map[string]func(layout, []string) []string{
		"etcd": etcdArgs, "apiserver": apiServerArgs, "scheduler": schedulerArgs,
		"controller-manager": controllerManagerArgs, "kwok": kwokArgs,
	}
	for name, build := range builders {
		t.Run(name, func(t *testing.T) {
			args := build(l, extra)
			if got := args[len(args)-2:]; !slices.Equal(got, extra) {
				t.Errorf("last flags = %v, want %v", got, extra)
			}
		})
	}
}
