package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	ctrl "sigs.k8s.io/controller-runtime"
)

// OIDCConfig configures OIDC bearer-token verification.
type OIDCConfig struct {
	// IssuerURL is the issuer; its /.well-known/openid-configuration is read at start.
	IssuerURL string
	// ClientID is the audience every token must carry.
	ClientID string
	// CAFile, when set, is a PEM bundle trusted for the issuer's TLS (added to the system pool).
	CAFile string
	// SubjectClaim names the claim that identifies the caller ("sub" when empty).
	SubjectClaim string
	// AdminClaim and AdminValue: a token whose AdminClaim equals AdminValue (or, for a list claim
	// such as "groups", contains it) belongs to an admin. Empty AdminClaim: nobody is an admin.
	AdminClaim string
	AdminValue string
	// Now is the clock for expiry checks (time.Now when nil).
	Now func() time.Time
}

// OIDC verifies OIDC ID tokens (JWTs) against one issuer.
type OIDC struct {
	cfg      OIDCConfig
	verifier *oidc.IDTokenVerifier
}

// NewOIDC discovers the issuer (one HTTP round trip) and returns its verifier. Signatures are
// checked against the issuer's JWKS, fetched on demand and refreshed when no key held verifies a
// token (a new key id); "alg: none" and any algorithm the issuer does not announce are refused.
// Every answer of the issuer is read with a 1 MiB cap, and only over https (or plain http on a
// loopback host).
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.SubjectClaim == "" {
		cfg.SubjectClaim = "sub"
	}
	client, err := httpClient(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, client), cfg.IssuerURL)
	if err != nil {
		// go-oidc quotes the issuer's whole answer when it is not 200.
		return nil, fmt.Errorf("discover OIDC issuer %s (--oidc-issuer-url): %w", cfg.IssuerURL, shortErr(err))
	}
	var meta struct {
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := provider.Claims(&meta); err != nil {
		return nil, fmt.Errorf("discover OIDC issuer %s (--oidc-issuer-url): %w", cfg.IssuerURL, shortErr(err))
	}
	if u, err := url.Parse(meta.JWKSURI); err != nil || meta.JWKSURI == "" || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("OIDC issuer %s (--oidc-issuer-url) names jwks_uri %.300q in its discovery document, which is not an http(s) URL: fix the issuer's configuration", cfg.IssuerURL, meta.JWKSURI)
	} else if u.Scheme == "http" && !plainHTTPAllowed(u) {
		return nil, fmt.Errorf("OIDC issuer %s (--oidc-issuer-url) names jwks_uri %.300q in its discovery document, which uses plain http on a host that is not loopback: anyone on the network path could serve signing keys; the issuer must publish its keys over https", cfg.IssuerURL, meta.JWKSURI)
	}
	// As go-oidc's provider does: the algorithms the issuer announces that go-oidc supports (none
	// announced: RS256 only).
	var algs []string
	for _, a := range meta.Algs {
		if supportedAlg(a) {
			algs = append(algs, a)
		}
	}
	keys := &keySet{url: meta.JWKSURI, client: client}
	v := oidc.NewVerifier(cfg.IssuerURL, keys, &oidc.Config{ClientID: cfg.ClientID, Now: cfg.Now, SupportedSigningAlgs: algs})
	return &OIDC{cfg: cfg, verifier: v}, nil
}

// validate checks the configuration without a network call.
func (cfg *OIDCConfig) validate() error {
	if cfg.IssuerURL == "" {
		return errors.New("--oidc-issuer-url is empty: set it to your identity provider's issuer URL (with --auth=oidc), or use --auth=kubernetes")
	}
	if err := checkIssuerURL("--oidc-issuer-url", cfg.IssuerURL); err != nil {
		return err
	}
	if cfg.ClientID == "" {
		return errors.New("--oidc-client-id is empty: set it to the audience your tokens are issued for")
	}
	if cfg.AdminClaim != "" && cfg.AdminValue == "" {
		return fmt.Errorf("--oidc-admin-claim=%s needs --oidc-admin-value (the value that makes an admin)", cfg.AdminClaim)
	}
	if cfg.AdminClaim == "" && cfg.AdminValue != "" {
		return fmt.Errorf("--oidc-admin-value=%s needs --oidc-admin-claim (the claim that holds it, e.g. groups)", cfg.AdminValue)
	}
	return nil
}

