package podcachetest

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store is a client.Reader over fixed pods, as an informer's store would show them: Get by key,
// List of a PodList by namespace and label selector (other options are refused). Every answer is
// a copy.
type Store []*corev1.Pod

func (s Store) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, p := range s {
		if p.Namespace == key.Namespace && p.Name == key.Name {
			p.DeepCopyInto(obj.(*corev1.Pod))
			return nil
		}
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (s Store) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	pods, ok := list.(*corev1.PodList)
	if !ok {
		return fmt.Errorf("podcachetest.Store lists pods only, not %T", list)
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	if o.FieldSelector != nil || o.Limit != 0 || o.Continue != "" {
		return fmt.Errorf("podcachetest.Store lists by namespace and labels only")
	}
	sel := o.LabelSelector
	if sel == nil {
		sel = labels.Everything()
	}
	pods.Items = nil
	for _, p := range s {
		if (o.Namespace == "" || p.Namespace == o.Namespace) && sel.Matches(labels.Set(p.Labels)) {
			pods.Items = append(pods.Items, *p.DeepCopy())
		}
	}
	return nil
}

// AwaitWaiting returns once w has a caller waiting (podcache.Seen), or after 5 s: the caller's
// wait then ends at its bound and its test fails.
func AwaitWaiting(w interface{ Waiting() int }) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && w.Waiting() == 0; time.Sleep(time.Millisecond) {
	}
}
