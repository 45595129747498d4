package health

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// DefaultAPIServerTimeout bounds one check, so /readyz answers quickly even when the API server
// accepts connections but does not answer (stopped, or waiting for etcd).
const DefaultAPIServerTimeout = 2 * time.Second

// APIServer returns a check that fails while the Kubernetes API server cannot be reached or is not
// ready itself (its /readyz includes etcd): nogoo9 then cannot spawn, upgrade or review tokens,
// and a load balancer should send callers to a replica that can. The proxy and cached reads keep
// working meanwhile; the process stays up (/healthz is unaffected).
func APIServer(cfg *rest.Config, timeout time.Duration) (healthz.Checker, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = timeout
	// The check is not throttled by the client's rate limiter: it must answer even when the
	// controllers use up the budget.
	c.QPS, c.Burst, c.RateLimiter = -1, 0, nil
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("readiness check of the API server: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("readiness check of the API server: %w", err)
	}
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), timeout)
		defer cancel()
		var code int
		if err := dc.RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error(); err != nil {
			return fmt.Errorf("the Kubernetes API server is not reachable or not ready (%d): %w", code, err)
		}
		return nil
	}, nil
}
