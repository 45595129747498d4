package api

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// FuzzDecodeBody: any request body either decodes into the endpoint's struct or is refused as
// Invalid (400) with a message; never a panic, never another code.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"template":"python","id":"demo"}`,
		`{"template":"python","context":{"repo":"${id}\"}{"}}`,
		`{"template":"python","unknown":1}`,
		`{"template":"python"} {"template":"x"}`,
		``, `null`, `[]`, `"s"`, `{"template":1}`,
		strings.Repeat(`{"a":`, 5000),
		"{\"template\":\"\xff\xfe\"}",
		"{\"template\":\"a\x00b\"}",
		`{"template":"python","context":{"":"","k":null}}`,
		`{"reason":"disk full"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []any{&frontend.SpawnInput{}, &maintenanceBody{}} {
			r := httptest.NewRequest("POST", "/api/v1/workspaces", strings.NewReader(body))
			err := decode(httptest.NewRecorder(), r, v)
			if err == nil {
				continue
			}
			var fe *frontend.Error
			if !errors.As(err, &fe) || fe.Code != frontend.CodeInvalid || fe.Message == "" {
				t.Fatalf("decode(%q) = %v: want an Invalid error with a message", body, err)
			}
		}
	})
}
