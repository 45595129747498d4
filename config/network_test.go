package config_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nogoo9/no-crd/pkg/spawner"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The NetworkPolicies are only as good as their selectors: a label renamed in the spawner or in a
// Deployment would make a policy select nothing, and the network would be open again without any
// error. These tests hold the policies against the pods nogoo9 really creates (rendered by the
// spawner from the sample templates) and the proxy's pods of each overlay.

const (
	ingressPolicy = "nogoo9-workspace-ingress"
	egressPolicy  = "nogoo9-workspace-egress"
)

// samplePods renders every sample template with the spawner, as a spawn would.
func samplePods(t *testing.T) []*corev1.Pod {
	t.Helper()
	loaded, err := templates.LoadDir("samples")
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, l := range loaded {
		if l.Err != nil {
			t.Fatalf("sample %s: %v", l.Name, l.Err)
		}
		id := spawner.Identity{Owner: "jane@example.com", ID: "net-" + l.Name, Context: map[string]string{"repo": "https://example.com/r.git"}}
		pod, _, err := spawner.BuildPod(l.Template, id, workspace.PodName(id.Owner, id.ID))
		if err != nil {
			t.Fatalf("render sample %s: %v", l.Name, err)
		}
		pods = append(pods, pod)
	}
	if len(pods) == 0 {
		t.Fatal("no sample templates to render")
	}
	return pods
}

func selects(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}

// peerSelects reports whether peer, of a policy in the install's namespace, selects a pod with
// labels l there.
func peerSelects(peer networkingv1.NetworkPolicyPeer, l map[string]string) (bool, error) {
	return peerSelectsIn(peer, namespace, namespace, l)
}

