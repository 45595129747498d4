package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestClientOfBelievesOnlyWhatTrustedProxiesWrote(t *testing.T) {
	trusted, err := ParseTrustedProxies("10.0.0.0/8, fd00::/8,192.168.1.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"a peer that is no proxy: its own address, whatever it forwards", "203.0.113.9:5000", []string{"1.2.3.4"}, "203.0.113.9:5000"},
		{"the ingress's client", "10.0.0.1:5000", []string{"198.51.100.7"}, "198.51.100.7"},
		{"what the client wrote itself is not believed", "10.0.0.1:5000", []string{"6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
		{"two trusted hops", "10.0.0.1:5000", []string{"198.51.100.7, 10.2.3.4"}, "198.51.100.7"},
		{"a single trusted address", "192.168.1.7:80", []string{"198.51.100.7"}, "198.51.100.7"},
		{"a neighbour of the single trusted address is no proxy", "192.168.1.8:80", []string{"198.51.100.7"}, "192.168.1.8:80"},
		{"several header lines: the last is the nearest", "10.0.0.1:5000", []string{"6.6.6.6", "198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"IPv6 with brackets and a port", "[fd00::1]:443", []string{"[2001:db8::5]:1234"}, "2001:db8::5"},
		{"an IPv4-mapped IPv6 peer", "[::ffff:10.0.0.1]:5000", []string{"198.51.100.7"}, "198.51.100.7"},
		{"every hop trusted: the left-most", "10.0.0.1:5000", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"garbage ends the walk at the proxy that wrote it", "10.0.0.1:5000", []string{"1.2.3.4, garbage, 10.2.2.2"}, "10.2.2.2"},
		{"no X-Forwarded-For", "10.0.0.1:5000", nil, "10.0.0.1:5000"},
		{"an empty entry", "10.0.0.1:5000", []string{""}, "10.0.0.1"},
		{"only the nearest 32 entries are read", "10.0.0.1:5000", []string{"198.51.100.7, " + strings.Repeat("10.0.0.2, ", 40) + "10.0.0.3"}, "10.0.0.2"},
	} {
		if got := trusted.ClientOf(tc.remote, tc.xff); got != tc.want {
			t.Errorf("%s: ClientOf(%q, %q) = %q, want %q", tc.name, tc.remote, tc.xff, got, tc.want)
		}
	}
	if got := TrustedProxies(nil).ClientOf("10.0.0.1:5000", []string{"198.51.100.7"}); got != "10.0.0.1:5000" {
		t.Errorf("without trusted proxies: %q, want the peer", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "ingress", "10.0.0.1-10.0.0.9"} {
		if _, err := ParseTrustedProxies(bad); err == nil || !strings.Contains(err.Error(), "--trusted-proxy-cidrs") {
			t.Errorf("ParseTrustedProxies(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}

// TestGuardBehindATrustedIngressLimitsEachClient: behind one ingress every request comes from the
// ingress's address. Without --trusted-proxy-cidrs one client's garbage tokens spend the bucket
// every client shares, and another person's first login is refused (429); with it, each client
// has its own bucket, and a client cannot get fresh ones by writing X-Forwarded-For itself.
func TestGuardBehindATrustedIngressLimitsEachClient(t *testing.T) {
	from := func(g *Guard, xff, token string) error {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:40000" // the ingress
		r.Header.Set("X-Forwarded-For", xff)
		_, err := g.VerifyToken(WithClient(context.Background(), r), token)
		return err
	}
	limited := func(err error) bool {
		var ae *Error
		return errors.As(err, &ae) && ae.RetryAfter > 0
	}
	for _, tc := range []struct {
		name    string
		trusted string
		wantBob bool // bob's first login is checked
	}{
		{"without trusted proxies", "", false},
		{"with the ingress trusted", "10.0.0.0/8", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trusted, err := ParseTrustedProxies(tc.trusted)
			if err != nil {
				t.Fatal(err)
			}
			inner := &countingAuth{}
			g := NewGuard(inner, GuardOptions{Now: (&fakeClock{t: time.Unix(1_000_000, 0)}).now, TrustedProxies: trusted})
			// Mallory sends garbage, each with a made-up address of her own in front.
			for i := range 30 {
				_ = from(g, fmt.Sprintf("6.6.%d.%d, 198.51.100.66", i/200, i%200), fmt.Sprintf("garbage-%d", i))
			}
			if calls := inner.calls.Load(); calls > 10 {
				t.Fatalf("mallory's 30 garbage tokens reached the verifier %d times, want at most her burst of 10", calls)
			}
			err = from(g, "198.51.100.7", "good-bob")
			if got := err == nil; got != tc.wantBob {
				t.Fatalf("bob's first login: %v (limited: %v), want checked: %v", err, limited(err), tc.wantBob)
			}
		})
	}
}
