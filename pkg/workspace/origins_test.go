package workspace

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseOriginsSaysWhatToWrite(t *testing.T) {
	for _, raw := range []string{"ws.example.com", "ftp://ws.example.com", "https://ws.example.com/path", "https://1.2.3.4", "https://[::1]", "https://*.ws.example.com", "https://u@ws.example.com", "https://ws..example.com", "https://ws.example.com?x=1", "http://ws.example.com", "http://127.0.0.1.localhost.evil", "https://" + strings.Repeat("a.", 100) + "com"} {
		if _, err := ParseOrigins(raw); err == nil || !strings.Contains(err.Error(), "--proxy-workspace-domain") || !strings.Contains(err.Error(), "https://ws.example.com") {
			t.Errorf("ParseOrigins(%q) = %v, want an error naming the flag and an example", raw, err)
		}
	}
	for raw, want := range map[string]Origins{
		"https://WS.Example.com:443/":  {Scheme: "https", Host: "ws.example.com"},
		"https://ws.example.com:8443":  {Scheme: "https", Host: "ws.example.com:8443"},
		"http://ws.localhost:80":       {Scheme: "http", Host: "ws.localhost"},
		"http://localhost:8091":        {Scheme: "http", Host: "localhost:8091"},
		"http://ws.localhost:8091":     {Scheme: "http", Host: "ws.localhost:8091"},
		"https://workspaces.corp.test": {Scheme: "https", Host: "workspaces.corp.test"},
	} {
		o, err := ParseOrigins(raw)
		if err != nil || *o != want {
			t.Errorf("ParseOrigins(%q) = %+v, %v, want %+v", raw, o, err, want)
		}
	}
}

// TestLabelsAreOneDNSLabelEachAndApart: every route's host is one valid DNS label below the apex,
// and the workspace route, its preview and the same id in another namespace never share one.
func TestLabelsAreOneDNSLabelEachAndApart(t *testing.T) {
	longID := strings.Repeat("a", MaxIDLength)
	seen := map[string]string{}
	for _, ns := range []string{"default", "team-a", "team-b", strings.Repeat("n", 63)} {
		for _, id := range []string{"demo", "a", longID, "x--y"} {
			for _, preview := range []bool{false, true} {
				l := Label(ns, id, preview)
				if errs := validation.IsDNS1123Label(l); len(errs) > 0 {
					t.Errorf("Label(%q, %q, %v) = %q: %v", ns, id, preview, l, errs)
				}
				if !strings.HasPrefix(l, id+"-") {
					t.Errorf("Label(%q, %q, %v) = %q does not start with the id", ns, id, preview, l)
				}
				key := ns + "/" + id + "/" + map[bool]string{false: "workspace", true: "preview"}[preview]
				if other, dup := seen[l]; dup {
					t.Errorf("%s and %s share the label %q", key, other, l)
				}
				seen[l] = key
			}
		}
	}
	if got := len(Label("ns", longID, true)); got > 63 || got != maxLabel {
		t.Errorf("the longest label is %d characters, want %d (at most 63)", got, maxLabel)
	}
}

func TestUnderIsOneLabelBelowTheApex(t *testing.T) {
	o, err := ParseOrigins("https://ws.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"demo-abc.ws.example.com":      true,
		"DEMO-ABC.WS.EXAMPLE.COM":      true,
		"demo-abc.ws.example.com:443":  true,
		"demo-abc.ws.example.com.":     true,
		"ws.example.com":               false,
		"a.b.ws.example.com":           false,
		"demo-abc.ws.example.com:8443": false,
		"demo-abc.ws.example.com.evil": false,
		"evilws.example.com":           false,
		".ws.example.com":              false,
		"127.0.0.1:8091":               false,
		"demo_x.ws.example.com":        false,
		"-demo.ws.example.com":         false,
		"demo<x.ws.example.com":        false,
	} {
		if got := o.Under(host); got != want {
			t.Errorf("Under(%q) = %v, want %v", host, got, want)
		}
	}
	if h := o.HostFor("default", "demo", false); !o.Under(h) || o.NormalizeHost(strings.ToUpper(h)+":443") != h {
		t.Errorf("HostFor = %q: not under the apex, or not its own normal form", h)
	}
}
