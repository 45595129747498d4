package spawner

import (
	"errors"
	"fmt"
)

// Code classifies a refused spawn; the REST and MCP layers map it to a status.
type Code string

const (
	// NotFound: the template does not exist (or has no valid version). HTTP 404.
	NotFound Code = "NotFound"
	// Invalid: the request or the rendered workspace is not acceptable (bad id, missing context,
	// unknown placeholder, refused by the API server). HTTP 400/422.
	Invalid Code = "Invalid"
	// Conflict: the workspace id is taken or being created. HTTP 409.
	Conflict Code = "Conflict"
	// QuotaExceeded: the owner has as many workspaces as allowed. HTTP 429 or 403.
	QuotaExceeded Code = "QuotaExceeded"
	// Forbidden: the caller may not spawn for this owner. HTTP 403.
	Forbidden Code = "Forbidden"
	// Unavailable: nogoo9 cannot tell yet (its templates are still loading); retry. HTTP 503.
	Unavailable Code = "Unavailable"
)

// Error is a refused spawn. Message is one sentence for a person: what happened, what to do.
type Error struct {
	Code    Code
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, spawner.ErrConflict) (and the other sentinels) match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotFound      = &Error{Code: NotFound}
	ErrInvalid       = &Error{Code: Invalid}
	ErrConflict      = &Error{Code: Conflict}
	ErrQuotaExceeded = &Error{Code: QuotaExceeded}
	ErrForbidden     = &Error{Code: Forbidden}
	ErrUnavailable   = &Error{Code: Unavailable}
)

// CodeOf returns the Code of err, or "" when err is no *Error (an internal failure).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func errorf(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}
