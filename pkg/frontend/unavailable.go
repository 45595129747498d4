package frontend

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// MsgUnavailable is what a caller reads for CodeUnavailable: what happened and what to do. Each
// front end adds how to check whether the request took effect.
const MsgUnavailable = "the Kubernetes API server cannot be reached or did not answer in time, so nogoo9 could not complete this request; try again in a few seconds"

// apiServerUnavailable reports whether err means the API server (or its etcd) could not serve the
// request: refused or reset connections, timeouts, and the API server's own 429, 500, 503 and 504
// answers. Such a failure says nothing about the request, so it is a 503, never a 500.
func apiServerUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) {
		return true
	}
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.As(err, &oe):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	}
	return false
}
