package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"reflect"
	"testing"
)

func TestSetXForwardedMatchesTheStandardLibrary(t *testing.T) {
	tests := []struct {
		name       string
		remoteAddr string
		tls        bool
	}{
		{"plain HTTP from an IPv4 client", "10.0.0.7:51234", false},
		{"TLS from an IPv6 client", "[2001:db8::1]:443", true},
		{"a remote address without a port sets no X-Forwarded-For", "unix-socket", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := http.NewRequest(http.MethodGet, "http://ide.example.com/ws/jane/demo/", nil)
			in.RemoteAddr = tc.remoteAddr
			if tc.tls {
				in.TLS = &tls.ConnectionState{}
			}
			want := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: http.Header{}}}
			want.SetXForwarded()
			got := http.Header{}
			setXForwarded(got, in)
			if !reflect.DeepEqual(got, want.Out.Header) {
				t.Fatalf("setXForwarded = %v, httputil sets %v", got, want.Out.Header)
			}
		})
	}
}
