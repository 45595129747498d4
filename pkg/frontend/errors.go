package frontend

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Code classifies an Error; each front end maps it to its own status (HTTP code, MCP tool error).
type Code string

const (
	CodeInvalid       Code = "Invalid"       // 400
	CodeForbidden     Code = "Forbidden"     // 403
	CodeNotFound      Code = "NotFound"      // 404
	CodeConflict      Code = "Conflict"      // 409
	CodeQuotaExceeded Code = "QuotaExceeded" // 429
	// CodeTooManyRequests: a per-user limit on concurrent requests (event follows) is reached.
	CodeTooManyRequests Code = "TooManyRequests" // 429
	CodeInternal        Code = "Internal"        // 500
	// CodeUnavailable: the Kubernetes API server (or its etcd) could not be reached or did not
	// answer in time; the request may be retried (503 with Retry-After).
	CodeUnavailable Code = "Unavailable" // 503
)

var httpStatus = map[Code]int{
	CodeInvalid:         http.StatusBadRequest,
	CodeForbidden:       http.StatusForbidden,
	CodeNotFound:        http.StatusNotFound,
	CodeConflict:        http.StatusConflict,
	CodeQuotaExceeded:   http.StatusTooManyRequests,
	CodeTooManyRequests: http.StatusTooManyRequests,
	CodeInternal:        http.StatusInternalServerError,
	CodeUnavailable:     http.StatusServiceUnavailable,
}

// HTTPStatus is the HTTP status the REST API and the web UI answer an error of code c with (500
// for a code this list does not know).
func (c Code) HTTPStatus() int {
	if s, ok := httpStatus[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is a failure with a message meant for the caller: what happened and what to do.
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns err's Code: CodeUnavailable for an internal failure caused by an unreachable
// or overloaded API server, else the *Error's Code (CodeInternal for an error that is not one).
func CodeOf(err error) Code {
	code := CodeInternal
	var e *Error
	if errors.As(err, &e) {
		code = e.Code
	}
	if code == CodeInternal && apiServerUnavailable(err) {
		return CodeUnavailable
	}
	return code
}

// Messages of the authorization rules, stable for clients and tests.
const (
	MsgAccessDenied       = "Access Denied"
	MsgUpgradeAllForAdmin = "Forbidden: Only admin users can upgrade all workspaces"
)

func accessDenied(id string) *Error {
	return errorf(CodeForbidden, "%s: workspace %q belongs to another user; you can act only on your own workspaces", MsgAccessDenied, id)
}

func notFound(id string) *Error {
	return errorf(CodeNotFound, "workspace %q not found: list_workspaces (GET /api/v1/workspaces) shows yours", id)
}

// refusedAsInvalid is the error of a write (what: "maintenance", "rollback", ...) of workspace id
// that the API server refused as invalid (422): the caller's input, never fixed by a retry, so it
// is CodeInvalid with the API server's reason (cut: it may quote what was sent), not "try again".
func refusedAsInvalid(what, id string, err error) *Error {
	reason := err.Error()
	if len(reason) > maxRefusalReason {
		reason = strings.ToValidUTF8(reason[:maxRefusalReason], "") + "..."
	}
	return &Error{Code: CodeInvalid, Err: err, Message: fmt.Sprintf(
		"the Kubernetes API server refused the %s of workspace %q as invalid, so nothing was written (%s): change what you sent, e.g. a shorter value", what, id, reason)}
}

// maxRefusalReason bounds the API server's reason quoted in refusedAsInvalid, in bytes.
const maxRefusalReason = 300
