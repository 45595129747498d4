package mcp

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// TestToolErrorsSayWhenTheAPIServerIsUnavailable: a tool call that failed because the Kubernetes
// API server could not be reached reads as REST's 503 does (what happened, what to do), not as
// the client library's error; every other error keeps its own message.
func TestToolErrorsSayWhenTheAPIServerIsUnavailable(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/x/pods", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a refused connection inside an internal front-end error", &frontend.Error{Code: frontend.CodeInternal, Message: "creating the workspace failed; try again", Err: refused}, msgUnavailable},
		{"the API server's timeout", fmt.Errorf("create pod: %w", apierrors.NewTimeoutError("etcd request timed out", 1)), msgUnavailable},
		{"a quota refusal keeps its message", &frontend.Error{Code: frontend.CodeQuotaExceeded, Message: "quota exceeded: you have 3 workspaces"}, "quota exceeded: you have 3 workspaces"},
		{"a not-found keeps its message", &frontend.Error{Code: frontend.CodeNotFound, Message: `workspace "x" not found`}, `workspace "x" not found`},
		{"an internal error not caused by the API server keeps its message", &frontend.Error{Code: frontend.CodeInternal, Message: "rendering failed", Err: errors.New("bad template")}, "rendering failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := callerError(tc.err).Error(); got != tc.want {
				t.Errorf("callerError: %q, want %q", got, tc.want)
			}
			res := toolError(tc.err)
			if !res.IsError || len(res.Content) != 1 {
				t.Fatalf("toolError: IsError %v, %d content blocks; want an error with one text block", res.IsError, len(res.Content))
			}
			if got := fmt.Sprint(res.Content[0]); !strings.Contains(got, tc.want) {
				t.Errorf("toolError's text %q does not contain %q", got, tc.want)
			}
		})
	}
	if callerError(nil) != nil {
		t.Error("callerError(nil) is not nil")
	}
}
