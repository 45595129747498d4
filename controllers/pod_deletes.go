package controllers

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podDeletes is a client whose pod deletes go through client-go's typed pods client, in protobuf,
// and leave the answer undecoded; everything else goes to Client. controller-runtime's Delete
// decodes the deleted pod the API server answers with and turns it into an
// unstructured.Unstructured through a JSON encode and decode, which nogoo9 never reads: a third
// of the CPU of the upgrade's delete step (bench/history.md, "Seventh round" and "Eighth
// round"). The request is the same: the same DeleteOptions (preconditions on UID and
// resourceVersion, grace period, propagation), and the same errors (NotFound, Conflict for a
// failed precondition) come back. Like each kind in controller-runtime's client, the deletes have
// a client-side rate budget of their own (--kube-api-qps / --kube-api-burst), apart from the pod
// creates and patches.
type podDeletes struct {
	client.Client
	pods corev1client.PodsGetter
}

// newPodDeletes wraps c with pod deletes through a protobuf client on cfg and httpClient (the
// manager's: one connection pool).
func newPodDeletes(c client.Client, cfg *rest.Config, httpClient *http.Client) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	pods, err := corev1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("pods client: %w", err)
	}
	return &podDeletes{Client: c, pods: pods}, nil
}

// Delete deletes a pod through the typed client; any other object through Client.
func (c *podDeletes) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return c.Client.Delete(ctx, obj, opts...)
	}
	o := &client.DeleteOptions{}
	o.ApplyOptions(opts)
	return c.pods.Pods(pod.Namespace).Delete(ctx, pod.Name, *o.AsDeleteOptions())
}
