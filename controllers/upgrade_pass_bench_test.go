package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// compactStore is a client.Reader over compact cached pods (podcache.Transform) that answers a
// List as podcache.Cache does: each item materialised, its maps and slices deep copied unless
// the caller asks for client.UnsafeDisableDeepCopy. Nodes exist; nothing else does.
type compactStore []*podcache.Pod

func (s compactStore) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok && key.Namespace == "" {
		return nil // a node
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (s compactStore) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	out := list.(*corev1.PodList)
	out.Items = make([]corev1.Pod, len(s))
	for i, p := range s {
		if o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy {
			p = p.DeepCopy()
		}
		p.MaterializeInto(&out.Items[i])
	}
	return nil
}

// BenchmarkUpgradePass is one upgrade-controller pass over a workspace upgrading side by side
// whose new pod is not Ready yet: the pass that only keeps the gate's counts (four of a
// side-by-side upgrade's six), with the template source main.go gives the controller. It asserts
// nothing but that the pass succeeds and records no Event.
//
//	go test -run '^$' -bench UpgradePass -benchmem ./controllers/
func BenchmarkUpgradePass(b *testing.B) {
	var pods []*corev1.Pod
	for _, w := range podcachetest.Workspaces() {
		if w.Name == "upgrading side by side" {
			pods = w.Pods
		}
	}
	if len(pods) != 2 {
		b.Fatalf("fixture has %d pods, want 2", len(pods))
	}
	// The fixture's new pod as nogoo9 names it (workspace.NextPodName), else the planner distrusts it.
	pods[1].Name = workspace.NextPodName(pods[0], "2")
	pods[0].Annotations[workspace.AnnUpgradePod] = pods[1].Name
	var store compactStore
	for _, p := range pods {
		o, err := podcache.Transform(p.DeepCopy())
		if err != nil {
			b.Fatal(err)
		}
		store = append(store, podcache.Of(o))
	}
	tmpl, err := templates.Decode("python", "configmap:ns/python", map[string]string{workspace.AnnTemplateVersion: "2"},
		map[string]string{"spec": `{"containers":[{"name":"ide","image":"registry.local/ide:v2","ports":[{"containerPort":8080}]}],"terminationGracePeriodSeconds":0}`})
	if err != nil {
		b.Fatal(err)
	}
	now := podcachetest.T0.Add(2 * time.Minute)
	r := &WorkspaceReconciler{Reader: store, APIReader: store, Templates: templates.NewStatic(tmpl).Shared(), Recorder: record.NewFakeRecorder(100),
		Opts: UpgradeOptions{Now: func() time.Time { return now }}}
	r.Opts.defaults()
	r.gate = newGate(0, 0, store, nil)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pods[0].Namespace, Name: pods[0].Labels[workspace.LabelWorkspaceID]}}
	for b.Loop() {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if len(r.Recorder.(*record.FakeRecorder).Events) != 0 {
		b.Fatal(fmt.Sprint("the pass recorded an Event: ", <-r.Recorder.(*record.FakeRecorder).Events))
	}
}
