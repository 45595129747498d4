package auth

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	authnv1 "k8s.io/api/authentication/v1"
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
		return nil, &Error{Reason: "token could not be reviewed by the Kubernetes API server", Err: err}
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
	u := tr.Status.User
	return &Caller{
		Subject: u.Username,
		Groups:  u.Groups,
		IsAdmin: k.cfg.AdminGroup != "" && slices.Contains(u.Groups, k.cfg.AdminGroup),
	}, nil
}
