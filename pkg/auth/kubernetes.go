package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubernetesConfig configures TokenReview authentication.
type KubernetesConfig struct {
	// Audiences, when set, are the audiences the token must be valid for.
	Audiences []string
	// AdminGroup members are admins; empty: nobody is.
	AdminGroup string
}

// Kubernetes verifies tokens with the TokenReview API: every authenticator the cluster has
// (service-account tokens, its own OIDC configuration, ...) works.
type Kubernetes struct {
	cfg    KubernetesConfig
	client client.Client
}

// NewKubernetes returns a TokenReview authenticator. c needs RBAC create on
// authentication.k8s.io tokenreviews.
func NewKubernetes(c client.Client, cfg KubernetesConfig) *Kubernetes {
	return &Kubernetes{cfg: cfg, client: c}
}

// Authenticate implements Authenticator.
func (k *Kubernetes) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, k.VerifyToken)
}

// VerifyToken implements Authenticator.
func (k *Kubernetes) VerifyToken(ctx context.Context, token string) (*Caller, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: k.cfg.Audiences}}
	if err := k.client.Create(ctx, tr); err != nil {
		// Not the caller's fault, but still no identity: 401 with the cause in the log.
		return nil, &Error{Reason: "token could not be reviewed by the Kubernetes API server; try again", Err: err, Transient: true}
	}
	if !tr.Status.Authenticated {
		msg := tr.Status.Error
		if msg == "" {
			msg = "not authenticated"
		}
		return nil, &Error{Reason: "token rejected by the Kubernetes API server", Err: fmt.Errorf("%s", msg)}
	}
	if tr.Status.User.Username == "" {
		return nil, &Error{Reason: "token review returned no user name"}
	}
	if len(k.cfg.Audiences) > 0 && !intersects(tr.Status.Audiences, k.cfg.Audiences) {
		// An authenticator that ignores audiences answers with none of ours: the token may have
		// been issued for another service, which could replay it here.
		return nil, &Error{Reason: fmt.Sprintf("token is not valid for this service's audiences %v (the API server reports %v): request a token for one of %v",
			k.cfg.Audiences, tr.Status.Audiences, k.cfg.Audiences)}
	}
	u := tr.Status.User
	// A TokenReview says nothing of the token's lifetime. When the token is a JWT (service-account
	// tokens, the cluster's OIDC), its exp ends what nogoo9 grants on it (a UI session, the proxy's
	// cookie, the verification cache) no later than the token: reading it unverified is safe, as
	// it only ever shortens them (the API server verified the token, and with it its exp).
	_, exp := unverifiedClaims(token)
	return &Caller{
		Subject: u.Username,
		Groups:  u.Groups,
		IsAdmin: k.cfg.AdminGroup != "" && slices.Contains(u.Groups, k.cfg.AdminGroup),
		Expiry:  exp,
	}, nil
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// KubernetesIssuer asks the API server of cfg for its service-account issuer (OIDC discovery,
// /.well-known/openid-configuration, which the default RBAC lets every service account read).
// --auth=kubernetes names it as the authorization server in the protected-resource metadata.
func KubernetesIssuer(ctx context.Context, cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := dc.RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("read the API server's /.well-known/openid-configuration: %w", err)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.Issuer == "" {
		return "", fmt.Errorf("the API server's /.well-known/openid-configuration names no issuer")
	}
	return doc.Issuer, nil
}
