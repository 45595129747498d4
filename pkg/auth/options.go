package auth

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options are the authentication flags.
type Options struct {
	Mode string
	OIDC OIDCConfig
	Kube KubernetesConfig
	// AuthorizationServer overrides the issuer announced as authorization server in the
	// protected-resource metadata (--authorization-server).
	AuthorizationServer string
	// audiences is the raw --token-audiences flag.
	audiences string
	// trustedProxies is the raw --trusted-proxy-cidrs flag; TrustedProxies reads it.
	trustedProxies string
}

// BindFlags registers --auth and the --oidc-* / --admin-group flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Mode, "auth", "oidc", "How callers are authenticated: oidc (verify OIDC ID tokens) or kubernetes (TokenReview).")
	fs.StringVar(&o.OIDC.IssuerURL, "oidc-issuer-url", "", "OIDC issuer URL (--auth=oidc).")
	fs.StringVar(&o.OIDC.ClientID, "oidc-client-id", "", "Audience (client id) OIDC tokens must carry (--auth=oidc).")
	fs.StringVar(&o.OIDC.CAFile, "oidc-ca-file", "", "PEM CA bundle to trust for the OIDC issuer's TLS, added to the system roots.")
	fs.StringVar(&o.OIDC.SubjectClaim, "oidc-subject-claim", "sub", "Claim that identifies the caller; its value becomes the workspace owner.")
	fs.StringVar(&o.OIDC.AdminClaim, "oidc-admin-claim", "", "Claim that marks admins, e.g. groups (empty: no admins).")
	fs.StringVar(&o.OIDC.AdminValue, "oidc-admin-value", "", "Value of --oidc-admin-claim (or member of it, for a list) that makes an admin.")
	fs.StringVar(&o.Kube.AdminGroup, "admin-group", "", "With --auth=kubernetes: members of this group are admins (empty: no admins).")
	fs.StringVar(&o.audiences, "token-audiences", "", "With --auth=kubernetes: comma-separated audiences a token must be valid for; the TokenReview must confirm one of them (empty: the API server's).")
	fs.StringVar(&o.trustedProxies, "trusted-proxy-cidrs", "", "Comma-separated CIDRs of the reverse proxies (an ingress) in front of nogoo9: for a request from one of them, the limits on failed logins and token checks count the client X-Forwarded-For names (the right-most address outside these), not the proxy. Empty: the peer address.")
	fs.StringVar(&o.AuthorizationServer, "authorization-server", "", "Issuer URL announced as authorization server in /.well-known/oauth-protected-resource (empty: --oidc-issuer-url, or with --auth=kubernetes the API server's service-account issuer).")
}

// Validate checks the flags without any network call, so a mistake stops nogoo9 at start with
// a message naming the flag and what to do.
func (o *Options) Validate() error {
	if _, err := ParseTrustedProxies(o.trustedProxies); err != nil {
		return err
	}
	switch o.Mode {
	case "oidc":
		if o.Kube.AdminGroup != "" {
			return fmt.Errorf("--admin-group=%s only applies with --auth=kubernetes: with --auth=oidc use --oidc-admin-claim=groups --oidc-admin-value=%s", o.Kube.AdminGroup, o.Kube.AdminGroup)
		}
		return o.OIDC.validate()
	case "kubernetes":
		if o.OIDC.AdminClaim != "" || o.OIDC.AdminValue != "" {
			return fmt.Errorf("--oidc-admin-claim and --oidc-admin-value only apply with --auth=oidc: with --auth=kubernetes use --admin-group")
		}
		return nil
	case "":
		return fmt.Errorf("--auth is empty: use oidc or kubernetes")
	default:
		return fmt.Errorf("--auth=%q is not a mode: use oidc or kubernetes", o.Mode)
	}
}

// TrustedProxies is --trusted-proxy-cidrs, read (Validate reports a bad value).
func (o *Options) TrustedProxies() TrustedProxies {
	t, _ := ParseTrustedProxies(o.trustedProxies)
	return t
}

// New builds the configured Authenticator, wrapped in a Guard (failed checks are cheap). c is used for TokenReview (--auth=kubernetes).
func (o *Options) New(ctx context.Context, c client.Client) (Authenticator, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	switch o.Mode {
	case "oidc":
		a, err := NewOIDC(ctx, o.OIDC)
		if err != nil {
			return nil, err
		}
		return NewGuard(a, GuardOptions{TrustedProxies: o.TrustedProxies()}), nil
	case "kubernetes":
		if o.audiences != "" {
			for _, a := range strings.Split(o.audiences, ",") {
				if a = strings.TrimSpace(a); a != "" {
					o.Kube.Audiences = append(o.Kube.Audiences, a)
				}
			}
		}
		return NewGuard(NewKubernetes(c, o.Kube), GuardOptions{TrustedProxies: o.TrustedProxies()}), nil
	default:
		return nil, fmt.Errorf("--auth=%q is not a mode: use oidc or kubernetes", o.Mode)
	}
}

// Issuer returns the authorization server to announce in the protected-resource metadata:
// --authorization-server, else the OIDC issuer, else (--auth=kubernetes) the API server's
// service-account issuer, asked from cfg's API server. An error says why none is known; the
// metadata then lists none.
func (o *Options) Issuer(ctx context.Context, cfg *rest.Config) (string, error) {
	if o.AuthorizationServer != "" {
		if u, err := url.Parse(o.AuthorizationServer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("--authorization-server=%q is not an http(s) URL: give the issuer exactly as its tokens name it", o.AuthorizationServer)
		}
		return o.AuthorizationServer, nil
	}
	if o.Mode == "oidc" {
		return o.OIDC.IssuerURL, nil
	}
	return KubernetesIssuer(ctx, cfg)
}
