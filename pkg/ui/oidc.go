package ui

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/session"
)

// OIDCConfig configures the OpenID Connect login of the UI.
type OIDCConfig struct {
	// IssuerURL and ClientID are the API's (--oidc-issuer-url, --oidc-client-id): the ID token
	// the login obtains is verified by the same authenticator as the API's bearer tokens.
	IssuerURL, ClientID string
	// ClientSecret is empty for a public client (PKCE alone).
	ClientSecret string
	// RedirectURL is this UI's /login/callback as the provider knows it.
	RedirectURL string
	// Scopes are requested besides openid (e.g. profile, email, groups).
	Scopes []string
	// CAFile, when set, is a PEM bundle trusted for the provider's TLS.
	CAFile string
	// DisplayName labels the login button ("single sign-on" when empty).
	DisplayName string
	// TrustedProxies name the client the exchange limits count behind an ingress
	// (--trusted-proxy-cidrs; the authenticator's Guard reads the same flag).
	TrustedProxies auth.TrustedProxies
}

// OIDCLogin is the authorization-code flow with PKCE, state and nonce.
//
// A login in progress is held by the browser, not by nogoo9: its state, nonce, PKCE verifier,
// where to go next and its deadline travel sealed (AES-GCM, a key this process drew at start) in
// the single sign-on cookie (ssoCookieName; not the login form's). A map of logins in progress
// on the server was bounded and so could be filled by anyone requesting /login/oidc, each start
// evicting another person's login in progress.
//
// Starting a login is free for anyone and costs the provider nothing; finishing one costs a call
// to the provider's token endpoint, so code exchanges that fail are rate-limited per client
// address and overall (newExchangeGate), and each exchange is a single call (the way the client's
// credentials travel is set, never guessed).
type OIDCLogin struct {
	DisplayName string

	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
	client   *http.Client
	seal     cipher.AEAD
	gate     *auth.FailureLimiter
	trusted  auth.TrustedProxies
}

// pendingLogin is a login in progress, as sealed in the single sign-on cookie.
type pendingLogin struct {
	State    string `json:"s"`
	Verifier string `json:"v"`
	Nonce    string `json:"n"`
	Next     string `json:"x"`
	Expires  int64  `json:"e"` // Unix seconds
}

const (
	loginTTL = 10 * time.Minute
	// sealContext binds a sealed login to its purpose (GCM's additional data).
	sealContext = "nogoo9 ui oidc login v1"
	// maxLoginCookie bounds what the callback decodes (a sealed login is a few hundred bytes; next
	// is at most 2 KiB).
	maxLoginCookie = 4096
)

// NewOIDCLogin discovers the provider (one HTTP round trip).
func NewOIDCLogin(ctx context.Context, c OIDCConfig) (*OIDCLogin, error) {
	if c.RedirectURL == "" {
		return nil, errors.New("--ui-oidc-redirect-url is empty: give this UI's /login/callback URL as registered with the provider")
	}
	if u, err := url.Parse(c.RedirectURL); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("--ui-oidc-redirect-url=%q is not an http(s) URL: give e.g. https://nogoo9.example.com/login/callback", c.RedirectURL)
	}
	// The API authenticator's client for the issuer: its answers bounded, no redirect to plain
	// http off loopback, the same trust (--oidc-ca-file).
	hc, err := auth.IssuerHTTPClient(c.CAFile)
	if err != nil {
		return nil, err
	}
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, hc), c.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("discover OIDC provider %s for the UI login: %w", c.IssuerURL, err)
	}
	if provider.Endpoint().AuthURL == "" {
		return nil, fmt.Errorf("OIDC issuer %s has no authorization endpoint: the UI's single sign-on needs one (use the development login instead)", c.IssuerURL)
	}
	if provider.Endpoint().TokenURL == "" {
		return nil, fmt.Errorf("OIDC issuer %s has no token endpoint: the UI's single sign-on needs one (use the development login instead)", c.IssuerURL)
	}
	// The browser carries the login's state and PKCE challenge to the authorization endpoint, and
	// nogoo9 sends the code and its verifier to the token endpoint, which answers with the ID
	// token: the same rule as for the issuer and its keys (pkg/auth).
	for _, e := range []struct{ field, value string }{
		{"authorization_endpoint", provider.Endpoint().AuthURL}, {"token_endpoint", provider.Endpoint().TokenURL},
	} {
		if err := checkEndpoint(c.IssuerURL, e.field, e.value); err != nil {
			return nil, err
		}
	}
	name := c.DisplayName
	if name == "" {
		name = "single sign-on"
	}
	var discovered struct {
		AuthMethods []string `json:"token_endpoint_auth_methods_supported"`
	}
	_ = provider.Claims(&discovered) // absent or malformed: the default, client_secret_basic
	endpoint := provider.Endpoint()
	endpoint.AuthStyle = authStyle(c.ClientSecret, discovered.AuthMethods)
	return &OIDCLogin{
		DisplayName: name,
		oauth: oauth2.Config{
			ClientID: c.ClientID, ClientSecret: c.ClientSecret, Endpoint: endpoint,
			RedirectURL: c.RedirectURL, Scopes: append([]string{oidc.ScopeOpenID}, c.Scopes...),
		},
		verifier: provider.VerifierContext(oidc.ClientContext(context.WithoutCancel(ctx), hc), &oidc.Config{ClientID: c.ClientID}),
		client:   hc,
		seal:     newSeal(),
		gate:     newExchangeGate(time.Now),
		trusted:  c.TrustedProxies,
	}, nil
}