// IssuerHTTPClient returns the HTTP client nogoo9 uses for the OIDC issuer (give it to go-oidc
// with oidc.ClientContext): it trusts caFile (--oidc-ca-file) besides the system roots when set,
// reads at most 1 MiB of any answer (a longer one is an error), follows no redirect to plain http
// off loopback, and gives up after 30 s.
func IssuerHTTPClient(caFile string) (*http.Client, error) { return httpClient(caFile) }

// httpClient is the client for the issuer: its answers are capped at maxIssuerBody, and it
// follows no redirect to plain http off loopback.
func httpClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read --oidc-ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--oidc-ca-file %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: boundedTransport{base: tr, max: maxIssuerBody}, CheckRedirect: refuseDowngrade, Timeout: 30 * time.Second}, nil
}

// Authenticate implements Authenticator.
func (o *OIDC) Authenticate(r *http.Request) (*Caller, error) {
	return authenticate(r, o.VerifyToken)
}

// VerifyToken implements Authenticator. It downloads the issuer's keys when none it holds
// verifies the token.
func (o *OIDC) VerifyToken(ctx context.Context, token string) (*Caller, error) {
	return o.verify(ctx, token, &keyProbe{})
}

// verifyLocal implements localVerifier: the keys are not downloaded; outbound is true when the
// keys held do not verify the signature (a new key, or a forgery), which only a download decides.
func (o *OIDC) verifyLocal(ctx context.Context, token string) (*Caller, bool, error) {
	probe := &keyProbe{localOnly: true}
	c, err := o.verify(ctx, token, probe)
	if probe.needFetch {
		return nil, true, nil
	}
	return c, false, err
}

func (o *OIDC) verify(ctx context.Context, token string, probe *keyProbe) (*Caller, error) {
	idt, err := o.verifier.Verify(context.WithValue(ctx, probeKey{}, probe), token)
	if err != nil {
		if probe.fetchErr != nil {
			return nil, &Error{Reason: "the OIDC issuer's signing keys could not be fetched to check this token; try again in a few seconds", Err: shortErr(probe.fetchErr), Transient: true}
		}
		reason := rejectReason(err)
		if iss, _ := unverifiedClaims(token); iss != "" && iss != o.cfg.IssuerURL {
			// go-oidc checks the signature first; the issuer's name explains the failure better.
			reason = fmt.Sprintf("token was issued by %q, not by the issuer this service trusts (%s): get a token from it", iss, o.cfg.IssuerURL)
		}
		return nil, &Error{Reason: reason, Err: shortErr(err)}
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, &Error{Reason: "token claims are not a JSON object", Err: err}
	}
	sub, _ := claims[o.cfg.SubjectClaim].(string)
	if sub == "" {
		return nil, &Error{Reason: fmt.Sprintf("token has no string claim %q to identify the caller", o.cfg.SubjectClaim)}
	}
	if o.cfg.SubjectClaim == "email" && !emailVerified(claims["email_verified"]) {
		// An unverified address may belong to someone else: with an identity provider that lets
		// users type any address, "email" would let them become its owner here.
		return nil, &Error{Reason: fmt.Sprintf("token's email %q is not verified (email_verified is not true): verify it with your identity provider, or use --oidc-subject-claim=sub", sub)}
	}
	c := &Caller{Subject: sub, Groups: stringList(claims["groups"]), Expiry: idt.Expiry}
	// Kubernetes reserves names that begin with "system:" for its own users, service accounts
	// and groups (system:masters is every permission). nogoo9 asks the API server about its
	// callers by these names (SubjectAccessReview, pkg/authz), so a token must not claim one that
	// its holder could have chosen: no group (a groups claim is the identity provider's list,
	// which some let users shape; the API server's own service-account tokens carry none), and no
	// subject from a claim other than "sub" (an email or a user name, often the user's choice).
	// "sub" is the issuer's own id for the holder: the API server as issuer names its service
	// accounts system:serviceaccount:<namespace>:<name> there, and they are who they say.
	if o.cfg.SubjectClaim != "sub" && strings.HasPrefix(sub, reservedPrefix) {
		return nil, &Error{Reason: fmt.Sprintf("token's %s %q begins with %q, which Kubernetes reserves for its own identities: fix the identity provider's claims, or use --oidc-subject-claim=sub", o.cfg.SubjectClaim, sub, reservedPrefix)}
	}
	for _, g := range c.Groups {
		if strings.HasPrefix(g, reservedPrefix) {
			return nil, &Error{Reason: fmt.Sprintf("token's group %q begins with %q, which Kubernetes reserves for its own groups: remove it from the identity provider's groups claim", g, reservedPrefix)}
		}
	}
	if o.cfg.AdminClaim != "" {
		c.IsAdmin = claimHas(claims[o.cfg.AdminClaim], o.cfg.AdminValue)
		if c.IsAdmin && o.cfg.AdminClaim == "email" && !emailVerified(claims["email_verified"]) {
			// As for --oidc-subject-claim=email: an unverified address may have been typed by
			// anyone. The token stays valid for its subject, without admin rights.
			c.IsAdmin = false
			ctrl.LoggerFrom(ctx).WithName("auth").Info("admin rights withheld: the token's email matches --oidc-admin-value but email_verified is not true; verify the address with the identity provider, or name admins by a claim its holder cannot choose (e.g. --oidc-admin-claim=groups)",
				"subject", sub, "email", o.cfg.AdminValue, "email_verified", fmt.Sprintf("%.40v", claims["email_verified"]))
		}
	}
	return c, nil
}

