package workspace

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Origins is where the proxy serves each workspace on its own web origin (--proxy-workspace-domain):
// a workspace's route is served at "<scheme>://<label>.<Host>", one host name per workspace and
// route kind, so that the browser's same-origin policy keeps one workspace's pages away from
// another's, from its preview and from the login. Host itself (the "apex") serves only the login.
// It needs a wildcard DNS name and, for https, a wildcard certificate for "*.<host>".
type Origins struct {
	// Scheme is "https" or "http".
	Scheme string
	// Host is the apex host name, lower case, with ":port" only when the port is not the
	// scheme's default: the form browsers put in the Host header and in Origin.
	Host string
}

// ParseOrigins reads --proxy-workspace-domain: "scheme://host[:port]", nothing else (no path,
// query, user or wildcard). The error names the flag, the value and what to write.
func ParseOrigins(raw string) (*Origins, error) {
	bad := func(why string) error {
		return fmt.Errorf("--proxy-workspace-domain %q: %s; write it as https://ws.example.com (a wildcard DNS name *.ws.example.com must reach the proxy)", raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, bad(err.Error())
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, bad("the scheme must be https or http")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, bad("give only a scheme, a host name and an optional port")
	}
	name, port := u.Hostname(), u.Port()
	if name == "" || net.ParseIP(name) != nil || strings.HasPrefix(name, "*") {
		return nil, bad("the host must be a DNS name (not an address or a wildcard): workspaces are served on its subdomains")
	}
	for _, l := range strings.Split(name, ".") {
		if len(l) == 0 || len(l) > 63 {
			return nil, bad("every label of the host name must be 1 to 63 characters")
		}
	}
	host := strings.ToLower(name)
	if u.Scheme == "http" && host != "localhost" && !strings.HasSuffix(host, ".localhost") {
		// Browsers send fetch metadata (Sec-Fetch-Site), which the proxy needs to tell a
		// workspace's own requests from another page's, only to https and localhost origins.
		return nil, bad("plain http is for development only, on localhost or a name ending in .localhost (browsers resolve those to loopback and send fetch metadata there); use https")
	}
	if port != "" && port != defaultPort(u.Scheme) {
		host += ":" + port
	}
	if len(host)+1+maxLabel > 253 {
		return nil, bad("the host name is too long to have workspace names in front of it")
	}
	return &Origins{Scheme: u.Scheme, Host: host}, nil
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// originHashLen is the hash part of a label: 10 base32 characters, 50 bits. Two workspaces share
// a label only if their namespace and id are equal or the hashes collide; only an administrator
// makes namespaces, so a tenant cannot search for a collision with another namespace's workspace.
const originHashLen = 10

// maxLabel is the longest label: an id of MaxIDLength, "-p" for a preview, "-", the hash.
const maxLabel = MaxIDLength + 2 + 1 + originHashLen

// Label is the DNS label of a workspace route's host: "<id>-<hash>" for the workspace route and
// "<id>-p-<hash>" for its preview, the hash over the namespace, the id and the kind. At most 53
// characters (a label may have 63). The id keeps it readable; the hash keeps workspaces of the same
// id in two namespaces, and a workspace and its preview, on different origins.
func Label(namespace, id string, preview bool) string {
	kind := "workspace"
	mid := "-"
	if preview {
		kind, mid = "preview", "-p-"
	}
	return id + mid + shortHash(originHashLen, kind, namespace, id)
}

// HostFor is the host (Host header form) serving a workspace route: "<label>.<apex host>".
func (o *Origins) HostFor(namespace, id string, preview bool) string {
	return Label(namespace, id, preview) + "." + o.Host
}

// URLFor is the origin serving a workspace route: "<scheme>://<label>.<apex host>", to which the
// route's path is appended.
func (o *Origins) URLFor(namespace, id string, preview bool) string {
	return o.Scheme + "://" + o.HostFor(namespace, id, preview)
}

// Apex is the login's origin: "<scheme>://<apex host>".
func (o *Origins) Apex() string { return o.Scheme + "://" + o.Host }

// NormalizeHost is a Host header in the form Origins compares: lower case, without the scheme's
// default port and without a trailing dot.
func (o *Origins) NormalizeHost(host string) string {
	host = strings.ToLower(host)
	if h, p, err := net.SplitHostPort(host); err == nil && p == defaultPort(o.Scheme) {
		host = h
	}
	if h, p, err := net.SplitHostPort(host); err == nil {
		return strings.TrimSuffix(h, ".") + ":" + p
	}
	return strings.TrimSuffix(host, ".")
}

// Under reports whether host (a Host header) is one DNS label (RFC 1123: letters, digits and
// hyphens) below the apex: a workspace route's host, whether or not any workspace has that label.
func (o *Origins) Under(host string) bool {
	h := o.NormalizeHost(host)
	label, ok := strings.CutSuffix(h, "."+o.Host)
	return ok && len(validation.IsDNS1123Label(label)) == 0
}
