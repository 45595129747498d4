package frontend

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// escapeOneByOne is AppendEscaped's meaning, byte by byte: the reference its word-at-a-time
// form is checked against.
func escapeOneByOne(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// TestAppendEscapedEveryByteAtEveryOffset puts each of the 256 byte values at each offset of
// two words, and two of them side by side, among plain bytes: the word test must find every
// byte that needs an escape wherever it sits, and pass every other.
func TestAppendEscapedEveryByteAtEveryOffset(t *testing.T) {
	for c := range 256 {
		for at := range 17 {
			for _, width := range []int{1, 2} {
				b := []byte(strings.Repeat("a", 19))
				for k := range width {
					b[at+k] = byte(c)
				}
				s := string(b)
				if got, want := AppendEscaped([]byte("x"), s), escapeOneByOne([]byte("x"), s); !bytes.Equal(got, want) {
					t.Fatalf("byte %#x at %d (%d of them): got %q, want %q", c, at, width, got, want)
				}
			}
		}
	}
}

// FuzzAppendEscaped: AppendEscaped is the reference escape of any bytes after whatever dst
// held, and of valid UTF-8 a JSON string's inside that reads back as the bytes.
func FuzzAppendEscaped(f *testing.F) {
	for _, s := range []string{"", `{"id":"a","owner":"b\\c"}`, "tab\there\nnew\x00nul", "é ✓ \u2028 \U0001F600", strings.Repeat(`\"`, 40), strings.Repeat("\x1f", 20), "\xff\xfe"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, head int) {
		dst := bytes.Repeat([]byte("h"), head&63)
		got := AppendEscaped(dst[:len(dst):len(dst)], s)
		if want := escapeOneByOne(bytes.Clone(dst), s); !bytes.Equal(got, want) {
			t.Fatalf("AppendEscaped(%q) = %q, want %q", s, got, want)
		}
		if !utf8.ValidString(s) {
			return // the reference above is the whole check: JSON strings hold UTF-8
		}
		var back string
		if err := json.Unmarshal([]byte(`"`+string(got[len(dst):])+`"`), &back); err != nil || back != s {
			t.Fatalf("escaped %q reads back as %q (%v)", s, back, err)
		}
	})
}
