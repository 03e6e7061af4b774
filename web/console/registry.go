package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"geohub/app"
)

// typeRow is one event type of the registry list with all its versions.
type typeRow struct {
	Tipo     string
	Versions []app.TypeVersion // oldest first
}

func (t typeRow) Latest() app.TypeVersion { return t.Versions[len(t.Versions)-1] }

// groupTypes folds the registry's versions, ordered by tipo then versao,
// into one row per type.
func groupTypes(all []app.TypeVersion) []typeRow {
	var rows []typeRow
	for _, tv := range all {
		if n := len(rows); n > 0 && rows[n-1].Tipo == tv.Tipo {
			rows[n-1].Versions = append(rows[n-1].Versions, tv)
			continue
		}
		rows = append(rows, typeRow{Tipo: tv.Tipo, Versions: []app.TypeVersion{tv}})
	}
	return rows
}

// audiencias explains each audience in the words of the routing rules
// (SPEC 6.2).
var audiencias = map[string]string{
	app.AudienciaOriginador:  "o integrador que originou o agregado",
	app.AudienciaTodos:       "todos os integradores ativos",
	app.AudienciaSolicitante: "só o integrador que enviou o comando",
}

func typeURL(tipo string) string { return "/registro/" + url.PathEscape(tipo) }

func (c *Console) registry(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, registryPage(c.page(r, "Registro de tipos", "registro"), groupTypes(c.Registry.List())))
}

func (c *Console) registryType(w http.ResponseWriter, r *http.Request) {
	tipo := r.PathValue("tipo")
	versions, err := c.Registry.Versions(tipo)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	// Newest first: it is the one publishers should be using.
	slices.Reverse(versions)
	builtin := func(versao string) bool { return c.Registry.Builtin(tipo, versao) }
	c.render(w, r, http.StatusOK, registryTypePage(c.page(r, tipo, "registro"), tipo, versions, builtin))
}

func (c *Console) setTypeStatus(w http.ResponseWriter, r *http.Request) {
	tipo, versao, status := r.PathValue("tipo"), r.PathValue("versao"), r.PostFormValue("status")
	if _, err := c.Registry.SetStatus(r.Context(), tipo, versao, status); err != nil {
		c.Fail(w, r, err)
		return
	}
	msg := tipo + "@" + versao + " reativada: volta a aceitar publicações."
	if status == app.StatusDeprecado {
		msg = tipo + "@" + versao + " descontinuada: novas publicações nessa versão são recusadas; o que já está no log não muda."
	}
	c.redirect(w, r, typeURL(tipo), msg)
}

// typeStatusLabel is a type version's status in the console's words, in
// agreement with "versão"; the API keeps its wire value (deprecado).
func typeStatusLabel(status string) string {
	switch status {
	case app.StatusAtivo:
		return "ativa"
	case app.StatusDeprecado:
		return "descontinuada"
	}
	return status
}

// schemaURL is the console's link to a version's raw schema.
func schemaURL(tipo, versao string) string {
	return typeURL(tipo) + "/" + url.PathEscape(versao) + "/schema"
}

// pointerText shows a redaction pointer; the root is an empty string,
// which would read as nothing.
func pointerText(p string) string {
	if p == "" {
		return `"" (o payload inteiro)`
	}
	return p
}

func versionsText(n int) string {
	if n == 1 {
		return "1 versão."
	}
	return strconv.Itoa(n) + " versões, da mais nova para a mais antiga."
}
