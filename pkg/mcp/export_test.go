package mcp

import "bytes"

// EscapedForTest is appendEscaped's output for js.
func EscapedForTest(js []byte) []byte {
	var b bytes.Buffer
	appendEscaped(&b, js)
	return b.Bytes()
}

// AppendEscapedForTest is appendEscaped.
func AppendEscapedForTest(b *bytes.Buffer, js []byte) { appendEscaped(b, js) }
