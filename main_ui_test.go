package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The proxy serves what workspaces answer, pages and scripts that a workspace's tenant (or
// whatever runs in it) writes. On the web UI's own origin such a page is nogoo9's UI to the
// browser: it reads the UI's pages with the viewer's session cookie, takes their CSRF token and
// posts any action as the viewer (an admin's Upgrade All included). Nothing stopped
// --ui-proxy-url from naming the UI's origin (--public-url); now nogoo9 refuses to start, naming
// both flags, before it reads a kubeconfig.
func TestTheUIAndTheWorkspacesCannotShareAnOrigin(t *testing.T) {
	// No cluster: a start that gets past the flags stops at loading the kubeconfig.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "no-kubeconfig"))
	for _, tc := range []struct {
		name, public, proxy string
		refused             bool
	}{
		{"the same URL", "https://nogoo9.example.com", "https://nogoo9.example.com", true},
		{"the same origin, another path", "https://nogoo9.example.com/", "https://NoGoo9.example.com:443/ws", true},
		{"the same origin, plain http with its default port", "http://127.0.0.1:80", "http://127.0.0.1/", true},
		{"another host of the same site", "https://nogoo9.example.com", "https://ws.example.com", false},
		{"another port", "https://nogoo9.example.com", "https://nogoo9.example.com:8443", false},
		{"another scheme", "http://nogoo9.example.com", "https://nogoo9.example.com", false},
		{"no --public-url", "", "https://ws.example.com", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{components: "api,proxy", publicURL: tc.public}
			o.ui.enabled, o.ui.proxyURL = true, tc.proxy
			err := run(o)
			if err == nil {
				t.Fatal("run returned no error without a cluster")
			}
			named := strings.Contains(err.Error(), "--ui-proxy-url")
			if !tc.refused {
				if named {
					t.Fatalf("--public-url=%q --ui-proxy-url=%q refused: %v", tc.public, tc.proxy, err)
				}
				return
			}
			if !named {
				t.Fatalf("--public-url=%q --ui-proxy-url=%q: got past the flags (%v), want a refusal naming them", tc.public, tc.proxy, err)
			}
			for _, want := range []string{"--public-url", tc.proxy, tc.public, "another host"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
		})
	}
}
