package mcp

import (
	"bytes"
	"io"
	"net/http"
)

// msgNoBatches answers a POST whose body is a JSON-RPC batch (an array).
const msgNoBatches = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"JSON-RPC batches are not supported: send each request in its own POST"}}`

// refuseBatches answers 400 to every POST whose body is a JSON array, before next (the SDK)
// reads it. The SDK takes a request without Mcp-Protocol-Version for protocol version
// 2025-03-26, which has batches, and runs every call of a batch: one POST of 1 MiB held
// thousands of tool calls, each as costly as one sent on its own, past every per-request bound.
// No client nogoo9 knows sends batches (2025-06-18 removed them). Every other body reaches next
// whole.
func refuseBatches(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		first, read, err := firstJSONByte(r.Body, MaxBodyBytes)
		if first == '[' {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, msgNoBatches)
			return
		}
		r2 := r.WithContext(r.Context()) // a shallow copy: only the body changes
		r2.Body = readCloser{io.MultiReader(bytes.NewReader(read), errReader{err}, r.Body), r.Body}
		next.ServeHTTP(w, r2)
	})
}

// firstJSONByte reads body up to its first byte that is not JSON white space and returns it
// with every byte read, reading at most limit bytes (0 and the bytes read when there is no
// such byte within them, or a read failed first: err).
func firstJSONByte(body io.Reader, limit int) (byte, []byte, error) {
	var read []byte
	buf := make([]byte, 512)
	for len(read) < limit {
		n, err := body.Read(buf[:min(len(buf), limit-len(read))])
		for _, c := range buf[:n] {
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return c, append(read, buf[:n]...), nil
			}
		}
		read = append(read, buf[:n]...)
		if err == io.EOF {
			return 0, read, nil
		}
		if err != nil {
			return 0, read, err
		}
	}
	return 0, read, nil
}

// errReader returns err, when not nil, after the bytes read before it failed, so that next
// sees the body's read error where it happened.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}
