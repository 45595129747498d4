package proxy

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The header lines of a head, as the quick parsers (quickParse for requests, parseQuickResponse
// for answers) read them: rest is what follows the first line, each line "name: value" ending in
// CRLF, then the final blank line; every string is cut from the one copy of the head.
//
// fillHeader reads the lines in one pass (each line is found with one IndexByte and checked as
// it is added): an earlier version checked every line in a first pass and added them in a
// second, cutting each with a two-byte search twice, which cost as much as the rest of the
// request's user-space work beside the system calls.

// fillHeader checks the header lines in rest and adds them to h (empty), values without the
// blanks around them, except those of canonical key pick: it returns the value of the last of
// those and how many there were, and adds them to h only with keepPick. A line must be a valid
// name, a colon and a valid value, and no name may be Pragma, Trailer or special (the fields
// http.ReadRequest or http.ReadResponse treat in ways the quick parsers do not), nor, for a
// request (special is requestSpecial), Expect, Upgrade or Transfer-Encoding. ok is false
// when net/http must parse the head; h then holds some of the lines (the caller clears it).
//
// A key's first value is a slice of *vals (capacity 1, so a second value appends to a copy):
// the values of a whole head cost no allocation when *vals is a buffer kept by its owner (the
// client connection's, reused for each of its requests or answers), and one otherwise.
//
// With lazy not nil (a request on the lean loop whose handler is the Proxy), the fields
// lazyField names are checked but not added, and *lazy reports whether there were any: the
// request's handler adds them (quickReq.wholeHeader) only on the paths that read them.
//
// Each line costs two IndexByte calls (its end, its colon), a lookup of the name among
// lazyField's, one pass over any other name (nameForm: checked, and in canonical form or not, so
// the special fields are found by comparing the key) and over the value (validValue). seen has
// bit keyBit(key) set for every key added to h: a key seen for the first time (nearly every one)
// costs one map assignment, not a lookup and an assignment.
func fillHeader(h http.Header, vals *[]string, rest string, special, pick string, keepPick bool, lazy *bool) (picked string, n int, ok bool) {
	var seen uint64
	if len(h) > 0 {
		seen = ^uint64(0) // not empty after all: every key takes the lookup
	}
	for len(rest) > 2 {
		i := strings.IndexByte(rest, '\n')
		if i < 1 || rest[i-1] != '\r' {
			return "", 0, false // a bare LF (CRLF ends every line, the head with a blank one)
		}
		l := rest[:i-1]
		rest = rest[i+1:]
		c := strings.IndexByte(l, ':')
		if c < 0 {
			return "", 0, false
		}
		name, value := l[:c], l[c+1:]
		// lazyField's names as browsers spell them; in another case below.
		if lazy != nil && lazyKey(name) {
			if !validValue(value) {
				return "", 0, false
			}
			*lazy = true
			continue
		}
		valid, canonical := nameForm(name)
		if !valid {
			return "", 0, false
		}
		key := name
		if !canonical {
			if lazy != nil && lazyField(name) {
				if !validValue(value) {
					return "", 0, false
				}
				*lazy = true
				continue
			}
			key = textproto.CanonicalMIMEHeaderKey(name)
		}
		if !validValue(value) || refusedField(key, special) {
			return "", 0, false
		}
		value = trimBlanks(value)
		if key == pick {
			picked, n = value, n+1
			if !keepPick {
				continue
			}
		}
		v := append(*vals, value)
		*vals = v
		if bit := keyBit(key); seen&bit == 0 {
			seen |= bit
			h[key] = v[len(v)-1 : len(v) : len(v)]
		} else if old, ok := h[key]; ok {
			h[key] = append(old, value)
		} else {
			h[key] = v[len(v)-1 : len(v) : len(v)]
		}
	}
	return picked, n, true
}

// keyBit is fillHeader's bit for a key (not empty): any bit does, one that differs between the
// fields of a usual head saves their lookups.
func keyBit(key string) uint64 {
	return 1 << ((uint(len(key))*5 + uint(key[0]) + uint(key[len(key)-1])) & 63)
}

// refusedField reports the canonical keys fillHeader refuses: Pragma, Trailer, special and, for a
// request (special is requestSpecial), Expect, Upgrade and Transfer-Encoding.
func refusedField(key, special string) bool {
	switch key {
	case "Pragma", "Trailer":
		return true
	case "Expect", "Upgrade", "Transfer-Encoding":
		if special == requestSpecial {
			return true
		}
	}
	return key == special
}

// lazyNames are, in canonical form, the request fields a browser sends that nothing on the
// proxy's hot path reads (routing, authentication, activity, the fast path, which forwards the
// client's lines as they are): content negotiation, caching and fetch metadata. Every other path
// of Proxy.ServeHTTP adds them to the header map first (wholeHeader). The one list: lazyKey and
// lazyField both look names up in lazyTable, built from it.
var lazyNames = [...]string{
	"Accept", "Referer", "Priority", "Sec-Ch-Ua", "Cache-Control", "If-None-Match", "Sec-Fetch-Dest",
	"Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User", "Accept-Encoding", "Accept-Language",
	"Sec-Ch-Ua-Mobile", "If-Modified-Since", "Sec-Ch-Ua-Platform", "Upgrade-Insecure-Requests",
}

// lazyTable is lazyNames by lazySlot, at most one a slot: a name is compared with the one
// lazy name of its slot, if any, and most names of a head hit an empty slot. (A table of names
// by length, compared in a loop, made the lookup twice as slow as the switch it replaced.)
var lazyTable = func() (t [64]string) {
	for _, k := range lazyNames {
		i := lazySlot(k)
		if len(k) < 2 || t[i] != "" {
			panic("lazyNames: " + k + " is shorter than two bytes or shares its slot with " + t[i] + ": change lazySlot's mix")
		}
		t[i] = k
	}
	return t
}()

// lazySlot is the slot of lazyTable for a name of at least two bytes, the same for every case
// of it; its mix puts no two of lazyNames in the same slot, and few of the other fields a browser
// usually sends in theirs (a name in a lazy name's slot costs one compare more, of its length
// first).
func lazySlot(name string) uint {
	n := len(name)
	return (uint(n)*5 + uint(name[n-1]|0x20)*15 + uint(name[n-2]|0x20)) % 64
}

// lazyKey is lazyField for a name in canonical form (as browsers spell them).
func lazyKey(name string) bool {
	return len(name) >= 2 && name == lazyTable[lazySlot(name)]
}

// lazyField reports, in any case, the fields lazyNames holds.
func lazyField(name string) bool {
	return len(name) >= 2 && asciiEqualFold(name, lazyTable[lazySlot(name)])
}

// requestSpecial is quickParse's special: with it fillHeader also refuses the fields that make
// a request one the lean loop hands to net/http (leanEligible), so that a request quickParse
// takes needs no other look at its lines.
const requestSpecial = "Content-Length"

// headerLines is how many header lines head holds at most (the size of a values buffer).
func headerLines(head []byte) int {
	return bytes.Count(head, []byte("\n"))
}

// trimBlanks is strings.Trim(v, " \t") without building a cut set for every value.
func trimBlanks(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// The classes of a byte in nameBytes: a byte a field name may hold (httpguts.IsTokenRune) is a
// nameToken, a letter also nameLower or nameUpper, '-' also nameDash.
const (
	nameToken = 1 << iota
	nameLower
	nameUpper
	nameDash
)

var nameBytes = func() (t [256]uint8) {
	for c := range t {
		switch {
		case !httpguts.IsTokenRune(rune(c)):
			continue
		case 'a' <= c && c <= 'z':
			t[c] = nameLower
		case 'A' <= c && c <= 'Z':
			t[c] = nameUpper
		case c == '-':
			t[c] = nameDash
		}
		t[c] |= nameToken
	}
	return t
}()

// nameForm reports whether name is a valid field name (httpguts.ValidHeaderFieldName) and whether
// it is in canonical form (textproto.CanonicalMIMEHeaderKey's: a letter is upper case first and
// after '-', lower case elsewhere), in one pass without a branch per byte.
func nameForm(name string) (valid, canonical bool) {
	var bad uint8               // nameToken: a byte no name may hold; nameLower, nameUpper: a letter in the wrong case
	refused := uint8(nameLower) // the case the next letter must not have
	for i := 0; i < len(name); i++ {
		k := nameBytes[name[i]]
		bad |= k&refused | ^k&nameToken
		refused = nameUpper - (k&nameDash)>>2 // nameLower after '-'
	}
	return name != "" && bad&nameToken == 0, bad == 0
}

// validValue is httpguts.ValidHeaderFieldValue eight bytes at a time: a word with no byte below
// 0x20 and none equal to 0x7f (no control byte, tab included) is valid; one with such a byte is
// looked at byte by byte. The word test is exact ("hasless" and "haszero" of Bit Twiddling Hacks:
// a borrow can only come from a byte that already makes the test true).
func validValue(v string) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	// v is cut as it is read, so that the compiler sees eight bytes and reads them in one load.
	for ; len(v) >= 8; v = v[8:] {
		x := uint64(v[0]) | uint64(v[1])<<8 | uint64(v[2])<<16 | uint64(v[3])<<24 |
			uint64(v[4])<<32 | uint64(v[5])<<40 | uint64(v[6])<<48 | uint64(v[7])<<56
		y := x ^ (ones * 0x7f)
		if (x-ones*0x20)&^x&highs != 0 || (y-ones)&^y&highs != 0 {
			if !httpguts.ValidHeaderFieldValue(v[:8]) {
				return false
			}
		}
	}
	return httpguts.ValidHeaderFieldValue(v)
}
