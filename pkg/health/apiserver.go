package health

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
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
//
// A success is remembered for DefaultAPIServerFresh: a probe within that time of the last success
// answers at once (see Fresh). At start, the probe that turns the replica ready then waits for no
// round trip to an API server still busy with the informers' initial lists (bench/history.md,
// "Fifth round"); an outage shows at the latest that much later.
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
	return Fresh(func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), timeout)
		defer cancel()
		var code int
		if err := dc.RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error(); err != nil {
			return fmt.Errorf("the Kubernetes API server is not reachable or not ready (%d): %w", code, err)
		}
		return nil
	}, DefaultAPIServerFresh, time.Now), nil
}

// DefaultAPIServerFresh is how long APIServer's check remembers a success.
const DefaultAPIServerFresh = time.Second

// Fresh returns check that passes without running when check last passed less than maxAge ago
// (by now); otherwise it runs check. A failure is never remembered: the next probe runs check.
// The success's time is kept whole, so with time.Now the age is measured on the monotonic clock;
// an age below zero (a clock without a monotonic reading stepped back) runs check too.
func Fresh(check healthz.Checker, maxAge time.Duration, now func() time.Time) healthz.Checker {
	var last atomic.Pointer[time.Time] // when the last success's check started; nil: none
	return func(req *http.Request) error {
		if t := last.Load(); t != nil {
			if age := now().Sub(*t); age >= 0 && age < maxAge {
				return nil
			}
		}
		start := now()
		if err := check(req); err != nil {
			return err
		}
		// The success counts from when the check started: the API server was ready then.
		last.Store(&start)
		return nil
	}
}
