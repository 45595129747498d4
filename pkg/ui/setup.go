package ui

import (
	"context"
	"fmt"
	"net"
	"net/http"

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
