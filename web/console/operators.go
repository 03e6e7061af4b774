package console

import (
	"net/http"
	"slices"
	"strings"

	"geohub/app"
)

// papeis are the roles an operator may get, in the order of the select.
var papeis = []app.Papel{app.PapelLeitor, app.PapelOperador, app.PapelAdmin}

// papelHint says what each role may do, beside the select.
var papelHint = map[app.Papel]string{
	app.PapelLeitor:   "só consulta",
	app.PapelOperador: "consulta, reenvia entregas e reprocessa as falhas internas",
	app.PapelAdmin:    "tudo, inclusive integradores, registro e operadores",
}

func (c *Console) operatorsPage(w http.ResponseWriter, r *http.Request) {
	f := form{Values: map[string]string{"papel": string(app.PapelLeitor)}, Errors: map[string]string{}}
	c.showOperators(w, r, http.StatusOK, f)
}

func (c *Console) showOperators(w http.ResponseWriter, r *http.Request, status int, f form) {
	ops, err := c.Sessions.Operators(r.Context())
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, status, operatorsPage(c.page(r, "Operadores", "operadores"), ops, f))
}

func (c *Console) createOperator(w http.ResponseWriter, r *http.Request) {
	// Passwords are never part of the form's values: an invalid form comes
	// back with them empty, not echoed into the page.
	f := newForm(r, "login", "papel")
	f.Values["login"] = strings.TrimSpace(f.V("login"))
	if r.PostFormValue("senha") != r.PostFormValue("confirma") {
		f.Errors["confirma"] = "as senhas não conferem"
	}
	if len(f.Errors) == 0 {
		o, err := c.Sessions.CreateOperator(r.Context(), sessionOf(r).op.ID, f.V("login"), r.PostFormValue("senha"), app.Papel(f.V("papel")))
		if err == nil {
			c.redirect(w, r, "/operadores", "Conta "+o.Login+" criada com o papel "+papelLabel[string(o.Papel)]+". Entregue a senha por um canal seguro; ela pode ser trocada em “Trocar senha”.")
			return
		}
		if code := app.ErrorCode(err); code != app.EInvalid && code != app.EConflict {
			c.Fail(w, r, err)
			return
		}
		f.take(err)
	}
	if f.Error == "" {
		f.Error = "Confira os campos marcados."
	}
	c.showOperators(w, r, http.StatusUnprocessableEntity, f)
}

// setOperatorActive is the one-click enable/disable of an account.
func (c *Console) setOperatorActive(w http.ResponseWriter, r *http.Request) {
	var ativo bool
	switch r.PostFormValue("ativo") {
	case "sim":
		ativo = true
	case "nao":
	default:
		c.Fail(w, r, app.Errorf(app.EInvalid, "o campo ativo deve ser sim ou nao"))
		return
	}
	if err := c.Sessions.SetActive(r.Context(), sessionOf(r).op, r.PathValue("id"), ativo); err != nil {
		c.Fail(w, r, err)
		return
	}
	msg := "Conta reativada: a pessoa pode entrar de novo."
	if !ativo {
		msg = "Conta desativada: as sessões dela foram encerradas e a entrada é recusada até que seja reativada."
	}
	c.redirect(w, r, "/operadores", msg)
}

// setOperatorRole moves another account to another role. The change shows
// on the person's next page: sessions read the role on every request.
func (c *Console) setOperatorRole(w http.ResponseWriter, r *http.Request) {
	papel := app.Papel(r.PostFormValue("papel"))
	if err := c.Sessions.SetRole(r.Context(), sessionOf(r).op, r.PathValue("id"), papel); err != nil {
		c.Fail(w, r, err)
		return
	}
	c.redirect(w, r, "/operadores", "Papel alterado para "+papelLabel[string(papel)]+": vale a partir da próxima página que a pessoa abrir.")
}

// resetOperatorPassword gives another account a new password, shown once.
// Not one's own: that goes through /conta/senha, which asks for the current
// password, so a session left open cannot lock its owner out.
func (c *Console) resetOperatorPassword(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == sessionOf(r).op.ID {
		c.Fail(w, r, app.Errorf(app.EConflict, "para a sua própria senha use “Trocar senha”, que pede a senha atual"))
		return
	}
	ops, err := c.Sessions.Operators(r.Context())
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	i := slices.IndexFunc(ops, func(o app.Operator) bool { return o.ID == id })
	if i < 0 {
		c.Fail(w, r, app.Errorf(app.ENotFound, "operador %s não existe", id))
		return
	}
	senha, err := c.Sessions.ResetPassword(r.Context(), sessionOf(r).op.ID, ops[i])
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, passwordResetPage(c.page(r, "Nova senha de "+ops[i].Login, "operadores"), ops[i], senha))
}