// reservedPrefix begins the names of Kubernetes' own users and groups.
const reservedPrefix = "system:"

// emailVerified accepts the boolean true, and the string "true" some providers send.
func emailVerified(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case string:
		return t == "true"
	}
	return false
}

func stringList(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// claimHas reports whether a claim value equals want: a string, a bool ("true"), or a list
// containing it.
func claimHas(v any, want string) bool {
	switch t := v.(type) {
	case bool:
		return fmt.Sprint(t) == want
	case string:
		return t == want
	default:
		return slices.Contains(stringList(v), want)
	}
}

// rejectReason says in one sentence why go-oidc refused a token, without echoing its content.
func rejectReason(err error) string {
	var exp *oidc.TokenExpiredError
	if errors.As(err, &exp) {
		return fmt.Sprintf("token expired at %s: get a new token", exp.Expiry.UTC().Format(time.RFC3339))
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "issued by a different provider"):
		return "token was issued by another issuer than the one this service trusts: get a token from the configured OIDC issuer"
	case strings.Contains(msg, "expected audience"):
		return "token is not issued for this service's client id (audience): get a token for it"
	case strings.Contains(msg, "malformed jwt"), strings.Contains(msg, "not signed"), strings.Contains(msg, "multiple signatures"):
		return "token is not a JWT signed with an algorithm the issuer announces (alg none is never accepted)"
	case strings.Contains(msg, "signature"):
		return "token signature does not verify against the issuer's published keys"
	case strings.Contains(msg, "nbf"):
		return "token is not valid yet (nbf is in the future): check the clocks"
	}
	return "token rejected (expired, wrong audience or issuer, or bad signature)"
}

// unverifiedClaims reads a JWT's iss and exp claims without verifying them: only to word an
// error, or to shorten what a token verified by other means grants, never to grant or lengthen
// anything. Zero values when token is not a JWT or a claim is malformed.
func unverifiedClaims(token string) (iss string, exp time.Time) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(parts[1]) > 64<<10 {
		return "", time.Time{}
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", time.Time{}
	}
	var c struct {
		Iss any `json:"iss"`
		Exp any `json:"exp"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return "", time.Time{}
	}
	if s, ok := c.Iss.(string); ok && len(s) <= 256 {
		iss = s
	}
	// A NumericDate: seconds since the epoch, possibly fractional (RFC 7519, section 2).
	if f, ok := c.Exp.(float64); ok && f > 0 && f < 1<<40 {
		exp = time.Unix(int64(f), 0)
	}
	return iss, exp
}
