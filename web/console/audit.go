package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"geohub/app"
)

// auditFields are the /auditoria filters, in display order.
var auditFields = []string{"quem", "acao", "alvo", "inicio", "fim", "sem_cads"}

// auditLabels say each action in words; the code stays in the title.
var auditLabels = map[string]string{
	app.AcaoLogin:                       "Entrou no console",
	app.AcaoLoginFalhou:                 "Entrada recusada",
	app.AcaoLogout:                      "Saiu do console",
	app.AcaoOperadorCriar:               "Criou operador",
	app.AcaoOperadorAtivar:              "Reativou operador",
	app.AcaoOperadorDesativar:           "Desativou operador",
	app.AcaoOperadorPapelAlterar:        "Mudou o papel de operador",
	app.AcaoOperadorSenhaRedefinir:      "Redefiniu a senha de operador",
	app.AcaoOperadorSenhaTrocar:         "Trocou a própria senha",
	app.AcaoTokenCriar:                  "Criou token de API",
	app.AcaoTokenRevogar:                "Revogou token de API",
	app.AcaoIntegradorCriar:             "Cadastrou integrador",
	app.AcaoIntegradorEditar:            "Editou integrador",
	app.AcaoIntegradorAtivar:            "Reativou integrador",
	app.AcaoIntegradorDesativar:         "Desativou integrador",
	app.AcaoIntegradorSegredoRotacionar: "Trocou o segredo",
	app.AcaoIntegradorAPIKeyRotacionar:  "Trocou a chave de API",
	app.AcaoIntegradorVerificar:         "Verificou integrador",
	app.AcaoIntegradorTentarAgora:       "Tentar agora (integrador)",
	app.AcaoRegistroRegistrar:           "Registrou tipo",
	app.AcaoRegistroDescontinuar:        "Descontinuou versão",
	app.AcaoRegistroReativar:            "Reativou versão",
	app.AcaoEntregaReenviar:             "Reenviou entrega",
	app.AcaoEntregaReenviarLote:         "Reenviou entregas com falha",
	app.AcaoEntregaTentarAgora:          "Tentar agora (entrega)",
	app.AcaoDLQReprocessar:              "Reprocessou falhas internas",
	app.AcaoOcorrenciaRegistrar:         "Registrou ocorrência",
	app.AcaoOcorrenciaDespachar:         "Despachou recurso",
	app.AcaoOcorrenciaDespachoStatus:    "Mudou a situação de despacho",
	app.AcaoOcorrenciaStatus:            "Mudou a situação de ocorrência",
	app.AcaoComando:                     "Enviou comando",
	app.AcaoAcessoNegado:                "Acesso negado",
}

func auditLabel(acao string) string {
	if l := auditLabels[acao]; l != "" {
		return l
	}
	return acao
}

var auditResults = map[string]string{app.AuditOK: "ok", app.AuditRecusado: "recusado", app.AuditFalhou: "falhou"}

type auditView struct {
	Q    listQuery
	Rows []app.AuditEntry // newest first
	// Older is the next page (older rows), "" at the end; First the first
	// page with the same filters, shown on a page past it.
	Older, First string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	l := parseList(r, auditFields...)
	f := app.AuditFilter{Acao: l.V("acao"), Alvo: l.V("alvo"), Limite: l.Limite, SemIntegradores: l.V("sem_cads") != ""}
	if f.Acao != "" && !slices.Contains(app.AuditActions, f.Acao) {
		l.Errors["acao"] = "escolha uma ação da lista"
	}
	for _, k := range []string{"inicio", "fim"} {
		if v := l.V(k); v != "" {
			t, ok := parsePeriod(v)
			if k == "fim" {
				t, ok = periodEnd(v) // [início, fim): the minute typed is in
			}
			switch {
			case !ok:
				l.Errors[k] = periodExample
			case k == "inicio":
				f.Inicio = t
			default:
				f.Fim = t
			}
		}
	}
	if v := r.URL.Query().Get("antes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			l.Error = "Cursor de página inválido: volte à primeira página."
		} else {
			f.Antes = n
		}
	}
	p := c.page(r, "Auditoria", "auditoria")
	v := auditView{Q: l}
	if l.invalid() {
		c.render(w, r, http.StatusUnprocessableEntity, auditPage(p, v))
		return
	}
	pg, err := c.Audit.ListFor(r.Context(), sessionOf(r).op.Papel, l.V("quem"), f)
	if err != nil {
		if app.ErrorCode(err) != app.EInvalid {
			c.Fail(w, r, err)
			return
		}
		v.Q.take(err)
		c.render(w, r, http.StatusUnprocessableEntity, auditPage(p, v))
		return
	}
	v.Rows = pg.Linhas
	if pg.Proximo != "" {
		v.Older = auditLink(l, pg.Proximo)
	}
	if f.Antes > 0 {
		v.First = auditLink(l, "")
	}
	c.render(w, r, http.StatusOK, auditPage(p, v))
}

