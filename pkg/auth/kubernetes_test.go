package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// reviewer answers every TokenReview with status: the audience check is pure logic on that
// answer (the e2e suite runs TokenReview against the real API server).
func reviewer(status authnv1.TokenReviewStatus) client.Client {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).Build().(client.WithWatch), interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			obj.(*authnv1.TokenReview).Status = status
			return nil
		},
	})
}

func TestKubernetesChecksTheAudiencesOfTheReview(t *testing.T) {
	user := authnv1.UserInfo{Username: "jane", Groups: []string{"dev"}}
	tests := []struct {
		name       string
		audiences  []string
		status     authnv1.TokenReviewStatus
		wantReason string
	}{
		{"no audiences configured: the API server's answer is enough", nil,
			authnv1.TokenReviewStatus{Authenticated: true, User: user}, ""},
		{"the review confirms our audience", []string{"nogoo9"},
			authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"nogoo9"}}, ""},
		{"the review confirms one of several audiences", []string{"nogoo9", "nogoo9-b"},
			authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"nogoo9-b"}}, ""},
		{"the review names only another audience: refused", []string{"nogoo9"},
			authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"https://kubernetes.default.svc"}}, "not valid for this service's audiences"},
		{"the review names no audience at all (an audience-agnostic authenticator): refused", []string{"nogoo9"},
			authnv1.TokenReviewStatus{Authenticated: true, User: user}, "not valid for this service's audiences"},
		{"not authenticated", []string{"nogoo9"},
			authnv1.TokenReviewStatus{Error: "token expired"}, "rejected by the Kubernetes API server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := NewKubernetes(reviewer(tc.status), KubernetesConfig{Audiences: tc.audiences})
			c, err := k.VerifyToken(context.Background(), "t")
			if tc.wantReason != "" {
				ae, ok := err.(*Error)
				if !ok || !strings.Contains(ae.Reason, tc.wantReason) {
					t.Fatalf("VerifyToken = %v, %v; want a reason containing %q", c, err, tc.wantReason)
				}
				return
			}
			if err != nil || c.Subject != "jane" {
				t.Fatalf("VerifyToken = %v, %v; want jane", c, err)
			}
		})
	}
}

// A TokenReview says nothing of the token's lifetime: before the caller carried the JWT's exp, a
// UI login with a 10-minute service-account token kept its session (admin rights included) for
// the store's 8 hours, after the token and its account were gone.
func TestKubernetesCallerEndsWithItsJWT(t *testing.T) {
	jwt := func(claims string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	}
	exp := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	k := NewKubernetes(reviewer(authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:a:b"}}), KubernetesConfig{})
	for _, tc := range []struct {
		name, token string
		want        time.Time
	}{
		{"a JWT's exp", jwt(fmt.Sprintf(`{"iss":"k8s","exp":%d}`, exp.Unix())), exp},
		{"a fractional exp (a NumericDate may be one)", jwt(fmt.Sprintf(`{"exp":%d.75}`, exp.Unix())), exp},
		{"an opaque token: unknown", "opaque-token", time.Time{}},
		{"a JWT without exp: unknown", jwt(`{"iss":"k8s"}`), time.Time{}},
		{"an exp that is not a number: unknown", jwt(`{"exp":"tomorrow"}`), time.Time{}},
		{"an exp past any date: unknown", jwt(`{"exp":1e300}`), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := k.VerifyToken(context.Background(), tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Expiry.Equal(tc.want) {
				t.Fatalf("Expiry = %v, want %v", c.Expiry, tc.want)
			}
		})
	}
}
