package frontend

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestContinueRoundTripsAndRefusesWhatItDidNotWrite(t *testing.T) {
	for _, all := range []bool{false, true} {
		for _, id := range []string{"a", "ws-1", "my-long-workspace-name-0123456789"} {
			got, err := decodeContinue(encodeContinue(all, id), all)
			if err != nil || got != id {
				t.Errorf("decodeContinue(encodeContinue(%t, %q)) = %q, %v", all, id, got, err)
			}
		}
	}
	for _, all := range []bool{false, true} {
		got, err := decodePosition(encodeContinueAcross(all, "team-a", "ws-1"), all, true)
		if err != nil || got != (position{ns: "team-a", id: "ws-1"}) {
			t.Errorf("decodePosition(encodeContinueAcross(%t, team-a, ws-1)) = %+v, %v", all, got, err)
		}
	}
	long := encodeContinue(false, "a") + strings.Repeat("x", 500)
	tests := []struct {
		name     string
		token    string
		allUsers bool
		wantIn   []string
	}{
		{"a bare workspace id (what continue was before it became opaque)", "ws-1", false, []string{`continue "ws-1"`, "does not start with w1.", "pass the continue value of the previous answer unchanged"}},
		{"the prefix with no base64url after it", "w1.!!!", false, []string{"not base64url"}},
		{"base64url of something that names no list", "w1." + b64("mine/ws-1"), false, []string{"names no list"}},
		{"base64url of a list but no id", "w1." + b64("own/"), false, []string{"holds no workspace id"}},
		{"an id no workspace can have", "w1." + b64("own/Not An ID"), false, []string{"holds no workspace id"}},
		{"a token of every user's list passed to the own list", encodeContinue(true, "ws-1"), false, []string{"allUsers=true", "pass the same allUsers"}},
		{"a token of the own list passed to every user's list", encodeContinue(false, "ws-1"), true, []string{"allUsers=false", "pass the same allUsers"}},
		{"a long value is quoted only in part", long, false, []string{"...", "pass the continue value of the previous answer unchanged"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeContinue(tc.token, tc.allUsers)
			if CodeOf(err) != CodeInvalid {
				t.Fatalf("decodeContinue(%q) error %v, want code %s", tc.token, err, CodeInvalid)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if len(err.Error()) > 400 {
				t.Errorf("error is %d bytes long: a bad value must not be echoed whole", len(err.Error()))
			}
		})
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
