package ui

import (
	"net/http"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/session"
)

// loginCookieName is the pre-session cookie that ties a login form to the browser that opened
// it: login CSRF.
func (u *UI) loginCookieName() string {
	if u.o.InsecureCookie {
		return "nogoo9-login"
	}
	return "__Host-nogoo9-login"
}

// ssoCookieName is the pre-session cookie that holds a single sign-on in progress (the sealed
// pendingLogin). It is not the login form's: when they were one cookie, opening the login page
// (in another tab, or going back) while the provider's form was open replaced the login in
// progress, and the provider's return was refused.
func (u *UI) ssoCookieName() string {
	if u.o.InsecureCookie {
		return "nogoo9-sso"
	}
	return "__Host-nogoo9-sso"
}

// loginCookie sets the login form's cookie (SameSite Strict: the form posts from this site).
func (u *UI) loginCookie(w http.ResponseWriter, value string, maxAge int) {
	u.preSessionCookie(w, u.loginCookieName(), value, http.SameSiteStrictMode, maxAge)
}

// ssoCookie sets the single sign-on's cookie (SameSite Lax: the return from the provider is a
// cross-site navigation).
func (u *UI) ssoCookie(w http.ResponseWriter, value string, maxAge int) {
	u.preSessionCookie(w, u.ssoCookieName(), value, http.SameSiteLaxMode, maxAge)
}

func (u *UI) preSessionCookie(w http.ResponseWriter, name, value string, sameSite http.SameSite, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: !u.o.InsecureCookie, SameSite: sameSite,
	})
}

type loginData struct {
	Next, Error, LoginCSRF string
	DevLogin, OIDC         bool
	OIDCName               string
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	next := safeNext(r.URL.Query().Get("next"))
	if _, _, ok := u.sessionOf(r); ok {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	u.renderLogin(w, r, http.StatusOK, next, loginNotices[r.URL.Query().Get("notice")])
}

// loginNotices are the login page's only messages from its URL, by code: a link can name a code,
// never the words nogoo9's own page shows ("nogoo9 has moved: log in at ...").
var loginNotices = map[string]string{
	"loggedout": "You are logged out.",
}

func (u *UI) renderLogin(w http.ResponseWriter, r *http.Request, status int, next, msg string) {
	token := session.RandomToken()
	u.loginCookie(w, token, 600)
	d := loginData{Next: next, Error: msg, LoginCSRF: token, DevLogin: u.o.DevLogin, OIDC: u.o.OIDC != nil}
	if u.o.OIDC != nil {
		d.OIDCName = u.o.OIDC.DisplayName
	}
	u.render(w, r, status, "login", page{Title: "Log in", Data: d})
}

// devLogin is the development login: the form posts a bearer token, verified by the same
// authenticator as the API; on success the browser gets a session cookie, never the token.
func (u *UI) devLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "400 Bad Request: the login form could not be read; reload the login page", http.StatusBadRequest)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if !u.o.DevLogin {
		u.renderLogin(w, r, http.StatusNotFound, next, "The development login is turned off on this server; use the single sign-on button.")
		return
	}
	c, err := r.Cookie(u.loginCookieName())
	if err != nil || c.Value == "" || !(&session.Session{CSRF: c.Value}).ValidCSRF(r.PostForm.Get("login_csrf")) {
		u.renderLogin(w, r, http.StatusForbidden, next, "The login form had expired; enter the token again.")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		u.renderLogin(w, r, http.StatusBadRequest, next, "Token is empty: paste a bearer token (for the demo, one that make demo printed).")
		return
	}
	// The client's address goes with the token: the Guard limits failed checks per client.
	caller, err := u.o.Auth.VerifyToken(auth.WithClient(r.Context(), r), token)
	if err != nil {
		ctrl.LoggerFrom(r.Context()).WithName("ui").Info("login refused", "remote", r.RemoteAddr, "reason", err.Error())
		status, msg := auth.LoginRefused(w, err)
		u.renderLogin(w, r, status, next, msg)
		return
	}
	u.startSession(w, r, caller, token)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// startSession creates the server-side session of c, who token verified as, and sets its cookie.
// The token stays in the server's memory (the session store), for the rechecks (liveSession).
func (u *UI) startSession(w http.ResponseWriter, r *http.Request, c *auth.Caller, token string) {
	id, sess := u.o.Sessions.Create(c, token)
	u.loginCookie(w, "", -1)
	http.SetCookie(w, &http.Cookie{
		Name: u.cookieName(), Value: id, Path: "/", Expires: sess.Expires,
		MaxAge: int(time.Until(sess.Expires).Seconds()), HttpOnly: true, Secure: !u.o.InsecureCookie, SameSite: http.SameSiteStrictMode,
	})
	ctrl.LoggerFrom(r.Context()).WithName("ui").Info("session started", "user", c.Subject, "admin", c.IsAdmin, "expires", sess.Expires)
}

// logout ends the session on the server (its id is worthless from now on) and clears the cookie.
func (u *UI) logout(w http.ResponseWriter, r *request) {
	u.o.Sessions.Delete(r.sessID)
	u.clearSessionCookie(w)
	ctrl.LoggerFrom(r.Context()).WithName("ui").Info("session ended", "user", r.sess.Caller.Subject)
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", "/login")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r.Request, "/login?notice=loggedout", http.StatusSeeOther)
}
