package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A verifier that cannot be reached says nothing about the token: 503 with Retry-After, so a
// client retries rather than asking its user for a new token.
func TestUnreachableVerifierAnswers503(t *testing.T) {
	for name, tc := range map[string]struct {
		err    error
		status int
	}{
		"a transient failure":   {&Error{Reason: "token could not be reviewed by the Kubernetes API server; try again", Err: errors.New("connection refused"), Transient: true}, http.StatusServiceUnavailable},
		"a rejected token":      {&Error{Reason: "token rejected"}, http.StatusUnauthorized},
		"a plain error":         {errors.New("x"), http.StatusUnauthorized},
		"too many failed tries": {&Error{Reason: "slow down", RetryAfter: 1}, http.StatusTooManyRequests},
	} {
		t.Run(name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/api/v1/whoami", nil)
			r.Header.Set("Authorization", "Bearer t")
			Unauthorized(w, r, tc.err, "")
			if w.Code != tc.status {
				t.Fatalf("status = %d, want %d", w.Code, tc.status)
			}
			if tc.status == http.StatusServiceUnavailable && (w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "try again")) {
				t.Fatalf("503 without Retry-After or advice: %v %s", w.Header(), w.Body)
			}
			// A login page answers the same failure with the same status, for a person.
			lw := httptest.NewRecorder()
			status, msg := LoginRefused(lw, tc.err)
			if status != tc.status || (lw.Header().Get("Retry-After") != "") != (tc.status != http.StatusUnauthorized) || !strings.Contains(msg, "try again") {
				t.Fatalf("LoginRefused = %d %q (Retry-After %q), want %d, Retry-After only with 429/503, and advice", status, msg, lw.Header().Get("Retry-After"), tc.status)
			}
		})
	}
}
