package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// BenchmarkPolicyTick is one update-policy tick over 100 up-to-date workspaces of the node-persistent
// sample template (nothing is due, nothing written), with the registry's copies (Registry) and
// with its own values (Shared, as main.go wires it): the difference is the template's copy per
// workspace per tick. It asserts nothing but that the tick succeeds and requests nothing.
//
//	go test -run '^$' -bench PolicyTick -benchmem ./controllers/
func BenchmarkPolicyTick(b *testing.B) {
	loaded, err := templates.LoadDir("../config/samples")
	if err != nil {
		b.Fatal(err)
	}
	var tmpl *templates.Template
	for _, l := range loaded {
		if l.Name == "node-persistent" && l.Err == nil {
			tmpl = l.Template
		}
	}
	if tmpl == nil {
		b.Fatal("no valid node-persistent sample template")
	}
	var store compactStore
	for i := range 100 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ws-%d", i), Namespace: "ns", UID: "u",
			Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: fmt.Sprintf("w%d", i),
				workspace.LabelTemplate: tmpl.Name, workspace.LabelTemplateVersion: workspace.VersionLabel(tmpl.Version)},
			Annotations: map[string]string{workspace.AnnOwner: "jane", workspace.AnnTemplateVersion: tmpl.Version}}}
		o, err := podcache.Transform(pod)
		if err != nil {
			b.Fatal(err)
		}
		store = append(store, podcache.Of(o))
	}
	reg := templates.NewStatic(tmpl)
	for _, tc := range []struct {
		name string
		src  TemplateSource
	}{{"Registry", reg}, {"Shared", reg.Shared()}} {
		b.Run(tc.name, func(b *testing.B) {
			now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
			p := &PolicyRunner{Reader: store, Templates: tc.src, Recorder: record.NewFakeRecorder(1),
				Opts: PolicyOptions{Now: func() time.Time { return now }}}
			for b.Loop() {
				if n, err := p.Tick(context.Background()); err != nil || n != 0 {
					b.Fatalf("tick: %d requested, %v", n, err)
				}
			}
		})
	}
}
