package api

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/frontend"
)

// A body is one JSON object and nothing after it, its fields spelled exactly as documented and
// each given once (no key twice in any object inside it either); every refusal is Invalid, names
// what is wrong, and is short however long the body.
func TestDecodeReadsExactlyOneObjectWithExactFields(t *testing.T) {
	huge := strings.Repeat("k", 500_000)
	for _, tc := range []struct {
		name, body string
		want       string // substring of the error; "" must decode
	}{
		{"the fields as documented", `{"template":"python","id":"demo","context":{"repo":"r","Repo":"R"},"name":"Demo"}`, ""},
		{"blanks after the object", "{\"template\":\"python\"}\n\t ", ""},
		{"a number too large for a float is a wrong type, no more", `{"template":"python","context":1e400}`, `request body field "context" is a number: give an object of string values`},
		{"a stray brace after the object", `{"template":"a"}}`, "data after the JSON object"},
		{"a stray bracket after the object", `{"template":"a"}]`, "data after the JSON object"},
		{"a second object", `{"template":"a"} {"template":"b"}`, "data after the JSON object"},
		{"a number after the object", `{"template":"a"}1`, "data after the JSON object"},
		{"a field in upper case", `{"TEMPLATE":"a"}`, `request body field "TEMPLATE" is not known: field names are case-sensitive, use "template"`},
		{"case variants of one field", `{"TEMPLATE":"a","template":"b","Template":"c"}`, `"TEMPLATE"`},
		{"a field given twice", `{"template":"a","template":"b"}`, `request body gives field "template" twice`},
		{"a context key given twice", `{"template":"a","context":{"repo":"a","repo":"b"}}`, `request body gives key "repo" twice in "context"`},
		{"an unknown field", `{"template":"a","spec":{}}`, `request body field "spec" is not known: this endpoint takes template, name, id, context, namespace`},
		{"a 500 KB unknown field", `{"` + huge + `":1}`, `request body field "kkkk`},
		{"null", `null`, "not a JSON object"},
		{"an array", `[{"template":"a"}]`, "not a JSON object"},
		{"a string", `"template"`, "not a JSON object"},
		{"empty", ``, "request body is empty"},
		// A wrong type is named by the JSON field and the type to give, never by Go's names
		// ("cannot unmarshal number into Go struct field SpawnInput.template of type string").
		{"a number for a string", `{"template":1}`, `request body field "template" is a number: give a string`},
		{"a boolean for a string", `{"template":"python","name":true}`, `request body field "name" is a boolean: give a string`},
		{"an array for a string", `{"template":["python"]}`, `request body field "template" is an array: give a string`},
		{"an object for a string", `{"template":{"name":"python"}}`, `request body field "template" is an object: give a string`},
		{"a string for an object", `{"template":"python","context":"repo=r"}`, `request body field "context" is a string: give an object of string values`},
		{"a number inside the context", `{"template":"python","context":{"repo":1}}`, `request body field "context" has a number among its values: give each as a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in frontend.SpawnInput
			err := decode(httptest.NewRecorder(), httptest.NewRequest("POST", "/api/v1/workspaces", strings.NewReader(tc.body)), &in)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("decode(%.80s) = %v, want it read", tc.body, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("decode(%.80s) read %+v, want an error with %q", tc.body, in, tc.want)
			}
			if frontend.CodeOf(err) != frontend.CodeInvalid || !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 400 {
				t.Fatalf("decode(%.80s) = %v (%d bytes), want a short Invalid error with %q", tc.body, err, len(err.Error()), tc.want)
			}
		})
	}
	// Every endpoint's body is read so: the maintenance reason too.
	var m maintenanceBody
	if err := decode(httptest.NewRecorder(), httptest.NewRequest("PUT", "/", strings.NewReader(`{"Reason":"disk full"}`)), &m); err == nil || !strings.Contains(err.Error(), `use "reason"`) {
		t.Fatalf(`{"Reason":...} = %v, %+v: want refused, naming "reason"`, err, m)
	}
}
