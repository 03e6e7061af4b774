package postgres_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The list queries of this slice, as the store sends them, can each be
// served by an index in the page's order: with sequential scans and sorts
// priced out (a test database is too small for the planner to choose an
// index on its own), EXPLAIN shows neither a Seq Scan nor a Sort.
func TestListQueriesHaveTheirIndexes(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	open(t, url) // migrates
	c := raw(t, url)
	ctx := t.Context()
	for _, s := range []string{"SET enable_seqscan = off", "SET enable_sort = off"} {
		if _, err := c.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	const from = `(SELECT id FROM audit_log WHERE em >= 1 ORDER BY em, id LIMIT 1)`
	const until = `(SELECT id FROM audit_log WHERE em < 9 ORDER BY em DESC, id DESC LIMIT 1)`
	for name, c1 := range map[string]struct{ q, index string }{
		"audit newest":       {`SELECT * FROM audit_log ORDER BY id DESC LIMIT 51`, "audit_log_pkey"},
		"audit next page":    {`SELECT * FROM audit_log WHERE id < 100 ORDER BY id DESC LIMIT 51`, "audit_log_pkey"},
		"audit quem_id":      {`SELECT * FROM audit_log WHERE id < 100 AND quem_id = 'x' ORDER BY id DESC LIMIT 51`, "audit_log_quem_id_idx"},
		"audit quem_nome":    {`SELECT * FROM audit_log WHERE quem_nome = 'x' ORDER BY id DESC LIMIT 51`, "audit_log_quem_nome_idx"},
		"audit acao":         {`SELECT * FROM audit_log WHERE acao = 'x' ORDER BY id DESC LIMIT 51`, "audit_log_acao_idx"},
		"audit alvo":         {`SELECT * FROM audit_log WHERE alvo_id = 'x' ORDER BY id DESC LIMIT 51`, "audit_log_alvo_idx"},
		"audit period":       {`SELECT * FROM audit_log WHERE id >= coalesce(` + from + `, 0) AND id <= coalesce(` + until + `, 0) ORDER BY id DESC LIMIT 51`, "audit_log_em_idx"},
		"audit last em":      {`SELECT em FROM audit_log ORDER BY id DESC LIMIT 1`, "audit_log_pkey"},
		"ocorrencias":        {`SELECT * FROM ocorrencia WHERE registrada_seq < 100 ORDER BY registrada_seq DESC LIMIT 100`, "ocorrencia_pkey"},
		"ocorrencias status": {`SELECT * FROM ocorrencia WHERE status = 'aberta' ORDER BY registrada_seq DESC LIMIT 100`, "ocorrencia_status_idx"},
		"ocorrencias nat":    {`SELECT * FROM ocorrencia WHERE natureza = 'x' AND registrada_seq < 9 ORDER BY registrada_seq DESC LIMIT 100`, "ocorrencia_natureza_idx"},
		"ocorrencias int":    {`SELECT * FROM ocorrencia WHERE integrador_id = 'x' ORDER BY registrada_seq DESC LIMIT 100`, "ocorrencia_integrador_idx"},
		"despachos":          {`SELECT * FROM ocorrencia_despacho WHERE ocorrencia_seq = ANY('{1,2,3}') ORDER BY ocorrencia_seq DESC, ordem DESC`, "ocorrencia_despacho_pkey"},
		"dlq open":           {`SELECT * FROM dead_letter_queue WHERE status IN ('pendente', 'retrying') AND colonia = 'c' ORDER BY sequence_number LIMIT 10`, "dead_letter_queue_open_seq_idx"},
		"dlq newest":         {`SELECT * FROM dead_letter_queue WHERE status IN ('pendente', 'retrying') ORDER BY id DESC LIMIT 100`, "dead_letter_queue_open_id_idx"},
		"dlq clamp":          {`SELECT min(sequence_number) FROM dead_letter_queue WHERE status IN ('pendente', 'retrying') AND colonia = 'c' AND tipo = 't'`, "dead_letter_queue_open_"}, // either open index: few rows,
		"session":            {`SELECT o.id FROM operator_session s JOIN operator o ON o.id = s.operador_id WHERE s.hash = 'h' AND s.expira_em > 1 AND o.ativo`, "operator_session_pkey"},
		"expired sessions":   {`DELETE FROM operator_session WHERE expira_em <= 1`, "operator_session_expira_idx"},
		"operator sessions":  {`DELETE FROM operator_session WHERE operador_id = 'x' AND hash <> 'y'`, "operator_session_operador_idx"},
		"token":              {`SELECT id FROM api_token WHERE hash = 'h' AND revogado_em IS NULL`, "api_token_hash_key"},
		"gap repair by time": {`SELECT id FROM outbox WHERE integrador_id = 'x' AND criado_em >= 1 AND criado_em <= 9 AND status IN ('entregue', 'falhou')`, "outbox_assentadas_criado_idx"},
		"events per minute":  {`SELECT timestamp / 60000, count(*) FROM event_log WHERE timestamp >= 1 AND timestamp < 9 GROUP BY 1 ORDER BY 1`, "event_log_timestamp_idx"},
	} {
		rows, err := c.Query(ctx, "EXPLAIN "+c1.q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plan := strings.Join(lines, "\n")
		// "events per minute" groups by an expression: the index gives the
		// rows in timestamp order, which is the minutes' order, but the
		// planner still sorts for the GROUP BY; the range itself must be an
		// index scan.
		// Each names the index it is written for.
		if strings.Contains(plan, "Seq Scan") || (strings.Contains(plan, "Sort") && name != "events per minute") {
			t.Errorf("%s: the plan scans or sorts:\n%s", name, plan)
		}
		if !strings.Contains(plan, " "+c1.index) {
			t.Errorf("%s: the plan does not use %s:\n%s", name, c1.index, plan)
		}
	}
}
