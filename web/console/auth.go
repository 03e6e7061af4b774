package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"geohub/app"
)

// safeBack keeps a post-login destination inside the console: an absolute
// or scheme-relative URL would make the login page an open redirect.
func safeBack(v string) string {
	// Browsers drop tabs and newlines from URLs, so "/\t/evil" becomes
	// "//evil": any control character or backslash sends the operator home.
	if !strings.HasPrefix(v, "/") || strings.HasPrefix(v, "//") || strings.HasPrefix(v, "/login") ||
		strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) >= 0 {
		return "/"
	}
	return v
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.showLogin(w, r, http.StatusOK, form{Values: map[string]string{}, Errors: map[string]string{}})
}

func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, status int, f form) {
	// Before a session exists, the login form's CSRF token is a cookie the
	// form repeats (double submit): a login forced from another site fails.
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	_, https := c.TrustedProxies.Client(r)
	http.SetCookie(w, &http.Cookie{Name: loginCSRF, Value: token, Path: "/login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: https, MaxAge: 3600})
	back := safeBack(r.FormValue("volta"))
	aviso := ""
	if _, err := r.Cookie(sessionCookie); err == nil && r.Method == http.MethodGet && r.URL.Query().Has("volta") {
		aviso = "Sua sessão expirou. Entre de novo para continuar."
	}
	c.render(w, r, status, loginPage(page{Title: "Entrar", Insecure: c.Insecure}, f, token, back, aviso))
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	ck, err := r.Cookie(loginCSRF)
	// Two empty values are equal: without the emptiness check, a post that
	// sets the cookie blank (a sibling subdomain can) skips the check.
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		c.forbidden(w, r, nil, "O formulário de entrada expirou ou não veio desta página. Recarregue a página de entrada e tente de novo.")
		return
	}
	f := newForm(r, "login")
	client, https := c.TrustedProxies.Client(r)
	secret, _, err := c.Sessions.Login(r.Context(), strings.TrimSpace(r.PostFormValue("login")), r.PostFormValue("senha"), client)
	if err != nil {
		status := app.ErrorCode(err).HTTPStatus()
		switch app.ErrorCode(err) {
		case app.EUnauthorized, app.ERateLimited:
			f.Error = err.(*app.Error).Message
			retryAfter(w, err)
		default:
			c.Fail(w, r, err)
			return
		}
		c.showLogin(w, r, status, f)
		return
	}
	// A new login replaces the session this browser held, if any; its end
	// is recorded from this address.
	if old, err := r.Cookie(sessionCookie); err == nil && old.Value != "" {
		if err := c.Sessions.Logout(app.WithActor(r.Context(), app.Actor{Endereco: client}), old.Value); err != nil {
			c.Logger.Warn("end the previous session", "err", err)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: secret, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: https})
	http.SetCookie(w, &http.Cookie{Name: loginCSRF, Path: "/login", MaxAge: -1})
	http.Redirect(w, r, safeBack(r.PostFormValue("volta")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if err := c.Sessions.Logout(r.Context(), sessionOf(r).secret); err != nil {
		c.Fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (c *Console) passwordPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, passwordPage(c.page(r, "Trocar senha", ""), newForm(r)))
}

func (c *Console) changePassword(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	f := newForm(r, "atual", "nova", "confirma")
	if r.PostFormValue("nova") != r.PostFormValue("confirma") {
		f.Errors["confirma"] = "as senhas não conferem"
		// The current password is not tried: that would spend one of
		// the login attempts on a form that cannot succeed.
		if err := app.CheckPassword("/nova", r.PostFormValue("nova")); err != nil {
			f.take(err)
		}
		c.render(w, r, http.StatusUnprocessableEntity, passwordPage(c.page(r, "Trocar senha", ""), f))
		return
	}
	err := c.Sessions.ChangePassword(r.Context(), s.op, s.secret, r.PostFormValue("atual"), r.PostFormValue("nova"))
	if err != nil {
		if app.ErrorCode(err) != app.EInvalid {
			c.Fail(w, r, err)
			return
		}
		f.take(err)
		c.render(w, r, http.StatusUnprocessableEntity, passwordPage(c.page(r, "Trocar senha", ""), f))
		return
	}
	c.redirect(w, r, "/", "Senha trocada. Suas outras sessões foram encerradas.")
}
