package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// List and WaitForSync make sharedTemplates a HistoryTemplates (the recorder's record reads
// neither).
func (s *sharedTemplates) List() []templates.Info           { return nil }
func (s *sharedTemplates) WaitForSync(context.Context) bool { return true }

// TestPolicyRunnerAndHistoryRecorderOnlyReadTheirTemplates proves what lets main.go give the
// update-policy runner and the template-history recorder the registry's own templates
// (templates.Shared) instead of a copy per read: a tick that requests upgrades (it reads the
// template's policy annotations and version) and the recorder keeping the served version (a
// ConfigMap of its spec, claims and annotations, created on a real API server, which answers
// into the object it was given) leave the template as it was. The last step writes into a
// handed-out template on purpose, so the check can fail.
func TestPolicyRunnerAndHistoryRecorderOnlyReadTheirTemplates(t *testing.T) {
	_, c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	for i := range 2 {
		createIdleIDEPod(t, c, fmt.Sprintf("ws-ro%d", i), fmt.Sprintf("ro%d", i), false, now)
	}
	src := &sharedTemplates{}
	tmpl := ideTemplate("2", "example.com/ide:2", corev1.ReadWriteOnce)
	tmpl.Description = "the IDE"
	tmpl.Annotations = map[string]string{workspace.AnnUpdatePolicy: "when-idle", workspace.AnnDescription: "the IDE"}
	src.serve(tmpl)

	p := &PolicyRunner{Client: c, Reader: c, Templates: src, Recorder: record.NewFakeRecorder(100),
		Opts: PolicyOptions{PerInterval: 10, IdleAfter: time.Minute, Now: func() time.Time { return now }}}
	n, err := p.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("the tick requested %d upgrades, want 2 (both workspaces are idle and outdated): the test reads too little of the template to prove anything", n)
	}

	h := &HistoryRecorder{Client: c, APIReader: c, Templates: src, Namespace: "default", Keep: 2}
	if err := h.record(ctx, "ide"); err != nil {
		t.Fatal(err)
	}
	var kept corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: templates.HistoryName("ide", "2")}, &kept); err != nil {
		t.Fatalf("the recorder kept no ConfigMap of version 2: %v", err)
	}

	src.mu.Lock()
	gets := src.gets
	src.mu.Unlock()
	if gets < 3 {
		t.Fatalf("the template was read %d times, want at least 3 (two workspaces and the recorder)", gets)
	}
	if d := src.changed(); len(d) > 0 {
		t.Errorf("the runner or the recorder wrote into the shared template:\n%v", d)
	}

	// The check sees a write.
	got, _ := src.Get("ide")
	got.Annotations["example.com/written"] = "yes"
	if len(src.changed()) == 0 {
		t.Fatal("a write into a handed-out template went unnoticed: the check above proves nothing")
	}
}
