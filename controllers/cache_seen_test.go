package controllers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/podcache/podcachetest"
)

// TestTheCheckAfterACreateWaitsForTheCache: the cache shows the old pod live until it shows the
// new pod, and then the old pod being deleted (the owner's delete, committed before the create,
// arrives in the same event stream). The check must wait for the new pod before it looks, and
// must not ask the API server.
func TestTheCheckAfterACreateWaitsForTheCache(t *testing.T) {
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ws", UID: "u-old"}}
	up := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ws-up-1", UID: "u-up"}}
	deleting := old.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	seen := podcache.NewSeen()
	var cache atomic.Pointer[podcachetest.Store]
	cache.Store(&podcachetest.Store{old})
	go func() {
		podcachetest.AwaitWaiting(seen)
		cache.Store(&podcachetest.Store{deleting, up}) // the store first, then the handlers
		seen.OnAdd(up, false)
	}()
	r := &WorkspaceReconciler{Reader: readerFunc(func(ctx context.Context, key client.ObjectKey, obj client.Object) error {
		return cache.Load().Get(ctx, key, obj)
	}), APIReader: readerFunc(func(context.Context, client.ObjectKey, client.Object) error {
		t.Error("the check read the API server")
		return apierrors.NewServiceUnavailable("not here")
	}), seen: seen}
	gone, err := r.deletedBeforeCreate(context.Background(), up, old)
	if err != nil || !gone {
		t.Fatalf("deletedBeforeCreate = %v, %v; want true: the owner's delete came before the create", gone, err)
	}
}

// readerFunc is a client.Reader whose Get is f (List is not used here).
type readerFunc func(ctx context.Context, key client.ObjectKey, obj client.Object) error

func (f readerFunc) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return f(ctx, key, obj)
}

func (readerFunc) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}
