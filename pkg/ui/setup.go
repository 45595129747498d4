package ui

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Config is the UI's part of nogoo9's configuration (its flags).
type Config struct {
	Auth      auth.Authenticator
	Templates frontend.Templates
	// SubscribeTemplates registers a callback for template changes (templates.Registry.Subscribe).
	SubscribeTemplates func(func(name string))
	DevLogin           bool
	InsecureCookie     bool
	// ProxyURL is --ui-proxy-url; ProxyBindAddress is --proxy-bind-address, whose port links use
	// when ProxyURL is empty (and the proxy runs in this process).
	ProxyURL, ProxyBindAddress string
	// Origins is --proxy-workspace-domain, parsed (Options.Origins); nil: links by path.
	Origins *workspace.Origins
	// OIDC, when RedirectURL is set, turns on the single sign-on login.
	OIDC OIDCConfig
	// MaxListStreams is Options.MaxListStreams (0: DefaultMaxListStreams).
	MaxListStreams int
}

// Setup returns a function that builds the UI over the front end's service (api.Options.UI): it
// subscribes a Hub to the manager's pod informer and to template changes, and discovers the OIDC
// provider when single sign-on is configured.
func Setup(ctx context.Context, mgr manager.Manager, c Config) func(*frontend.Service) (http.Handler, error) {
	return func(svc *frontend.Service) (http.Handler, error) {
		hub := NewHub()
		hub.FromViews(svc)
		pods, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
		if err != nil {
			return nil, fmt.Errorf("ui: pod informer: %w", err)
		}
		if _, err := pods.AddEventHandler(hub); err != nil {
			return nil, fmt.Errorf("ui: watch workspace pods: %w", err)
		}
		if c.SubscribeTemplates != nil {
			c.SubscribeTemplates(hub.TemplateChanged)
		}
		o := Options{
			Service: svc, Templates: c.Templates, Auth: c.Auth, Hub: hub,
			DevLogin: c.DevLogin, InsecureCookie: c.InsecureCookie, ProxyURL: c.ProxyURL,
			Origins: c.Origins, MaxListStreams: c.MaxListStreams,
		}
		if c.ProxyURL == "" && c.ProxyBindAddress != "" {
			if _, port, err := net.SplitHostPort(c.ProxyBindAddress); err == nil {
				o.ProxyPort = port
			}
		}
		if c.OIDC.RedirectURL != "" {
			if o.OIDC, err = NewOIDCLogin(ctx, c.OIDC); err != nil {
				return nil, err
			}
		}
		u, err := New(o)
		if err != nil {
			return nil, err
		}
		return u.Handler(), nil
	}
}

// CheckProxyURL refuses a proxy (--ui-proxy-url, proxyURL) served on the web UI's own origin
// (--public-url, publicURL). The proxy serves what workspaces answer: on the UI's origin a
// workspace's page is, to the browser, nogoo9's own UI, which reads the UI's pages with the
// viewer's session, takes their CSRF token and acts as the viewer (an admin's Upgrade All
// included): a full takeover. Either empty: nothing to compare (without --ui-proxy-url, links use
// the --proxy-bind-address port, another origin).
func CheckProxyURL(publicURL, proxyURL string) error {
	if publicURL == "" || proxyURL == "" {
		return nil
	}
	ui, proxy := origin(publicURL), origin(proxyURL)
	if ui == "" || ui != proxy {
		return nil
	}
	return fmt.Errorf("--ui-proxy-url=%s and --public-url=%s are one origin (%s): workspace pages would run as nogoo9's web UI, with the viewer's session and every action it allows, an admin's included; serve the proxy on another host (e.g. https://ws.example.com) or another port, and set --ui-proxy-url to that", proxyURL, publicURL, ui)
}

// origin is raw's scheme://host:port, lower-case, with the scheme's default port; "" when raw is
// no http(s) URL with a host.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case port != "":
	case scheme == "https":
		port = "443"
	case scheme == "http":
		port = "80"
	default:
		return ""
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
