package namespaces

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func policy(sel metav1.LabelSelector, types ...networkingv1.PolicyType) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: types}}
}

var (
	workspacePods = metav1.LabelSelector{MatchLabels: map[string]string{"nogoo9/type": "workspace"}}
	everyPod      = metav1.LabelSelector{}
	otherPods     = metav1.LabelSelector{MatchLabels: map[string]string{"app": "postgres"}}
	notWorkspaces = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "nogoo9/type", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	ingress       = networkingv1.PolicyTypeIngress
	egress        = networkingv1.PolicyTypeEgress
)

func TestMissingIsolation(t *testing.T) {
	egressRule := networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{PodSelector: workspacePods,
		Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptrTo(intstr.FromInt32(53))}}}}}}
	for _, tc := range []struct {
		name     string
		policies []networkingv1.NetworkPolicy
		want     []networkingv1.PolicyType
	}{
		{name: "no policy at all: workspace pods are open both ways", want: []networkingv1.PolicyType{ingress, egress}},
		{name: "the shipped pair (ingress and egress policies selecting nogoo9/type=workspace) isolates both ways",
			policies: []networkingv1.NetworkPolicy{policy(workspacePods, ingress), policy(workspacePods, egress)}},
		{name: "one policy of both types isolates both ways", policies: []networkingv1.NetworkPolicy{policy(workspacePods, ingress, egress)}},
		{name: "a namespace-wide default deny (empty podSelector) isolates workspace pods too",
			policies: []networkingv1.NetworkPolicy{policy(everyPod, ingress, egress)}},
		{name: "an ingress policy alone leaves egress open", policies: []networkingv1.NetworkPolicy{policy(workspacePods, ingress)},
			want: []networkingv1.PolicyType{egress}},
		{name: "an egress policy alone leaves ingress open", policies: []networkingv1.NetworkPolicy{policy(workspacePods, egress)},
			want: []networkingv1.PolicyType{ingress}},
		{name: "policies that select other pods isolate no workspace",
			policies: []networkingv1.NetworkPolicy{policy(otherPods, ingress, egress), policy(notWorkspaces, ingress, egress)},
			want:     []networkingv1.PolicyType{ingress, egress}},
		{name: "no policyTypes with egress rules means both, as the API server defaults it", policies: []networkingv1.NetworkPolicy{egressRule}},
		{name: "no policyTypes and no egress rules means ingress only", policies: []networkingv1.NetworkPolicy{policy(workspacePods)},
			want: []networkingv1.PolicyType{egress}},
		{name: "a selector that does not parse selects nothing",
			policies: []networkingv1.NetworkPolicy{policy(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "nogoo9/type", Operator: "Bogus"}}}, ingress, egress)},
			want:     []networkingv1.PolicyType{ingress, egress}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MissingIsolation(tc.policies); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MissingIsolation = %v, want %v", got, tc.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// Unisolated against a real API server: the policies it reads are the ones kube-apiserver stored
// (and defaulted). Names are unique per run, so -count=3 passes.
func TestUnisolatedReadsEachWatchedNamespacesPolicies(t *testing.T) {
	c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := fmt.Sprintf("i%d", time.Now().UnixNano()%1000000)
	home, isolated, bare, ingressOnly, elsewhere := run+"-home", run+"-isolated", run+"-bare", run+"-ingress-only", run+"-elsewhere"
	for _, n := range []string{home, isolated, bare, ingressOnly, elsewhere} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(ns, name string, sel metav1.LabelSelector, types ...networkingv1.PolicyType) {
		t.Helper()
		p := policy(sel, types...)
		p.Namespace, p.Name = ns, name
		if err := c.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	create(isolated, "nogoo9-workspace-ingress", workspacePods, ingress)
	create(isolated, "nogoo9-workspace-egress", workspacePods, egress)
	create(ingressOnly, "nogoo9-workspace-ingress", workspacePods, ingress)
	create(ingressOnly, "database", otherPods, ingress, egress)
	// A namespace nogoo9 does not watch is not looked at, isolated or not; neither is nogoo9's
	// own, whose policies ship with the install (config/network).
	got, err := Unisolated(ctx, c, []string{home, isolated, bare, ingressOnly}, home)
	if err != nil {
		t.Fatal(err)
	}
	want := []Unisolation{{Namespace: bare, Missing: []networkingv1.PolicyType{ingress, egress}}, {Namespace: ingressOnly, Missing: []networkingv1.PolicyType{egress}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Unisolated = %+v, want %+v", got, want)
	}
	if got, err := Unisolated(ctx, c, []string{home}, home); err != nil || got != nil {
		t.Errorf("Unisolated over nogoo9's namespace alone = %+v (%v), want nothing", got, err)
	}
}
