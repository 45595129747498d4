package frontend

import (
	"encoding/binary"
	"slices"
)

// AppendEscaped appends s, which is JSON encoding/json wrote (valid UTF-8), as the inside of a
// JSON string (quotes, backslashes and control characters escaped): the text copy of an MCP
// answer's structured content. Escaping is byte by byte, so the escape of two pieces is the
// escape of the whole: WriteEscapedJSON escapes a list piece by piece.
//
// Eight bytes at a time are looked at as one word and stored as they are when none needs an
// escape; the others byte by byte without a branch on the quotes (JSON has one every few
// bytes, too often to predict): each byte is stored after a backslash that it overwrites unless
// it needed it. Only control characters (rare: encoding/json escapes them already) take a branch.
// BenchmarkEscapedText (pkg/mcp) measures it.
func AppendEscaped[T string | []byte](dst []byte, s T) []byte {
	n := len(dst)
	out := slices.Grow(dst, len(s)+len(s)/4+chunkRoom)
	out = out[:cap(out)]
	for i := 0; i < len(s); {
		if len(out)-n < chunkRoom { // grown for the rest of s, a quarter escaped
			rest := len(s) - i
			out = slices.Grow(out[:n], rest+rest/4+chunkRoom)
			out = out[:cap(out)]
		}
		if i+8 <= len(s) {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			if hasZeroByte(x^quotes)|hasZeroByte(x^backslashes)|(x-spaces)&^x&highBits == 0 {
				binary.LittleEndian.PutUint64(out[n:], x)
				n, i = n+8, i+8
				continue
			}
		}
		for end := min(i+8, len(s)); i < end; i++ {
			c := s[i]
			k := escapeClass[c]
			if k == escapeControl {
				out[n], out[n+1], out[n+2], out[n+3], out[n+4], out[n+5] = '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf]
				n += 6
				continue
			}
			out[n] = '\\'
			out[n+int(k)] = c
			n += 1 + int(k)
		}
	}
	return out[:n]
}

// chunkRoom is the most eight bytes take escaped (as \u00XX each), and room for the store of a
// backslash after them.
const chunkRoom = 8*6 + 1

const hexDigits = "0123456789abcdef"

// escapeClass is, for each byte, how a JSON string holds it: as it is (0), after a backslash
// (1: a quote or a backslash), or as \u00XX (escapeControl).
const escapeControl = 2

var escapeClass = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = escapeControl
	}
	t['"'], t['\\'] = 1, 1
	return t
}()

// The words hasZeroByte compares eight bytes at once with.
const (
	lowBits     = 0x0101010101010101
	highBits    = 0x8080808080808080
	quotes      = '"' * lowBits
	backslashes = '\\' * lowBits
	spaces      = ' ' * lowBits // x - spaces & ^x & highBits: a byte of x below ' '
)

// hasZeroByte is not 0 when one of x's bytes is.
func hasZeroByte(x uint64) uint64 { return (x - lowBits) &^ x & highBits }
