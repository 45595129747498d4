package frontend

import (
	"net/http"
	"testing"
)

func TestHTTPStatusOfEveryCode(t *testing.T) {
	for _, tc := range []struct {
		code Code
		want int
	}{
		{CodeInvalid, http.StatusBadRequest},
		{CodeForbidden, http.StatusForbidden},
		{CodeNotFound, http.StatusNotFound},
		{CodeConflict, http.StatusConflict},
		{CodeQuotaExceeded, http.StatusTooManyRequests},
		{CodeTooManyRequests, http.StatusTooManyRequests},
		{CodeInternal, http.StatusInternalServerError},
		{CodeUnavailable, http.StatusServiceUnavailable},
		{Code("SomethingNew"), http.StatusInternalServerError},
	} {
		if got := tc.code.HTTPStatus(); got != tc.want {
			t.Errorf("%s.HTTPStatus() = %d, want %d", tc.code, got, tc.want)
		}
	}
}
