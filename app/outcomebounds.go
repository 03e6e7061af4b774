package app

import "unicode/utf8"

// OutcomeVersao is the version of integracao:comando-* that commands
// publish: the one whose strings have a maxLength (app/tipos). 1.0.0 stays
// registered, unchanged, for the outcomes already in the log.
const OutcomeVersao = "1.1.0"

// The maxLength and maxItems of OutcomeVersao. An outcome's route and
// refusal carry what the request brought (a path, a field name, an id in
// a message), so the outcome is cut to them: one the schema refused would
// answer the command 503 and record nothing.
const (
	maxOutcomeRota     = 2048
	maxOutcomeErro     = 2000
	maxOutcomeDetalhes = 100
	maxOutcomeCaminho  = 1024
	maxOutcomeMensagem = 1000
)

// bound cuts the outcome's free strings and its list of findings to the
// schema's bounds.
func (o *outcomePayload) bound() {
	o.Comando.Rota = clip(o.Comando.Rota, maxOutcomeRota)
	if m := o.Motivo; m != nil {
		m.Erro = clip(m.Erro, maxOutcomeErro)
		if len(m.Detalhes) == 0 {
			return
		}
		// A copy: the findings are the refusing error's.
		kept := make([]Detail, min(len(m.Detalhes), maxOutcomeDetalhes))
		for i := range kept {
			d := m.Detalhes[i]
			kept[i] = Detail{Caminho: clip(d.Caminho, maxOutcomeCaminho), Mensagem: clip(d.Mensagem, maxOutcomeMensagem)}
		}
		m.Detalhes = kept
	}
}

// clip keeps at most n characters of s (JSON Schema counts characters),
// the last an ellipsis when it cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	cut := 0
	for range n - 1 {
		_, size := utf8.DecodeRuneInString(s[cut:])
		cut += size
	}
	return s[:cut] + "…"
}