// auditLink is /auditoria with the query's filters and page size, from
// cursor antes ("" for the newest).
func auditLink(l listQuery, antes string) string {
	q := url.Values{}
	for k, vs := range l.Filters {
		q[k] = vs
	}
	if l.Limite != defaultPageSize {
		q.Set("limite", strconv.Itoa(l.Limite))
	}
	if antes != "" {
		q.Set("antes", antes)
	}
	if len(q) == 0 {
		return "/auditoria"
	}
	return "/auditoria?" + q.Encode()
}

// auditFilterLink is the trail filtered by one value, from its newest row.
func auditFilterLink(k, v string) string {
	return "/auditoria?" + url.Values{k: {v}}.Encode()
}

// quemText says who acted, in words.
func quemText(q app.Actor) string {
	switch q.Tipo {
	case app.ActorOperador:
		return q.Nome
	case app.ActorToken:
		return "token " + q.Nome
	case app.ActorIntegrador:
		return "integrador " + q.Nome
	case app.ActorCLI:
		return "linha de comando (" + q.Nome + ")"
	case app.ActorSistema:
		return "o próprio Geohub"
	case app.ActorAnonimo:
		return "usuário inexistente"
	}
	return q.Tipo + " " + q.Nome
}

// alvoText says what an entry is about.
func alvoText(a app.AuditTarget) string {
	name := a.Nome
	if name == "" {
		name = a.ID
	}
	if name == "" {
		return "—"
	}
	kind := map[string]string{"integrador": "integrador", "operador": "operador", "token": "token",
		"registro": "tipo", "entrega": "entrega", "colonia": "grupo de consumidores", "ocorrencia": "ocorrência", "rota": ""}[a.Tipo]
	if kind == "" {
		return name
	}
	return kind + " " + name
}

// alvoURL links a target to its page, when it has one.
func alvoURL(a app.AuditTarget) string {
	if a.ID == "" {
		return ""
	}
	switch a.Tipo {
	case "integrador":
		return "/integradores/" + url.PathEscape(a.ID)
	case "entrega":
		return "/entregas/" + url.PathEscape(a.ID)
	case "ocorrencia":
		return "/ocorrencias/" + url.PathEscape(a.ID)
	case "registro":
		if tipo, _, ok := strings.Cut(a.ID, "@"); ok {
			return typeURL(tipo)
		}
	}
	return ""
}

// fieldText shows one changed field: "de → para", or the value set.
func fieldText(f app.AuditField) string {
	switch {
	case f.De != nil && f.Para != nil:
		return f.Campo + ": " + valueText(f.De) + " → " + valueText(f.Para)
	case f.Para != nil:
		return f.Campo + ": " + valueText(f.Para)
	}
	return f.Campo
}

// valueText reads a JSON value for people: text without quotes, lists
// joined, true and false in Portuguese, times in Brasília.
func valueText(raw json.RawMessage) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return string(raw)
	}
	switch x := v.(type) {
	case nil:
		return "—"
	case bool:
		if x {
			return "sim"
		}
		return "não"
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return when(t)
		}
		if x == "" {
			return "“”"
		}
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			b, _ := json.Marshal(e)
			parts[i] = valueText(b)
		}
		if len(parts) == 0 {
			return "(nenhum)"
		}
		return strings.Join(parts, ", ")
	}
	return string(raw)
}

// labelOrPapel names a role in words; produtor (a token's) has no console label.
func labelOrPapel(p string) string {
	if l := papelLabel[p]; l != "" {
		return l
	}
	return p
}
