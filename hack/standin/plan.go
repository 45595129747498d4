package standin

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Role says which of a workspace's ports a backend plays.
type Role string

const (
	RoleWorkspace Role = "workspace"
	RolePreview   Role = "preview"
)

// Workload is what a backend knows about the pod it stands in for.
type Workload struct {
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	// Workspace is the workspace id, Name its display name ("" when none was given).
	Workspace       string `json:"workspace"`
	Name            string `json:"name"`
	Owner           string `json:"owner"`
	Template        string `json:"template"`
	TemplateVersion string `json:"templateVersion"`
}

// DisplayName is the workspace's display name, or its id when it has none.
func (w Workload) DisplayName() string {
	if w.Name != "" {
		return w.Name
	}
	return w.Workspace
}

// Backend is one listener the stand-in wants: a pod's IP and one of its ports.
type Backend struct {
	Addr string `json:"addr"` // ip:port
	Role Role   `json:"role"`
	Workload
}

// Skip is a pod the stand-in does not serve although it is Running, and why.
type Skip struct {
	Pod    string
	Reason string
}

// Plan returns the backends to serve for pods, keyed by address, and the Running pods it refuses
// with the reason. It is pure. A pod is served when it is a workspace pod, Running, not being
// deleted, and has a loopback IPv4 pod IP; each of its valid, distinct workspace and preview ports
// becomes a backend. When two pods claim one address, the older one (then the lower name) keeps it.
func Plan(pods []*corev1.Pod) (map[string]Backend, []Skip) {
	pods = append([]*corev1.Pod(nil), pods...)
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	want := map[string]Backend{}
	var skips []Skip
	for _, pod := range pods {
		if pod.Labels[workspace.LabelType] != workspace.TypeWorkspace || pod.Status.Phase != corev1.PodRunning ||
			pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
			continue
		}
		skip := func(format string, a ...any) {
			skips = append(skips, Skip{Pod: pod.Namespace + "/" + pod.Name, Reason: fmt.Sprintf(format, a...)})
		}
		if err := CheckLoopback(pod.Status.PodIP); err != nil {
			skip("%v", err)
			continue
		}
		wl := Workload{
			Namespace:       pod.Namespace,
			Pod:             pod.Name,
			UID:             pod.UID,
			Workspace:       pod.Labels[workspace.LabelWorkspaceID],
			Name:            pod.Annotations[workspace.AnnWorkspaceName],
			Owner:           pod.Annotations[workspace.AnnOwner],
			Template:        pod.Labels[workspace.LabelTemplate],
			TemplateVersion: pod.Annotations[workspace.AnnTemplateVersion],
		}
		seen := map[int]bool{}
		for _, p := range []struct {
			role Role
			key  string
		}{{RoleWorkspace, workspace.AnnWorkspacePort}, {RolePreview, workspace.AnnPreviewPort}} {
			v, ok := pod.Annotations[p.key]
			if !ok {
				continue
			}
			port, err := strconv.Atoi(v)
			if err != nil || port < 1 || port > 65535 {
				skip("annotation %s=%q is not a port (1-65535)", p.key, v)
				continue
			}
			if seen[port] {
				continue
			}
			seen[port] = true
			addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))
			if other, taken := want[addr]; taken {
				skip("address %s is already served for pod %s/%s", addr, other.Namespace, other.Pod)
				continue
			}
			want[addr] = Backend{Addr: addr, Role: p.role, Workload: wl}
		}
		if len(seen) == 0 && !hasPortAnnotation(pod) {
			skip("no %s or %s annotation", workspace.AnnWorkspacePort, workspace.AnnPreviewPort)
		}
	}
	return want, skips
}

func hasPortAnnotation(pod *corev1.Pod) bool {
	_, a := pod.Annotations[workspace.AnnWorkspacePort]
	_, b := pod.Annotations[workspace.AnnPreviewPort]
	return a || b
}

// CheckLoopback returns an error unless ip is an IPv4 address in 127.0.0.0/8: the stand-in never
// listens anywhere a peer off this machine could reach.
func CheckLoopback(ip string) error {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() || !a.IsLoopback() {
		return fmt.Errorf("pod IP %q is not a loopback IPv4 address (127.0.0.0/8); the stand-in serves only kwok's loopback pod IPs", ip)
	}
	return nil
}