// checkEndpoint refuses an endpoint of the issuer's discovery document (field, value) that anyone
// on the network path could read or answer: a URL other than https, except http on a loopback
// host (127.0.0.0/8, ::1, localhost), as pkg/auth requires of the issuer URL and jwks_uri.
func checkEndpoint(issuer, field, value string) error {
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("OIDC issuer %s (--oidc-issuer-url) names %s %.300q in its discovery document, which is not an http(s) URL: fix the issuer's configuration, or turn single sign-on off (no --ui-oidc-redirect-url) and use the development login", issuer, field, value)
	}
	if u.Scheme == "http" && !auth.LoopbackHost(u.Hostname()) {
		return fmt.Errorf("OIDC issuer %s (--oidc-issuer-url) names %s %.300q in its discovery document, which uses plain http on a host that is not loopback: anyone on the network path could read the login codes or answer with tokens of their own; the issuer must publish its endpoints over https (or turn single sign-on off: no --ui-oidc-redirect-url)", issuer, field, value)
	}
	return nil
}

// authStyle is how the token request carries the client's credentials. Left unset, oauth2 guesses:
// it tries the Authorization header and, when that call fails, the form body, so every code that
// fails (any anonymous caller's made-up one) cost two calls to the provider. A public client (no
// secret: token_endpoint_auth_method "none") sends its client_id in the body; a confidential one
// uses client_secret_basic, which RFC 6749 (2.3.1) requires every server to support and OpenID
// Connect Discovery makes the default when token_endpoint_auth_methods_supported is absent, and
// client_secret_post only when the provider's discovery offers that and not basic.
func authStyle(secret string, methods []string) oauth2.AuthStyle {
	switch {
	case secret == "":
		return oauth2.AuthStyleInParams
	case len(methods) == 0 || slices.Contains(methods, "client_secret_basic"):
		return oauth2.AuthStyleInHeader
	case slices.Contains(methods, "client_secret_post"):
		return oauth2.AuthStyleInParams
	}
	// Neither (e.g. only private_key_jwt): a secret can travel no way the provider names; try the
	// one every server must support, and let the provider's answer say why it refused.
	return oauth2.AuthStyleInHeader
}

// The bounds on code exchanges that fail (a bad, reused or expired code, an ID token that does not
// verify), like the API authenticator's Guard on failed token checks: one client address may fail
// exchangeClientBurst at once, then one per 1/exchangeClientRate seconds; all clients together
// exchangeBurst, then exchangeRate per second. A global rate many times the per-client one takes
// many addresses to exhaust. Successful exchanges consume nothing.
const (
	exchangeClientRate  = 1.0 / 6
	exchangeClientBurst = 5
	exchangeRate        = 2.0
	exchangeBurst       = 30
	exchangeMaxClients  = 10000
)

