// Package oidcprovider is an OpenID Provider for tests, built on zitadel/oidc's OpenID-certified
// op package: discovery, JWKS, the authorization-code flow with PKCE, a login form with users
// and passwords, and a groups claim in the ID token (scope "groups"). It listens on loopback over
// plain HTTP.
package oidcprovider

import (
	"context"
	"crypto/sha256"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// User is a person who can log in.
type User struct {
	ID, Username, Password string
	Groups                 []string
}

// Config configures a Provider.
type Config struct {
	// ClientID is a public client (PKCE, no secret) with RedirectURIs.
	ClientID     string
	RedirectURIs []string
	Users        []User
}

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is its issuer URL (http://127.0.0.1:<port>).
	Issuer string
	srv    *http.Server
}

// Start listens on a free loopback port and serves the provider until Close.
func Start(c Config) (*Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	issuer := "http://" + ln.Addr().String()
	users := userStore{byID: map[string]*storage.User{}, groups: map[string][]string{}}
	for _, u := range c.Users {
		users.byID[u.ID] = &storage.User{ID: u.ID, Username: u.Username, Password: u.Password,
			FirstName: u.Username, LastName: "Test", Email: u.Username + "@example.test", EmailVerified: true, PreferredLanguage: language.English}
		users.groups[u.ID] = u.Groups
	}
	st := &groupsStorage{
		Storage: storage.NewStorageWithClients(users, map[string]*storage.Client{c.ClientID: storage.NativeClient(c.ClientID, c.RedirectURIs...)}),
		groups:  users.groups,
	}
	key := sha256.Sum256([]byte(issuer))
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: key, CodeMethodS256: true, AuthMethodPost: true,
		DefaultLogoutRedirectURI: "/", SupportedUILocales: []language.Tag{language.English},
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("oidcprovider: %w", err)
	}
	mux := http.NewServeMux()
	interceptor := op.NewIssuerInterceptor(provider.IssuerFromRequest)
	mux.Handle("/login/username", interceptor.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		login(w, r, st, op.AuthCallbackURL(provider))
	}))
	mux.Handle("/", provider)
	p := &Provider{Issuer: issuer, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the provider.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test OpenID Provider</title></head><body>
<h1>Test OpenID Provider</h1>{{if .Error}}<p id="op-error">{{.Error}}</p>{{end}}
<form method="post" action="/login/username"><input type="hidden" name="id" value="{{.ID}}">
<label>Username <input id="op-username" name="username"></label>
<label>Password <input id="op-password" name="password" type="password"></label>
<button id="op-submit" type="submit">Sign in</button></form></body></html>`))

func login(w http.ResponseWriter, r *http.Request, st *groupsStorage, callback func(context.Context, string) string) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Form.Get("authRequestID")
	if r.Method == http.MethodPost {
		id = r.PostForm.Get("id")
		if err := st.CheckUsernamePassword(r.PostForm.Get("username"), r.PostForm.Get("password"), id); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			_ = loginPage.Execute(w, map[string]string{"ID": id, "Error": "wrong username or password"})
			return
		}
		http.Redirect(w, r, callback(r.Context(), id), http.StatusFound)
		return
	}
	_ = loginPage.Execute(w, map[string]string{"ID": id})
}

// groupsStorage adds the groups claim to ID tokens requested with scope "groups".
type groupsStorage struct {
	*storage.Storage
	groups map[string][]string
}

func (s *groupsStorage) SetUserinfoFromRequest(ctx context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, ui, req, scopes); err != nil {
		return err
	}
	if slices.Contains(scopes, "groups") {
		ui.AppendClaims("groups", s.groups[req.GetSubject()])
	}
	return nil
}

type userStore struct {
	byID   map[string]*storage.User
	groups map[string][]string
}

func (u userStore) GetUserByID(id string) *storage.User { return u.byID[id] }
func (u userStore) GetUserByUsername(name string) *storage.User {
	for _, x := range u.byID {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (u userStore) ExampleClientID() string { return "" }

// GetClientByClientID returns the client with the groups scope allowed.
func (s *groupsStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return groupsClient{c}, nil
}

type groupsClient struct{ op.Client }

func (c groupsClient) IsScopeAllowed(scope string) bool {
	return scope == "groups" || c.Client.IsScopeAllowed(scope)
}