// peerSelectsIn reports whether peer, of a policy in namespace policyNS, selects a pod with labels
// l in namespace podNS (labelled as the API server labels every namespace): a peer without a
// namespaceSelector selects pods of the policy's own namespace only.
func peerSelectsIn(peer networkingv1.NetworkPolicyPeer, policyNS, podNS string, l map[string]string) (bool, error) {
	if peer.IPBlock != nil {
		return false, nil
	}
	if peer.NamespaceSelector != nil {
		ok, err := selects(peer.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": podNS})
		if err != nil || !ok {
			return false, err
		}
	} else if podNS != policyNS {
		return false, nil
	}
	if peer.PodSelector == nil {
		return true, nil
	}
	return selects(peer.PodSelector, l)
}

// otherTeam is a namespace no policy under test belongs to: a peer that selects its pods reaches
// beyond what it should.
const otherTeam = "team-z"

// containerPort resolves a NetworkPolicy port (number or name) on pod.
func containerPort(pod *corev1.Pod, p networkingv1.NetworkPolicyPort) int32 {
	if p.Port == nil {
		return -1 // every port
	}
	if p.Port.IntValue() != 0 {
		return int32(p.Port.IntValue())
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == p.Port.StrVal {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// checkNetwork returns every way the NetworkPolicies of m fail to isolate pods (workspace pods as
// the spawner renders them): empty means isolated as docs/security.md says. Every policy of the
// install is in its namespace.
func checkNetwork(m *manifests, pods []*corev1.Pod) []string {
	var problems []string
	for _, np := range m.networkPolicies {
		if np.Namespace != namespace {
			problems = append(problems, fmt.Sprintf("NetworkPolicy %s is in namespace %q, want %q (the workspaces' namespace)", np.Name, np.Namespace, namespace))
		}
	}
	return append(problems, checkNetworkIn(m, pods, namespace)...)
}

// checkNetworkIn checks the workspace NetworkPolicies of namespace ns (nogoo9's own, or a team
// namespace nogoo9 watches, where the proxy's pods are in another namespace): workspace pods of ns
// are reached only by the proxy's pods (in the install's namespace), and reach no workspace of
// any namespace and no pod of nogoo9.
func checkNetworkIn(m *manifests, pods []*corev1.Pod, ns string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(ns+": "+format, args...)) }
	byName := map[string]networkingv1.NetworkPolicy{}
	for _, np := range m.networkPolicies {
		if np.Namespace == ns {
			byName[np.Name] = np
		}
	}
	in, ok := byName[ingressPolicy]
	if !ok {
		add("no NetworkPolicy %s: workspace pods accept connections from anywhere", ingressPolicy)
	}
	out, ok := byName[egressPolicy]
	if !ok {
		add("no NetworkPolicy %s: workspace pods may connect to other workspaces and to nogoo9", egressPolicy)
	}
	if len(problems) > 0 {
		return problems
	}

	// Deployments and whether they run the proxy.
	type deploy struct {
		name   string
		labels map[string]string
		proxy  bool
	}
	var deploys []deploy
	for _, d := range m.deployments {
		comps, _ := components(d.Spec.Template.Spec.Containers[0])
		deploys = append(deploys, deploy{d.Name, d.Spec.Template.Labels, strings.Contains(comps, "proxy")})
	}

	// Ingress: every workspace pod is isolated, and only the proxy's pods get in, on the ports
	// the proxy forwards to.
	if !containsType(in.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		add("%s: policyTypes %v lack Ingress: it isolates nothing", in.Name, in.Spec.PolicyTypes)
	}
	for _, pod := range pods {
		if ok, err := selects(&in.Spec.PodSelector, pod.Labels); err != nil || !ok {
			add("%s: podSelector %v does not select workspace pod %s (labels %v): its ingress is open", in.Name, metav1.FormatLabelSelector(&in.Spec.PodSelector), pod.Name, pod.Labels)
		}
	}
	for _, d := range deploys {
		if ok, _ := selects(&in.Spec.PodSelector, d.labels); ok {
			add("%s: podSelector selects the pods of Deployment %s: nogoo9 itself would be cut off", in.Name, d.name)
		}
	}
	var proxies int
	for _, rule := range in.Spec.Ingress {
		if len(rule.From) == 0 {
			add("%s: a rule without \"from\" admits every source", in.Name)
		}
		for _, peer := range rule.From {
			// The proxy's pods are in the install's namespace: a peer may name that namespace (a
			// team namespace's policy must) but no other.
			beyond := peer.IPBlock != nil
			if peer.NamespaceSelector != nil {
				for _, other := range []string{otherTeam, "default", "kube-system"} {
					if ok, _ := peerSelectsIn(networkingv1.NetworkPolicyPeer{NamespaceSelector: peer.NamespaceSelector}, ns, other, nil); ok && other != namespace {
						beyond = true
					}
				}
			}
			if beyond {
				add("%s: peer %+v admits sources beyond nogoo9's proxy pods", in.Name, peer)
			}
			for _, pod := range pods {
				for _, podNS := range []string{ns, namespace, otherTeam} {
					if ok, _ := peerSelectsIn(peer, ns, podNS, pod.Labels); ok {
						add("%s: peer %v admits workspace pod %s of namespace %s: workspaces could reach each other", in.Name, metav1.FormatLabelSelector(peer.PodSelector), pod.Name, podNS)
					}
				}
			}
			for _, d := range deploys {
				ok, err := peerSelectsIn(peer, ns, namespace, d.labels)
				switch {
				case err != nil:
					add("%s: %v", in.Name, err)
				case ok && d.proxy:
					proxies++
				case ok && !d.proxy:
					add("%s: peer %v admits Deployment %s, which does not run the proxy", in.Name, metav1.FormatLabelSelector(peer.PodSelector), d.name)
				}
			}
		}
		// The proxy forwards to the workspace and preview ports (annotations on the pod): each
		// must be among the rule's ports on every sample pod, and no other port may be.
		for _, pod := range pods {
			want := map[int32]bool{}
			for _, key := range []string{workspace.AnnWorkspacePort, workspace.AnnPreviewPort} {
				n, _ := strconv.Atoi(pod.Annotations[key])
				want[int32(n)] = true
			}
			got := map[int32]bool{}
			for _, p := range rule.Ports {
				got[containerPort(pod, p)] = true
			}
			if got[-1] || len(rule.Ports) == 0 {
				add("%s: a rule without ports admits every port of the workspace", in.Name)
			}
			for port := range want {
				if !got[port] {
					add("%s: port %d of workspace pod %s (template %s), which the proxy forwards to, is not admitted: name the containerPort \"workspace\" or \"preview\"", in.Name, port, pod.Name, pod.Labels[workspace.LabelTemplate])
				}
			}
		}
	}
	var proxyDeploys int
	for _, d := range deploys {
		if d.proxy {
			proxyDeploys++
		}
	}
	if proxyDeploys == 0 || proxies < proxyDeploys {
		add("%s: admits %d of the %d Deployments that run the proxy: the proxy could not reach workspaces", in.Name, proxies, proxyDeploys)
	}

	// Egress: every workspace pod is isolated; no pod peer reaches a workspace or nogoo9; no
	// address block reaches private, shared or link-local addresses.
	if !containsType(out.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		add("%s: policyTypes %v lack Egress: it isolates nothing", out.Name, out.Spec.PolicyTypes)
	}
	for _, pod := range pods {
		if ok, err := selects(&out.Spec.PodSelector, pod.Labels); err != nil || !ok {
			add("%s: podSelector %v does not select workspace pod %s: its egress is open", out.Name, metav1.FormatLabelSelector(&out.Spec.PodSelector), pod.Name)
		}
	}
	var dns bool
	for _, rule := range out.Spec.Egress {
		for _, p := range rule.Ports {
			dns = dns || (p.Port != nil && p.Port.IntValue() == 53 && slices.ContainsFunc(rule.To, selectsClusterDNS))
		}
		if len(rule.To) == 0 && len(rule.Ports) == 0 {
			add("%s: a rule with neither \"to\" nor ports allows everything", out.Name)
		}
		// Before stop 49 the DNS rule had ports and no "to": port 53 on every address, so a
		// workspace reached any other workspace (or the internet, with egress-restricted) on it.
		if len(rule.To) == 0 && len(rule.Ports) > 0 {
			add("%s: a rule with ports %v and no \"to\" opens them on every address, other workspaces included", out.Name, ports(rule.Ports))
		}
		for _, peer := range rule.To {
			for _, pod := range pods {
				for _, podNS := range []string{ns, namespace, otherTeam} {
					if ok, _ := peerSelectsIn(peer, ns, podNS, pod.Labels); ok {
						add("%s: peer %+v lets a workspace reach workspace pod %s of namespace %s", out.Name, peer, pod.Name, podNS)
					}
				}
			}
			for _, d := range deploys {
				if ok, _ := peerSelectsIn(peer, ns, namespace, d.labels); ok {
					add("%s: peer %+v lets a workspace reach nogoo9's Deployment %s (API, metrics, probes)", out.Name, peer, d.name)
				}
			}
			if peer.IPBlock == nil {
				continue
			}
			for _, addr := range []string{"10.1.2.3", "172.20.0.5", "192.168.1.1", "100.64.0.10", "169.254.169.254", "127.0.0.1", "fd00::1", "fe80::1"} {
				if blockAllows(peer.IPBlock, netip.MustParseAddr(addr)) {
					add("%s: ipBlock %s lets a workspace reach %s, where the cluster's pods, Services or the cloud metadata service may be", out.Name, peer.IPBlock.CIDR, addr)
				}
			}
		}
	}
	if !dns {
		add("%s: DNS (port 53 to the kube-dns pods in kube-system) is not allowed: workspaces could not resolve names", out.Name)
	}
	return problems
}

// selectsClusterDNS: peer selects the cluster's resolver (pods k8s-app=kube-dns in kube-system)
// and nothing else (not another pod there, not a pod of another namespace).
func selectsClusterDNS(peer networkingv1.NetworkPolicyPeer) bool {
	if peer.NamespaceSelector == nil || peer.PodSelector == nil {
		return false
	}
	is := func(sel *metav1.LabelSelector, l map[string]string) bool {
		ok, err := selects(sel, l)
		return err == nil && ok
	}
	return is(peer.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": "kube-system"}) &&
		!is(peer.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": "team-a"}) &&
		is(peer.PodSelector, map[string]string{"k8s-app": "kube-dns"}) &&
		!is(peer.PodSelector, map[string]string{"app": "postgres"})
}

func ports(ps []networkingv1.NetworkPolicyPort) []string {
	var out []string
	for _, p := range ps {
		if p.Port != nil {
			out = append(out, p.Port.String())
		}
	}
	return out
}

func containsType(ts []networkingv1.PolicyType, t networkingv1.PolicyType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func blockAllows(b *networkingv1.IPBlock, a netip.Addr) bool {
	p, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !p.Contains(a) {
		return false
	}
	for _, e := range b.Except {
		if ep, err := netip.ParsePrefix(e); err == nil && ep.Contains(a) {
			return false
		}
	}
	return true
}

// The default egress lets workspaces reach the internet and the cluster's other services.
func TestDefaultEgressKeepsTheOutsideWorld(t *testing.T) {
	m := build(t, "default")
	var open, other bool
	for _, np := range m.networkPolicies {
		if np.Name != egressPolicy {
			continue
		}
		for _, rule := range np.Spec.Egress {
			for _, peer := range rule.To {
				if peer.IPBlock != nil && blockAllows(peer.IPBlock, netip.MustParseAddr("8.8.8.8")) && len(rule.Ports) == 0 {
					open = true
				}
				if ok, _ := peerSelects(peer, map[string]string{"app": "postgres"}); ok {
					other = true
				}
			}
		}
	}
	if !open || !other {
		t.Errorf("%s: internet reachable %v, other cluster pods reachable %v: the default keeps both (config/egress-restricted takes them away)", egressPolicy, open, other)
	}
}

// config/egress-restricted, used from an overlay of either install, keeps the isolation and allows
// only DNS and the listed destinations.
func TestEgressRestrictedComponent(t *testing.T) {
	pods := samplePods(t)
	for _, base := range []string{"default", "split"} {
		t.Run(base, func(t *testing.T) {
			abs, err := filepath.Abs(".")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			rel := func(p string) string {
				r, err := filepath.Rel(dir, filepath.Join(abs, p))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s]\n", rel(base), rel("egress-restricted"))
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
				t.Fatal(err)
			}
			m := parse(t, base+"+egress-restricted", kustomize(t, dir))
			for _, p := range checkNetwork(m, pods) {
				t.Error(p)
			}
			for _, np := range m.networkPolicies {
				if np.Name != egressPolicy {
					continue
				}
				for _, rule := range np.Spec.Egress {
					for _, peer := range rule.To {
						if selectsClusterDNS(peer) && slices.Equal(ports(rule.Ports), []string{"53", "53"}) {
							continue // the cluster's resolver, on port 53 (UDP and TCP) only
						}
						if peer.IPBlock == nil || blockAllows(peer.IPBlock, netip.MustParseAddr("8.8.8.8")) {
							t.Errorf("%s: peer %+v allows more than the listed destinations", np.Name, peer)
						}
					}
				}
			}
		})
	}
}

// checkNetwork must catch each way a rename would silently open the network.
func TestNetworkCheckCatchesRenames(t *testing.T) {
	pods := samplePods(t)
	// One kustomize run (about a second); each case parses its own manifests from its output.
	split := kustomize(t, "split").Bytes()
	for _, tc := range []struct {
		name   string
		mutate func(m *manifests, pods []*corev1.Pod)
		want   string
	}{
		{name: "the spawner renames the workspace type label",
			mutate: func(_ *manifests, pods []*corev1.Pod) {
				for _, p := range pods {
					p.Labels["nogoo9/kind"] = p.Labels[workspace.LabelType]
					delete(p.Labels, workspace.LabelType)
				}
			},
			want: "does not select workspace pod"},
		{name: "the server Deployment's component label changes",
			mutate: func(m *manifests, _ []*corev1.Pod) {
				for i := range m.deployments {
					m.deployments[i].Spec.Template.Labels["app.kubernetes.io/component"] = "frontend"
				}
			},
			want: "the proxy could not reach workspaces"},
		{name: "a template names its IDE port differently",
			mutate: func(_ *manifests, pods []*corev1.Pod) {
				pods[0].Spec.Containers[0].Ports[0].Name = "ide"
			},
			want: "is not admitted"},
		{name: "the ingress rule admits every pod of the namespace",
			mutate: func(m *manifests, _ []*corev1.Pod) {
				for i := range m.networkPolicies {
					if m.networkPolicies[i].Name == ingressPolicy {
						m.networkPolicies[i].Spec.Ingress[0].From[0].PodSelector = &metav1.LabelSelector{}
					}
				}
			},
			want: "workspaces could reach each other"},
		{name: "the egress address block drops the private ranges",
			mutate: func(m *manifests, _ []*corev1.Pod) {
				for i := range m.networkPolicies {
					for j := range m.networkPolicies[i].Spec.Egress {
						for k := range m.networkPolicies[i].Spec.Egress[j].To {
							if b := m.networkPolicies[i].Spec.Egress[j].To[k].IPBlock; b != nil {
								b.Except = nil
							}
						}
					}
				}
			},
			want: "169.254.169.254"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := parse(t, "split", bytes.NewBuffer(split))
			ps := make([]*corev1.Pod, len(pods))
			for i, p := range pods {
				ps[i] = p.DeepCopy()
			}
			tc.mutate(m, ps)
			problems := strings.Join(checkNetwork(m, ps), "\n")
			if !strings.Contains(problems, tc.want) {
				t.Errorf("checkNetwork did not report %q; it said:\n%s", tc.want, problems)
			}
		})
	}
}