// newExchangeGate admits a code exchange only while both the client's and the global bucket hold a
// token for it beyond the exchanges in flight (each may fail), so concurrent callbacks cannot
// overrun them either; a failed exchange then consumes one token of each. now is its clock.
func newExchangeGate(now func() time.Time) *auth.FailureLimiter {
	return auth.NewFailureLimiter(auth.FailureLimits{ClientFailures: exchangeClientRate, ClientBurst: exchangeClientBurst,
		Failures: exchangeRate, Burst: exchangeBurst, MaxClients: exchangeMaxClients, Now: now})
}

// newSeal returns AES-256-GCM under a fresh random key: sealed logins are good for this process
// only, like the sessions they turn into.
func newSeal() cipher.AEAD {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// sealLogin returns p sealed for the login cookie.
func (o *OIDCLogin) sealLogin(p pendingLogin) string {
	plain, _ := json.Marshal(p) // strings and an integer: never fails
	nonce := make([]byte, o.seal.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(o.seal.Seal(nonce, nonce, plain, []byte(sealContext)))
}

// openLogin returns the login sealed in cookie when it is this process's, for state, and not
// past its deadline.
func (o *OIDCLogin) openLogin(cookie, state string, now time.Time) (pendingLogin, bool) {
	if state == "" || len(cookie) > maxLoginCookie {
		return pendingLogin{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(cookie)
	if err != nil || len(raw) < o.seal.NonceSize() {
		return pendingLogin{}, false
	}
	n := o.seal.NonceSize()
	plain, err := o.seal.Open(nil, raw[:n], raw[n:], []byte(sealContext))
	var p pendingLogin
	if err != nil || json.Unmarshal(plain, &p) != nil {
		return pendingLogin{}, false
	}
	if subtle.ConstantTimeCompare([]byte(state), []byte(p.State)) != 1 || now.Unix() > p.Expires {
		return pendingLogin{}, false
	}
	return p, true
}

// oidcStart sends the browser to the provider with a fresh state, nonce and PKCE challenge. The
// state also goes into a cookie, so only the browser that started the login can finish it.
func (u *UI) oidcStart(w http.ResponseWriter, r *http.Request) {
	o := u.o.OIDC
	if o == nil {
		u.renderLogin(w, r, http.StatusNotFound, "/", "Single sign-on is not configured on this server; use the development login.")
		return
	}
	p := pendingLogin{State: session.RandomToken(), Nonce: session.RandomToken(), Verifier: oauth2.GenerateVerifier(),
		Next: safeNext(r.URL.Query().Get("next")), Expires: time.Now().Add(loginTTL).Unix()}
	u.ssoCookie(w, o.sealLogin(p), int(loginTTL.Seconds()))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, o.oauth.AuthCodeURL(p.State, oidc.Nonce(p.Nonce), oauth2.S256ChallengeOption(p.Verifier)), http.StatusFound)
}

// oidcCallback finishes the login: state (query and cookie), code exchange with the PKCE
// verifier, ID token signature, audience, expiry and nonce (go-oidc's verifier), then the API's
// own authenticator for the caller (subject and admin claims).
//
// Every answer clears the single sign-on cookie, so a browser finishes a pending login at most
// once: reloading the callback is refused before any exchange. A client that ignores Set-Cookie
// can replay the sealed login until its deadline; what bounds its exchanges is the gate, not the
// cookie. No answer may be stored (Cache-Control: no-store): each ends one person's login, with a
// session cookie or a fresh login form.
func (u *UI) oidcCallback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	o := u.o.OIDC
	if o == nil {
		http.NotFound(w, r)
		return
	}
	c, cookieErr := r.Cookie(u.ssoCookieName())
	u.ssoCookie(w, "", -1)
	log := ctrl.LoggerFrom(r.Context()).WithName("ui")
	q := r.URL.Query()
	fail := func(status int, reason, msg string) {
		log.Info("single sign-on refused", "remote", r.RemoteAddr, "reason", reason)
		u.renderLogin(w, r, status, "/", msg)
	}
	if e := q.Get("error"); e != "" {
		// The page names only a code RFC 6749 (4.1.2.1) or OpenID Connect (3.1.2.6) defines: the
		// URL is anyone's to write, and its words would show on nogoo9's own page.
		// The log names it no more: a code OAuth does not define is anyone's text, and the
		// description is bounded.
		code, logged := "an error", "(a code OAuth does not define)"
		if oauthErrors[e] {
			code, logged = e, e
		}
		fail(http.StatusUnauthorized, "provider error "+logged+": "+auth.BoundText(q.Get("error_description")), "The identity provider did not log you in ("+code+"); try again.")
		return
	}
	if cookieErr != nil {
		fail(http.StatusForbidden, "no single sign-on cookie", "This login was not started in this browser, or it took too long; start again.")
		return
	}
	p, ok := o.openLogin(c.Value, q.Get("state"), time.Now())
	if !ok {
		fail(http.StatusForbidden, "state does not match the single sign-on cookie, or the login expired", "This login was not started in this browser, or it took too long; start again.")
		return
	}
	// The exchange is the one step that costs the provider a call: it waits for the failure
	// limits, so a loop of callbacks with made-up codes cannot spend the provider's own rate limit
	// for this client and break single sign-on for everyone.
	done, retry, err := o.gate.Admit(r.Context(), auth.ClientKey(o.trusted.ClientOf(r.RemoteAddr, r.Header["X-Forwarded-For"])))
	if done == nil {
		if err != nil {
			retry = time.Second // the request ended while it waited: nobody reads this answer
		}
		secs := strconv.Itoa(int(retry.Round(time.Second)/time.Second) + 1)
		w.Header().Set("Retry-After", secs)
		fail(http.StatusTooManyRequests, "too many failed code exchanges recently", "Too many single sign-on attempts failed recently; wait "+secs+" seconds and start again.")
		return
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(r.Context(), o.client), 30*time.Second)
	defer cancel()
	raw, reason, msg := o.redeem(ctx, q.Get("code"), p)
	done(reason != "")
	if reason != "" {
		fail(http.StatusUnauthorized, reason, msg)
		return
	}
	// The API's authenticator (a Guard) limits its own failures.
	caller, err := u.o.Auth.VerifyToken(auth.WithClient(ctx, r), raw)
	if err != nil {
		fail(http.StatusUnauthorized, "authenticator: "+auth.BoundText(err.Error()), "Your identity was not accepted by nogoo9; ask an administrator.")
		return
	}
	u.startSession(w, r, caller, raw)
	// The provider's redirect made this a cross-site navigation, on which the browser withholds
	// the SameSite=Strict session cookie; a same-site hop from this page carries it.
	w.Header().Set("Refresh", "0;url="+p.Next)
	u.render(w, r, http.StatusOK, "continue", page{Title: "Logged in", Data: p.Next})
}

// redeem exchanges code for p's ID token (one call to the token endpoint) and verifies it:
// signature, issuer, audience, expiry and p's nonce. It returns the raw ID token, or why not (to
// log) and what to tell the person.
func (o *OIDCLogin) redeem(ctx context.Context, code string, p pendingLogin) (raw, reason, msg string) {
	tok, err := o.oauth.Exchange(ctx, code, oauth2.VerifierOption(p.Verifier))
	if err != nil {
		// oauth2 quotes the token endpoint's answer (up to the issuer client's 1 MiB).
		return "", "code exchange: " + auth.BoundText(err.Error()), "The identity provider refused the login code; start again."
	}
	raw, _ = tok.Extra("id_token").(string)
	if raw == "" {
		return "", "no id_token in the token response", "The identity provider sent no ID token; check that the openid scope is allowed for this client."
	}
	idt, err := o.verifier.Verify(ctx, raw)
	if err != nil {
		return "", "id token: " + auth.BoundText(err.Error()), "The identity provider's ID token was not valid; start again."
	}
	if !(&session.Session{CSRF: p.Nonce}).ValidCSRF(idt.Nonce) {
		return "", "nonce mismatch", "The ID token was not issued for this login; start again."
	}
	return raw, "", ""
}

// oauthErrors are the error codes an authorization response may carry (RFC 6749 4.1.2.1, OpenID
// Connect Core 3.1.2.6).
var oauthErrors = map[string]bool{
	"invalid_request": true, "unauthorized_client": true, "access_denied": true, "unsupported_response_type": true,
	"invalid_scope": true, "server_error": true, "temporarily_unavailable": true,
	"interaction_required": true, "login_required": true, "account_selection_required": true, "consent_required": true,
	"invalid_request_uri": true, "invalid_request_object": true, "request_not_supported": true,
	"request_uri_not_supported": true, "registration_not_supported": true,
}
