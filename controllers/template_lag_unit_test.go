package controllers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/upgrade"
)

// blockingReader is a client.Reader whose Get waits until release is closed or its context ends.
type blockingReader struct {
	client.Reader
	entered chan struct{}
	release chan struct{}
}

func (b *blockingReader) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	close(b.entered)
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The ConfigMap read of one workspace's pass (the API server slow, up to the request's timeout)
// must not hold up the passes of other workspaces, most of which have nothing to read: every pass
// goes through templateBehind. Before the fix the read was made under the lock every pass takes.
func TestTemplateBehindReadsWithoutHoldingOtherPasses(t *testing.T) {
	rd := &blockingReader{entered: make(chan struct{}), release: make(chan struct{})}
	r := &WorkspaceReconciler{APIReader: rd}
	tmpl := &templates.Template{Name: "t", Version: "1", Source: "configmap:ns/t"}
	notNeeded := upgrade.Move{Actions: []upgrade.Action{{Kind: upgrade.Event, Reason: upgrade.ReasonUpgradeNotNeeded}}}
	now := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow := make(chan error, 1)
	go func() {
		_, err := r.templateBehind(ctx, types.NamespacedName{Namespace: "ns", Name: "a"}, notNeeded, tmpl, now)
		slow <- err
	}()
	select {
	case <-rd.entered:
	case <-ctx.Done():
		t.Fatal("the pass with an intent to answer never read the template's ConfigMap")
	}

	other := make(chan bool, 1)
	go func() {
		behind, _ := r.templateBehind(ctx, types.NamespacedName{Namespace: "ns", Name: "b"}, upgrade.Move{}, tmpl, now)
		other <- behind
	}()
	select {
	case behind := <-other:
		if behind {
			t.Error("a pass with no intent to answer was told to wait for the template")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a pass with nothing to read waited 5 s for another workspace's ConfigMap read")
	}
	close(rd.release)
	if err := <-slow; err != nil {
		t.Errorf("the reading pass: %v", err)
	}
}
