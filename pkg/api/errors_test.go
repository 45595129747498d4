package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

func TestWriteErrorStatus(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   frontend.Code
		wantMsg    string
	}{
		{"bad input is 400", &frontend.Error{Code: frontend.CodeInvalid, Message: "bad id"}, 400, frontend.CodeInvalid, "bad id"},
		{"forbidden is 403", &frontend.Error{Code: frontend.CodeForbidden, Message: frontend.MsgUpgradeAllForAdmin}, 403, frontend.CodeForbidden, frontend.MsgUpgradeAllForAdmin},
		{"unknown workspace is 404", &frontend.Error{Code: frontend.CodeNotFound, Message: "not found"}, 404, frontend.CodeNotFound, "not found"},
		{"conflict is 409", &frontend.Error{Code: frontend.CodeConflict, Message: "taken"}, 409, frontend.CodeConflict, "taken"},
		{"quota is 429", &frontend.Error{Code: frontend.CodeQuotaExceeded, Message: "at most 3"}, 429, frontend.CodeQuotaExceeded, "at most 3"},
		{"a wrapped front-end error keeps its status and message", fmt.Errorf("op: %w", &frontend.Error{Code: frontend.CodeConflict, Message: "taken"}), 409, frontend.CodeConflict, "op: taken"},
		{"an internal front-end error is 500 with its message for the caller", &frontend.Error{Code: frontend.CodeInternal, Message: "reading workspaces failed; try again", Err: errors.New("etcd")}, 500, frontend.CodeInternal, "reading workspaces failed; try again"},
		{"any other error is 500 and its text is not shown", errors.New("dial tcp 10.0.0.1:6443: secret detail"), 500, frontend.CodeInternal, "internal error; try again"},
		{"an unknown code is 500", &frontend.Error{Code: "Weird", Message: "x"}, 500, "Weird", "x"},
		{"a refused connection to the API server is 503", fmt.Errorf("create pod: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), 503, CodeUnavailable, msgUnavailable},
		{"an internal front-end error caused by an unreachable API server is 503", &frontend.Error{Code: frontend.CodeInternal, Message: "setting maintenance failed; try again", Err: &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443", Err: syscall.ECONNREFUSED}}, 503, CodeUnavailable, msgUnavailable},
		{"the API server's 503 is 503", apierrors.NewServiceUnavailable("etcd is down"), 503, CodeUnavailable, msgUnavailable},
		{"the API server's timeout is 503", apierrors.NewTimeoutError("etcd request timed out", 1), 503, CodeUnavailable, msgUnavailable},
		{"the API server's internal error (etcd gone) is 503", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), 503, CodeUnavailable, msgUnavailable},
		{"a request that ran out of time is 503", fmt.Errorf("list: %w", context.DeadlineExceeded), 503, CodeUnavailable, msgUnavailable},
		{"a conflict from the API server stays what the front end said", &frontend.Error{Code: frontend.CodeConflict, Message: "taken", Err: apierrors.NewServiceUnavailable("x")}, 409, frontend.CodeConflict, "taken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, httptest.NewRequest(http.MethodGet, "/api/v1/workspaces", nil), tc.err)
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if rec.Code != tc.wantStatus || body.Code != string(tc.wantCode) || body.Error != tc.wantMsg {
				t.Errorf("writeError = %d %+v; want %d, code %s, error %q", rec.Code, body, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}
