package templates

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestHistoryConfigMapRoundTrip(t *testing.T) {
	tmpl := restrictedTemplate(t, workspace.AnnTemplateVersion, "7", workspace.AnnUpdatePolicy, "when-idle")
	cm, err := HistoryConfigMap("ns", tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels[workspace.LabelPodTemplate] != "" || cm.Labels[workspace.LabelTemplateHistory] != "node" || cm.Name != HistoryName("node", "7") {
		t.Fatalf("history ConfigMap %s has labels %v: want only %s=node, never a template label", cm.Name, cm.Labels, workspace.LabelTemplateHistory)
	}
	got, err := FromHistory(cm, DefaultPolicy())
	if err != nil {
		t.Fatalf("FromHistory: %v", err)
	}
	if got.Version != "7" || got.Spec.Containers[0].Image != "ide:1" || got.Annotations[workspace.AnnUpdatePolicy] != "when-idle" {
		t.Errorf("FromHistory gave version %q image %q annotations %v, want what was recorded", got.Version, got.Spec.Containers[0].Image, got.Annotations)
	}
}

func TestFromHistoryRefusesWhatNogoo9DidNotWrite(t *testing.T) {
	good := func(t *testing.T) *corev1.ConfigMap {
		cm, err := HistoryConfigMap("ns", restrictedTemplate(t, workspace.AnnTemplateVersion, "3"))
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	for _, tc := range []struct {
		name   string
		mutate func(cm *corev1.ConfigMap)
		want   string
	}{
		{name: "a version relabelled to another template is refused by name", mutate: func(cm *corev1.ConfigMap) { cm.Labels[workspace.LabelTemplateHistory] = "python" }, want: "is not a template history entry"},
		{name: "a version re-annotated to another version is refused by name", mutate: func(cm *corev1.ConfigMap) { cm.Annotations[workspace.AnnTemplateVersion] = "4" }, want: "is not a template history entry"},
		{name: "a forged version that asks for a privileged container meets the template policy", mutate: func(cm *corev1.ConfigMap) {
			tmpl := restrictedTemplate(t, workspace.AnnTemplateVersion, "3")
			tmpl.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
			bad, _ := HistoryConfigMap("ns", tmpl)
			cm.Data = bad.Data
		}, want: "violates the template policy"},
		{name: "a version with an unknown data key does not decode", mutate: func(cm *corev1.ConfigMap) { cm.Data["script"] = "x" }, want: "does not decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := good(t)
			tc.mutate(cm)
			if _, err := FromHistory(cm, DefaultPolicy()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromHistory error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cms := func(versions ...string) []corev1.ConfigMap {
		var out []corev1.ConfigMap
		for i, v := range versions {
			cm := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: HistoryName("node", v), CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute)),
				Annotations: map[string]string{workspace.AnnTemplateVersion: v}}}
			out = append(out, cm)
		}
		return out
	}
	// forged is a ConfigMap someone labelled as a kept version, newer than every genuine one.
	forged := func(name, v string) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Hour)),
			Labels: map[string]string{workspace.LabelTemplateHistory: "node"}, Annotations: map[string]string{workspace.AnnTemplateVersion: v}}}
	}
	versions := func(list []*corev1.ConfigMap) string {
		var s []string
		for _, cm := range list {
			s = append(s, cm.Annotations[workspace.AnnTemplateVersion])
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name     string
		have     []corev1.ConfigMap
		keep     int
		current  string
		wantGone string
	}{
		{name: "under the limit nothing goes", have: cms("1", "2", "3"), keep: 3, current: "3"},
		{name: "over the limit the oldest go", have: cms("1", "2", "3", "4", "5"), keep: 3, current: "5", wantGone: "2,1"},
		{name: "the current version stays even when it is the oldest (a template set back)", have: cms("1", "2", "3", "4"), keep: 2, current: "1", wantGone: "3,2"},
		{name: "keep 1 keeps only the current version", have: cms("1", "2"), keep: 1, current: "2", wantGone: "1"},
		// Before, ConfigMaps labelled as history by anyone counted: three newer ones pushed the
		// genuine versions 2 and 1, the rollback targets, out.
		{name: "ConfigMaps nogoo9 did not make neither take a kept place nor go", have: append(cms("1", "2", "3"), forged("junk-a", "x"), forged("junk-b", "y"), forged("junk-c", "3")),
			keep: 3, current: "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versions(Prune(tc.have, "node", tc.keep, tc.current)); got != tc.wantGone {
				t.Errorf("Prune deletes %q, want %q", got, tc.wantGone)
			}
		})
	}
}

// A version that is not kept is named in the error by at most its first 80 bytes (workspace.Quote):
// a caller's 500 KB version never comes back whole in the answer or the log line.
func TestVersionNotKeptQuotesOnlyTheStartOfAnOversizedVersion(t *testing.T) {
	huge := strings.Repeat("v", 500_000)
	h := &History{Namespace: "nogoo9-system", Reader: fake.NewClientBuilder().Build()}
	_, err := h.Version(context.Background(), "python", huge)
	if !errors.As(err, new(*ErrVersionNotKept)) {
		t.Fatalf("Version of a 500 KB version = %v, want ErrVersionNotKept (and no read)", err)
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "(500000 bytes)") || !strings.Contains(msg, "list_templates") {
		t.Errorf("error (%d bytes) = %.300s, want the version cut, its length, and where the kept versions are listed", len(msg), msg)
	}
}
