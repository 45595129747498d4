package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"github.com/go-jose/go-jose/v4"
)

// maxIssuerBody bounds every answer read from the OIDC issuer (discovery document, JWKS): an
// answer that is longer is an error, not a truncated document.
const maxIssuerBody = 1 << 20

// maxErrText bounds the text of an error that may carry an issuer's answer or a token's content:
// such errors are logged with every refusal.
const maxErrText = 512

// keySet is the issuer's JSON Web Key Set, an oidc.KeySet like go-oidc's RemoteKeySet (keys
// fetched on demand, fetched again when no key held verifies a token; concurrent fetches share
// one download), except that a check can ask it not to fetch (see keyProbe): a Guard limits only
// the checks that cost a download.
type keySet struct {
	url    string
	client *http.Client

	mu     sync.Mutex
	keys   []jose.JSONWebKey
	flight *keyFetch
}

type keyFetch struct {
	done chan struct{}
	keys []jose.JSONWebKey
	err  error
}

type probeKey struct{}

// keyProbe, in a check's context, tells the key set not to fetch (localOnly) and learns what the
// check needed: go-oidc wraps the key set's errors with %v, so they cannot be inspected.
type keyProbe struct {
	localOnly bool
	needFetch bool  // no key held verifies the signature (localOnly: nothing was fetched)
	fetchErr  error // the keys could not be fetched
}

// signingAlgs are the algorithms go-oidc supports; the verifier has already refused any other,
// and any the issuer does not announce, before it asks the key set.
var signingAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA}

// VerifySignature implements oidc.KeySet.
func (s *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("not exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	s.mu.Lock()
	held := s.keys
	s.mu.Unlock()
	if payload, ok := verifyWith(jws, kid, held); ok {
		return payload, nil
	}
	probe, _ := ctx.Value(probeKey{}).(*keyProbe)
	if probe != nil {
		probe.needFetch = true
		if probe.localOnly {
			return nil, errors.New("no signing key held verifies the signature; the issuer's keys must be fetched")
		}
	}
	// The key may be new (key rotation): fetch the keys again, as the OIDC spec recommends.
	keys, err := s.fetch(ctx)
	if err != nil {
		if probe != nil {
			probe.fetchErr = err
		}
		return nil, err
	}
	if payload, ok := verifyWith(jws, kid, keys); ok {
		return payload, nil
	}
	return nil, errors.New("failed to verify id token signature")
}

func verifyWith(jws *jose.JSONWebSignature, kid string, keys []jose.JSONWebKey) ([]byte, bool) {
	for i := range keys {
		if kid == "" || keys[i].KeyID == kid {
			if payload, err := jws.Verify(&keys[i]); err == nil {
				return payload, true
			}
		}
	}
	return nil, false
}

// fetch downloads the keys, or waits for the download in flight.
func (s *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	s.mu.Lock()
	f := s.flight
	if f == nil {
		f = &keyFetch{done: make(chan struct{})}
		s.flight = f
		// Not bound to ctx: the request that started it may end, others wait for it too (the
		// client's timeout bounds it).
		go func() {
			keys, err := s.download()
			s.mu.Lock()
			if err == nil {
				s.keys = keys
			}
			s.flight = nil
			s.mu.Unlock()
			f.keys, f.err = keys, err
			close(f.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-f.done:
		return f.keys, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *keySet) download() ([]jose.JSONWebKey, error) {
	req, err := http.NewRequest(http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks_uri %q: %w", s.url, err)
	}
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body) // bounded by the client's transport
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s: %s", s.url, resp.Status, excerpt(body))
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: not a JSON Web Key Set (%v): %s", s.url, err, excerpt(body))
	}
	return keys, nil
}

// parseJWKS reads a JWKS as go-oidc does: keys of an algorithm or type it does not support are
// skipped, not fatal.
func parseJWKS(body []byte) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, err
	}
	var keys []jose.JSONWebKey
	for _, k := range raw.Keys {
		var meta struct {
			Alg string `json:"alg"`
		}
		if err := json.Unmarshal(k, &meta); err != nil {
			return nil, err
		}
		if meta.Alg != "" && !supportedAlg(meta.Alg) {
			continue
		}
		var jwk jose.JSONWebKey
		if err := json.Unmarshal(k, &jwk); err != nil {
			if errors.Is(err, jose.ErrUnsupportedKeyType) {
				continue
			}
			return nil, err
		}
		keys = append(keys, jwk)
	}
	return keys, nil
}

func supportedAlg(alg string) bool {
	for _, a := range signingAlgs {
		if string(a) == alg {
			return true
		}
	}
	return false
}

// excerpt quotes the beginning of an issuer's answer for an error message.
func excerpt(b []byte) string {
	const n = 200
	if len(b) <= n {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q... (%d bytes)", b[:n], len(b))
}

// shortErr bounds the text of err (see maxErrText), keeping it for errors.As and errors.Is.
func shortErr(err error) error {
	if err == nil || len(err.Error()) <= maxErrText {
		return err
	}
	return &truncatedError{msg: BoundText(err.Error()), err: err}
}

// BoundText is s, text from a peer (an identity provider, a callback's URL) about to be logged or
// wrapped, cut to 512 bytes (valid UTF-8), saying how long it was.
func BoundText(s string) string {
	if len(s) <= maxErrText {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrText], "") + fmt.Sprintf("... (%d bytes)", len(s))
}

type truncatedError struct {
	msg string
	err error
}

func (e *truncatedError) Error() string { return e.msg }
func (e *truncatedError) Unwrap() error { return e.err }

// boundedTransport caps the body of every answer at max bytes: reading past it is an error.
type boundedTransport struct {
	base http.RoundTripper
	max  int64
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	tooLong := fmt.Errorf("the answer of %s is longer than %d bytes: check that the OIDC issuer URL is right (an issuer's discovery document and keys are far smaller)", req.URL.Redacted(), t.max)
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, tooLong
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: t.max, tooLong: tooLong}
	return resp, nil
}

type boundedBody struct {
	io.ReadCloser
	left    int64
	tooLong error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, b.tooLong
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// plainHTTPAllowed reports whether u may be read over plain http: only on a loopback host
// (127.0.0.0/8, ::1, localhost), where nobody else is on the path.
func plainHTTPAllowed(u *url.URL) bool { return LoopbackHost(u.Hostname()) }

// LoopbackHost reports whether host (no port) names the local machine: localhost, 127.0.0.0/8,
// ::1 (IPv4-mapped too). Only there may an identity provider's URLs use plain http.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// checkIssuerURL refuses what anyone on the network path could answer in the issuer's place: a URL
// other than https, except http on a loopback host. what names the URL in the error.
func checkIssuerURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%s=%q is not an http(s) URL: give the issuer exactly as its tokens name it, e.g. https://login.example.com/realms/dev", what, raw)
	}
	if u.Scheme == "http" && !plainHTTPAllowed(u) {
		return fmt.Errorf("%s=%q uses plain http on a host that is not loopback: anyone on the network path could serve signing keys; use https (with --oidc-ca-file for a private CA), or http only on 127.0.0.1, ::1 or localhost", what, raw)
	}
	return nil
}

// refuseDowngrade is the issuer client's CheckRedirect: no redirect to plain http off loopback.
func refuseDowngrade(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Scheme != "https" && !(req.URL.Scheme == "http" && plainHTTPAllowed(req.URL)) {
		return fmt.Errorf("the OIDC issuer redirected %s to %s, which is not https: refused (anyone on the network path could answer it)", via[0].URL.Redacted(), req.URL.Redacted())
	}
	return nil
}
