package api_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// laggingCache is the manager's cache before it has seen one pod: the lag a front end replica
// has for a moment after another writer creates a pod.
type laggingCache struct {
	client.Reader
	hide string
}

func (c laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	if pl, ok := list.(*corev1.PodList); ok {
		kept := pl.Items[:0]
		for _, p := range pl.Items {
			if p.Name != c.hide {
				kept = append(kept, p)
			}
		}
		pl.Items = kept
	}
	return nil
}

// A start lifts the stop from every live pod of the workspace, also from one its cache does not
// show yet (the stopped copy of a pod that a start on the latest version made, stopped a moment
// ago): while any live pod carries the intent the workspace stays stopped. Before stop 48 the
// start wrote only the pods its cache showed, and the workspace stayed stopped.
func TestAStartLiftsTheStopFromAPodTheCacheDoesNotShowYet(t *testing.T) {
	skipShort(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(auth.WithCaller(context.Background(), &auth.Caller{Subject: "sam"}), 30*time.Second)
	defer cancel()
	stopped := func(name string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: "sam-box",
					workspace.LabelUserSub: workspace.UserLabel("sam"), workspace.LabelTemplate: "python", workspace.LabelTemplateVersion: "1.0"},
				Annotations: map[string]string{workspace.AnnOwner: "sam", workspace.AnnTemplateVersion: "1.0", workspace.AnnStopRequested: "true",
					workspace.AnnStoppedFromUID: "uid-running-" + name}},
			Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: workspace.GateStopped}},
				Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1.0"}}},
		}
		g.Expect(env.k8s.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { _ = env.k8s.Delete(context.Background(), p) })
		return p
	}
	seen := stopped(workspace.PodName("sam", "sam-box"))
	unseen := stopped(workspace.PodName("sam", "sam-box") + "-copy")
	for _, p := range []*corev1.Pod{seen, unseen} {
		g.Eventually(func() error { return env.mgrCache.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}) }).
			WithTimeout(30*time.Second).Should(Succeed(), "the manager's cache has pod %s", p.Name)
	}
	svc, err := frontend.New(frontend.Config{Namespace: ns, Cache: laggingCache{env.mgrCache, unseen.Name}, Client: env.k8s, APIReader: env.k8s, Templates: env.templates})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = svc.Start(ctx, "sam-box")
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []*corev1.Pod{seen, unseen} {
		var now corev1.Pod
		g.Expect(env.k8s.Get(ctx, client.ObjectKeyFromObject(p), &now)).To(Succeed())
		g.Expect(now.Annotations).NotTo(HaveKey(workspace.AnnStopRequested), "pod %s keeps the stop: the workspace stays stopped", p.Name)
	}
}
