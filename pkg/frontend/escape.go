package frontend

// AppendEscaped appends s, which is JSON encoding/json wrote (valid UTF-8), as the inside of a
// JSON string (quotes, backslashes and control characters escaped): the text copy of an MCP
// answer's structured content. Escaping is byte by byte, so the escape of two pieces is the
// escape of the whole: WriteEscapedJSON escapes a list piece by piece.
func AppendEscaped[T string | []byte](dst []byte, s T) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !mustEscape[c] {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}

const hexDigits = "0123456789abcdef"

// mustEscape marks the bytes a JSON string cannot hold as they are.
var mustEscape = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()
