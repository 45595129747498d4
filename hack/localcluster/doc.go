// Package localcluster runs a real, small Kubernetes control plane on loopback for nogoo9's
// end-to-end tests, `make cluster-up` and `make demo`: etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager and kwok (which plays the kubelet for fake nodes), all built from the Go
// module proxy into bin/ by `make tools`.
//
// Start brings the processes up in order, waits for each to be ready (every wait is bounded) and
// returns a Cluster; Cluster.Stop stops them in reverse order. Every process runs in its own process
// group; in the default mode the children also die with the calling process (Pdeathsig), and with
// Options.Detach they outlive it (hack/cluster up) and are stopped later from the state file with
// StopDir (hack/cluster down).
//
// The API server is also a real OIDC issuer: service-account tokens minted with
// Cluster.ServiceAccountToken verify against IssuerURL with any OIDC library.
package localcluster
