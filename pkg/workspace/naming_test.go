package workspace

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct{ name, in, wantErr string }{
		{"empty (the id is shown)", "", ""},
		{"plain text with spaces and accents", "Mein Projekt (Übung 3)", ""},
		{"emoji", "demo 🚀", ""},
		{"exactly the limit", strings.Repeat("a", MaxNameLength), ""},
		{"one byte over the limit", strings.Repeat("a", MaxNameLength+1), "is 201 bytes long: use at most 200"},
		{"a bare CR (ends a line of an event stream)", "x\rretry: 1", `has a control character at byte 1`},
		{"a line feed", "x\ny", "no line breaks or tabs"},
		{"a tab", "a\tb", "control character at byte 1"},
		{"DEL", "a\x7f", "control character"},
		{"a C1 control", "a\u0085b", "control character"},
		{"not UTF-8", "a\xffb", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName(tc.in)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ValidateName(%q) = %v, want nil", tc.in, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ValidateName(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
			}
		})
	}
}
