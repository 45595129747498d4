package auth

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies are the reverse proxies in front of nogoo9 (--trusted-proxy-cidrs) whose
// X-Forwarded-For names the client that the failure limits count. Behind an ingress every client
// has the ingress's address, so without them one client's garbage tokens spend every client's
// bucket; only the global bucket and known-good tokens are then unaffected.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies reads --trusted-proxy-cidrs: comma-separated CIDRs or single addresses.
func ParseTrustedProxies(csv string) (TrustedProxies, error) {
	var out TrustedProxies
	for _, s := range strings.Split(csv, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("--trusted-proxy-cidrs: %q is neither a CIDR nor an address: list your ingress's addresses, e.g. 10.0.0.0/8,fd00::/8", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// holds reports whether a is one of t's addresses.
func (t TrustedProxies) holds(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// maxForwardedHops bounds how many X-Forwarded-For entries ClientOf reads, from the right.
const maxForwardedHops = 32

// ClientOf is the address of the client of a request from peer remoteAddr (host:port) that carried
// the X-Forwarded-For lines forwardedFor. It is remoteAddr unless that is a trusted proxy; then it
// is the right-most forwarded address that is not one: each proxy appends the address it took the
// request from, and everything left of the first untrusted one was written by the client itself,
// which could name any address to get fresh buckets. An entry that is not an address ends the walk
// at the proxy that wrote it; when every entry is trusted, the left-most is the client.
func (t TrustedProxies) ClientOf(remoteAddr string, forwardedFor []string) string {
	if len(t) == 0 || len(forwardedFor) == 0 {
		return remoteAddr
	}
	hop, ok := parseHop(remoteAddr)
	if !ok || !t.holds(hop) {
		return remoteAddr
	}
	seen := 0
	for i := len(forwardedFor) - 1; i >= 0; i-- {
		line := forwardedFor[i]
		for line != "" && seen < maxForwardedHops {
			var entry string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				entry, line = line[j+1:], line[:j]
			} else {
				entry, line = line, ""
			}
			seen++
			a, ok := parseHop(strings.TrimSpace(entry))
			if !ok {
				return hop.String()
			}
			if !t.holds(a) {
				return a.String()
			}
			hop = a
		}
	}
	return hop.String()
}

// parseHop reads an address as a peer or an X-Forwarded-For entry writes it: "ip", "ip:port",
// "[ipv6]" or "[ipv6]:port".
func parseHop(s string) (netip.Addr, bool) {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// WithClient returns a copy of ctx that names the client of r, whose token is checked next: its
// peer address and X-Forwarded-For, from which a Guard takes the client its failure limits count
// (ClientOf with its TrustedProxies, then ClientKey).
func WithClient(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, clientKey{}, peer{remote: r.RemoteAddr, forwardedFor: r.Header["X-Forwarded-For"]})
}
