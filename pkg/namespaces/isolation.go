package namespaces

import (
	"context"
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Unisolation is a watched namespace whose workspace pods no NetworkPolicy isolates in the
// directions Missing (Ingress, Egress, in that order).
type Unisolation struct {
	Namespace string
	Missing   []networkingv1.PolicyType
}

// workspacePodLabels are the labels by which a NetworkPolicy can tell a workspace pod: the ones
// nogoo9 writes on every workspace pod (and only it may write, where the admission policy applies).
var workspacePodLabels = labels.Set{workspace.LabelType: workspace.TypeWorkspace}

// MissingIsolation returns the directions (Ingress, Egress) in which no policy of policies
// selects workspace pods: where a direction is missing, a workspace pod accepts connections from,
// or opens them to, any pod, another tenant's workspaces included. A policy without policyTypes
// counts as the API server defaults it (Ingress, and Egress if it has egress rules).
func MissingIsolation(policies []networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	var in, out bool
	for i := range policies {
		spec := &policies[i].Spec
		sel, err := metav1.LabelSelectorAsSelector(&spec.PodSelector)
		if err != nil || !sel.Matches(workspacePodLabels) {
			continue
		}
		types := spec.PolicyTypes
		if len(types) == 0 {
			types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			if len(spec.Egress) > 0 {
				types = append(types, networkingv1.PolicyTypeEgress)
			}
		}
		in = in || slices.Contains(types, networkingv1.PolicyTypeIngress)
		out = out || slices.Contains(types, networkingv1.PolicyTypeEgress)
	}
	var missing []networkingv1.PolicyType
	if !in {
		missing = append(missing, networkingv1.PolicyTypeIngress)
	}
	if !out {
		missing = append(missing, networkingv1.PolicyTypeEgress)
	}
	return missing
}

// Unisolated returns the namespaces of watched, home aside, whose workspace pods no NetworkPolicy
// isolates both ways (MissingIsolation), sorted: there a workspace can connect to another
// tenant's workspace pod port directly, past the proxy, and the sample IDEs trust whoever
// connects (docs/deploy.md, "Several namespaces": apply config/namespaces/workspace-network).
// nogoo9's own namespace is left out: its policies are part of the install (config/network).
// reader lists NetworkPolicies in each namespace (`list networkpolicies`, granted per namespace by
// the nogoo9-workspaces ClusterRole); one List per namespace. It says nothing of whether a
// network plugin enforces the policies.
func Unisolated(ctx context.Context, reader client.Reader, watched []string, home string) ([]Unisolation, error) {
	var out []Unisolation
	for _, n := range slices.Sorted(slices.Values(watched)) {
		if n == home {
			continue
		}
		var list networkingv1.NetworkPolicyList
		if err := reader.List(ctx, &list, client.InNamespace(n)); err != nil {
			return nil, fmt.Errorf("list the NetworkPolicies of namespace %s: %w", n, err)
		}
		if missing := MissingIsolation(list.Items); len(missing) > 0 {
			out = append(out, Unisolation{Namespace: n, Missing: missing})
		}
	}
	return out, nil
}
