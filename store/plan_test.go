package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/store/query"
)

// TestQueryPlans checks SPEC 11 ("every listed query is served by an index"):
// for each query the store runs on the event log, the DLQ and the auth
// tables, EXPLAIN QUERY PLAN must show only index searches (SEARCH ... USING
// INDEX / COVERING INDEX / INTEGER PRIMARY KEY / PRIMARY KEY). A SCAN is
// accepted only for a query with no filter at all (count(*) over a covering
// index, a page in sequence_number order, which is the rowid order, or the
// seek of max(sequence_number)).
//
// The read-side SQL is not copied: the store's methods run for real against a
// reader pool that records every statement and its arguments, and those very
// statements are explained. The writer's statements cannot be recorded without
// rewiring Open, so they are copied here and checked against the source text.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ids := planSeed(t, db)

	// Swap the reader pool for one that records what the store runs. Nothing
	// else reads here: Open starts only the writer, which uses db.write.
	rec := &planRecorder{}
	recorded := planRecordingPool(t, path, rec)
	orig := db.read
	useRead(db, recorded)
	t.Cleanup(func() { useRead(db, orig); recorded.Close() })

	explain, err := sql.Open(DriverName, DSN(path, true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { explain.Close() })

	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	deliveries := func(f app.DeliveryFilter) func() error {
		return func() error {
			if f.Limite == 0 {
				f.Limite = app.DefaultLimite
			}
			_, _, err := db.Deliveries(ctx, f)
			return err
		}
	}
	events := func(f app.EventFilter) func() error {
		return func() error {
			if f.Limite == 0 {
				f.Limite = app.DefaultLimite
			}
			_, _, err := db.Events(ctx, f)
			return err
		}
	}
	ocorrencias := func(f ocorrencia.Filter) func() error {
		return func() error {
			if f.Limite == 0 {
				f.Limite = app.DefaultLimite
			}
			_, _, err := db.Ocorrencias(ctx, f)
			return err
		}
	}
	type planCase struct {
		name string
		run  func() error // calls the store method; its statements are recorded
		// sql and args explain a writer statement instead (copied, see above).
		sql  string
		args []any
		file string // the source holding a copied sql (default consumers.go); "-" when sql is the store's constant
		// unfiltered: the query has no WHERE, so a SCAN in index order is fine.
		unfiltered bool
	}
	cases := []planCase{
		{name: "Event by id", run: func() error { _, err := db.Event(ctx, ids.event); return err }},
		{name: "Events no filter", run: events(app.EventFilter{}), unfiltered: true},
		{name: "Events tipo", run: events(app.EventFilter{Tipo: "plano:a"})},
		{name: "Events origem", run: events(app.EventFilter{Origem: "origem-1"})},
		{name: "Events correlacao_id", run: events(app.EventFilter{CorrelacaoID: ids.correlacao})},
		{name: "Events agregado", run: events(app.EventFilter{Agregado: "ocorrencia:7"})},
		{name: "Events timestamp_inicio", run: events(app.EventFilter{TimestampInicio: ts})},
		{name: "Events timestamp_fim", run: events(app.EventFilter{TimestampFim: ts})},
		{name: "Events timestamp range", run: events(app.EventFilter{TimestampInicio: ts, TimestampFim: ts.Add(time.Hour)})},
		{name: "Events sequence_inicio", run: events(app.EventFilter{SequenceInicio: 10})},
		{name: "Events sequence_fim", run: events(app.EventFilter{SequenceFim: 100})},
		{name: "Events sequence range", run: events(app.EventFilter{SequenceInicio: 10, SequenceFim: 100})},
		{name: "Events tipo origem", run: events(app.EventFilter{Tipo: "plano:a", Origem: "origem-1"})},
		{name: "Events tipo timestamp range", run: events(app.EventFilter{Tipo: "plano:b", TimestampInicio: ts, TimestampFim: ts.Add(time.Hour)})},
		{name: "Events agregado sequence range", run: events(app.EventFilter{Agregado: "ocorrencia:7", SequenceInicio: 1, SequenceFim: 50})},
		{name: "Events trace (correlacao_id limite 500)", run: events(app.EventFilter{CorrelacaoID: ids.correlacao, Limite: app.MaxLimite})},
		{name: "Events every filter", run: events(app.EventFilter{Tipo: "plano:a", Origem: "origem-1", CorrelacaoID: ids.correlacao,
			Agregado: "ocorrencia:7", TimestampInicio: ts, TimestampFim: ts.Add(time.Hour), SequenceInicio: 1, SequenceFim: 50,
			Limite: 100, Deslocamento: 100})},
		{name: "Events newest first", run: events(app.EventFilter{Desc: true}), unfiltered: true},
		{name: "Events newest first sequence_fim", run: events(app.EventFilter{Desc: true, SequenceFim: 1500})},
		{name: "Events tipo newest first sequence_fim", run: events(app.EventFilter{Tipo: "plano:a", Desc: true, SequenceFim: 1500})},
		{name: "EventsAfter", run: func() error { _, _, err := db.EventsAfter(ctx, 5, nil, app.ReplayBatch, app.ChunkBytes); return err }},
		{name: "EventsAfter one tipo", run: func() error {
			_, _, err := db.EventsAfter(ctx, 5, []string{"plano:a"}, app.ReplayBatch, app.ChunkBytes)
			return err
		}},
		{name: "EventsAfter two tipos", run: func() error {
			_, _, err := db.EventsAfter(ctx, 5, []string{"plano:a", "plano:b"}, app.ReplayBatch, app.ChunkBytes)
			return err
		}},
		{name: "MaxSequence", run: func() error { _, err := db.MaxSequence(ctx); return err }, unfiltered: true},
		{name: "CountEvents", run: func() error { _, err := db.CountEvents(ctx); return err }, unfiltered: true},
		{name: "DLQOpen", run: func() error { _, err := db.DLQOpen(ctx, "colonia-1", 100); return err }},
		{name: "DLQStats", run: func() error { _, err := db.DLQStats(ctx, 100); return err }},
		{name: "Cursors", run: func() error { _, err := db.Cursors(ctx, "colonia-1"); return err }},
		{name: "TokenByHash", run: func() error { _, err := db.TokenByHash(ctx, "hash-1"); return err }},
		{name: "OperatorByLogin", run: func() error { _, _, err := db.OperatorByLogin(ctx, "login-1"); return err }},
		{name: "Deliveries no filter", run: deliveries(app.DeliveryFilter{}), unfiltered: true},
		{name: "Deliveries integrador", run: deliveries(app.DeliveryFilter{Integrador: "int-1"})},
		{name: "Deliveries status", run: deliveries(app.DeliveryFilter{Status: app.EntregaFalhou})},
		{name: "Deliveries integrador status", run: deliveries(app.DeliveryFilter{Integrador: "int-1", Status: app.EntregaFalhou})},
		{name: "Deliveries tipo", run: deliveries(app.DeliveryFilter{Tipo: "plano:a"})},
		{name: "Deliveries agregado", run: deliveries(app.DeliveryFilter{Agregado: "ocorrencia:7"})},
		{name: "Deliveries newest first id_fim", run: deliveries(app.DeliveryFilter{Desc: true, IDFim: 100})},
		{name: "Deliveries integrador newest first id_fim", run: deliveries(app.DeliveryFilter{Integrador: "int-1", Desc: true, IDFim: 100})},
		{name: "Deliveries integrador id_inicio", run: deliveries(app.DeliveryFilter{Integrador: "int-1", IDInicio: 100})},
		{name: "Deliveries event_id", run: deliveries(app.DeliveryFilter{EventID: ids.event})},
		{name: "Delivery by id", run: func() error { _, _, err := db.Delivery(ctx, 1); return err }},
		{name: "NextDue", run: func() error { _, _, err := db.NextDue(ctx, []string{"int-1"}, ts); return err }},
		{name: "OutboxBacklog", run: func() error { _, err := db.OutboxBacklog(ctx); return err }},
		// A scan of the partial indexes, which hold only the live rows.
		{name: "Backlogs", run: func() error { _, err := db.Backlogs(ctx); return err }, unfiltered: true},
		{name: "Backlogs one", run: func() error { _, err := db.Backlogs(ctx, "int-1"); return err }},
		{name: "Integrator by API key", run: func() error { _, err := db.IntegratorByAPIKey(ctx, "hash"); return err }},
		// The console.
		{name: "SessionOperator", run: func() error { _, err := db.SessionOperator(ctx, "hash", ts); return err }},
		{name: "Operators", run: func() error { _, err := db.Operators(ctx); return err }, unfiltered: true},
		{name: "EventsPerMinute", run: func() error { _, err := db.EventsPerMinute(ctx, ts, ts.Add(time.Hour)); return err }},
		{name: "DeliveryCounts", run: func() error { _, err := db.DeliveryCounts(ctx); return err }, unfiltered: true},
		// The ocorrências read model (ocorrencias.go).
		{name: "Ocorrencias no filter", run: ocorrencias(ocorrencia.Filter{}), unfiltered: true},
		{name: "Ocorrencias antes", run: ocorrencias(ocorrencia.Filter{Antes: 100})},
		{name: "Ocorrencias status", run: ocorrencias(ocorrencia.Filter{Status: ocorrencia.Aberta})},
		{name: "Ocorrencias status antes", run: ocorrencias(ocorrencia.Filter{Status: ocorrencia.Aberta, Antes: 100})},
		{name: "Ocorrencias natureza", run: ocorrencias(ocorrencia.Filter{Natureza: "natureza-1"})},
		{name: "Ocorrencias integrador", run: ocorrencias(ocorrencia.Filter{Integrador: "int-1", Antes: 100})},
		{name: "Ocorrencias period", run: ocorrencias(ocorrencia.Filter{Inicio: ts, Fim: ts.Add(time.Hour)})},
		{name: "Ocorrencias every filter", run: ocorrencias(ocorrencia.Filter{Status: ocorrencia.Aberta, Natureza: "natureza-1",
			Integrador: "int-1", Inicio: ts, Fim: ts.Add(time.Hour), Antes: 100})},
		{name: "SaveOcorrencia stored (writer)", sql: `SELECT ultima_sequencia FROM ocorrencia WHERE registrada_seq = ?`,
			file: "ocorrencias.go", args: []any{int64(10)}},
		{name: "SaveOcorrencia despachos (writer)", sql: `DELETE FROM ocorrencia_despacho WHERE ocorrencia_seq = ?`,
			file: "ocorrencias.go", args: []any{int64(10)}},
		// Writer statements (events.go).
		{name: "ClaimDeliveries window (writer)", sql: claimWindowSQL, file: "-", args: []any{"int-1", ms(ts), 32, 128}},
		{name: "ClaimDeliveries window full (writer)", sql: claimWindowFullSQL, file: "-", args: []any{"int-1", ms(ts), 128}},
		{name: "ClaimDeliveries heads (writer)", sql: claimHeadsSQL, file: "-", args: []any{"int-1", ms(ts), 32}},
		{name: "ClaimDeliveries lease (writer)", sql: claimRowsSQL, file: "-", args: []any{ms(ts), "w", int64(7), "[1,2]"}},
		{name: "RenewDeliveries (writer)", sql: renewSQL, file: "-", args: []any{ms(ts), "w", ms(ts)}},
		{name: "PurgeDelivered bodies (writer)", sql: purgeBodiesSQL, file: "-", args: []any{ms(ts)}},
		{name: "PurgeDelivered mark (writer)", sql: markPurgedSQL, file: "-", args: []any{ms(ts)}},
		// Writer statements (outbox.go, sealbodies.go): dead letters' retention and the upgrade's batches.
		{name: "PurgeDeadLetters bodies (writer)", sql: purgeDeadBodiesSQL, file: "-", args: []any{ms(ts)}},
		{name: "PurgeDeadLetters mark (writer)", sql: markDeadPurgedSQL, file: "-", args: []any{ms(ts)}},
		{name: "ResendAll (writer)", sql: resendAllSQL, file: "-", args: []any{ms(ts), "int-1"}},
		{name: "ResendAll purged count (writer)", sql: countPurgedDeadSQL, file: "-", args: []any{"int-1"}},
		{name: "Redeliver aggregate count (writer)", sql: redeliverAggregateCountSQL, file: "-", args: []any{"int-1", "a:1", 4, 10001}},
		{name: "Redeliver aggregate (writer)", sql: redeliverAggregateSQL, file: "-", args: []any{ms(ts), "int-1", "a:1", 4}},
		{name: "Redeliver window count (writer)", sql: redeliverTimeCountSQL, file: "-", args: []any{"int-1", ms(ts), ms(ts), 10001}},
		{name: "Redeliver window (writer)", sql: redeliverTimeSQL, file: "-", args: []any{ms(ts), "int-1", ms(ts), ms(ts)}},
		{name: "SealClearBodies batch (writer)", sql: clearBodiesSQL, file: "-", args: []any{int64(100), 256}},
		{name: "SealClearResponses batch (writer)", sql: clearResponsesSQL, file: "-", args: []any{int64(100), 256}},
		// Writer statements (consumers.go).
		{name: "AdvanceCursors clamp (writer)", sql: planAdvanceCursorSQL,
			args: []any{"colonia-1", "plano:a", int64(40), ms(ts)}},
		{name: "SetDLQStatus (writer)", sql: planSetDLQStatusSQL,
			args: []any{app.DLQResolved, ms(ts), ids.event, "colonia-1"}},
		// Writer statements (query/integrators.go).
		{name: "SetIntegratorAPIKey (writer)", sql: `UPDATE integrator SET api_key_hash = ?, atualizado_em = ? WHERE id = ?`,
			file: "query/integrators.go", args: []any{"hash", ms(ts), "int-1"}},
		// Writer statements (query/accounts.go).
		{name: "SetOperatorRole (writer)", sql: `UPDATE operator SET papel = ? WHERE id = ?`, file: "query/accounts.go",
			args: []any{"leitor", "op-1"}},
		{name: "requireActiveAdmin (writer)", sql: `SELECT count(*) FROM operator WHERE id = ? AND ativo = TRUE AND papel = 'admin'`,
			file: "query/accounts.go", args: []any{"op-1"}},
		{name: "SetOperatorActive (writer)", sql: `UPDATE operator SET ativo = ? WHERE id = ?`, file: "query/accounts.go",
			args: []any{false, "op-1"}},
		{name: "SetOperatorActive sessions (writer)", sql: `DELETE FROM operator_session WHERE operador_id = ?`,
			file: "query/accounts.go", args: []any{"op-1"}},
		{name: "InsertSession sweep (writer)", sql: `DELETE FROM operator_session WHERE hash IN (SELECT hash FROM operator_session WHERE expira_em <= ?)`,
			file: "-", args: []any{ms(ts)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stmts []planStmt
			if c.run != nil {
				rec.reset()
				if err := c.run(); err != nil && !errors.Is(err, app.ErrNotFound) {
					t.Fatal(err)
				}
				stmts = rec.take()
				if len(stmts) == 0 {
					t.Fatal("the store ran no statement on the reader pool")
				}
			} else {
				switch c.file {
				case "-": // the store's own constant: nothing copied
				case "":
					planAssertInSource(t, "consumers.go", c.sql)
				default:
					planAssertInSource(t, c.file, c.sql)
				}
				stmts = []planStmt{{query: c.sql, args: c.args}}
			}
			var problems []string
			for _, st := range stmts {
				steps := planExplain(t, explain, st)
				t.Logf("%s\n  args %v\n  plan: %s", planOneLine(st.query), st.args, strings.Join(steps, " | "))
				problems = append(problems, planProblems(steps, c.unfiltered)...)
			}
			if len(problems) > 0 {
				t.Errorf("not served by an index: %s", strings.Join(problems, "; "))
			}
		})
	}
}

// Copies of the writer's statements; planAssertInSource keeps them honest.
const (
	planAdvanceCursorSQL = `UPDATE consumer_cursor SET
				last_sequence = max(last_sequence, min(?3, coalesce((SELECT min(sequence_number) - 1
					FROM dead_letter_queue WHERE status IN ('pendente', 'retrying')
					AND colonia = ?1 AND tipo = ?2), ?3))),
				atualizado_em = ?4
				WHERE colonia = ?1 AND tipo = ?2`
	planSetDLQStatusSQL = `UPDATE dead_letter_queue SET status = ?, resolvido_em = ?
			WHERE event_id = ? AND colonia = ?`
)

var planSpace = regexp.MustCompile(`\s+`)

func planOneLine(q string) string { return strings.TrimSpace(planSpace.ReplaceAllString(q, " ")) }

// planAssertInSource fails when a copied statement no longer appears, up to
// whitespace, in the store's source: the copy must follow the store.
func planAssertInSource(t *testing.T, file, query string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(planOneLine(string(src)), planOneLine(query)) {
		t.Fatalf("the copy of this statement is stale, %s no longer contains it: %s", file, planOneLine(query))
	}
}

// planStep matches a table access of EXPLAIN QUERY PLAN (with or without the
// "TABLE" word older SQLite versions print).
var planStep = regexp.MustCompile(`^(SCAN|SEARCH) (?:TABLE )?(\S+)(?: AS \S+)?(.*)$`)

// planProblems returns the steps not served by an index.
func planProblems(steps []string, unfiltered bool) []string {
	var out []string
	produced := map[string]bool{} // co-routines: subqueries and CTEs of the statement
	for _, s := range steps {
		if name, ok := strings.CutPrefix(s, "CO-ROUTINE "); ok {
			produced[name] = true
		}
	}
	for _, s := range steps {
		m := planStep.FindStringSubmatch(s)
		if m == nil {
			continue // sorts, subquery headers, ...
		}
		kind, rest := m[1], m[3]
		indexed := strings.Contains(rest, "USING INDEX") || strings.Contains(rest, "USING COVERING INDEX") ||
			strings.Contains(rest, "USING INTEGER PRIMARY KEY") || strings.Contains(rest, "USING PRIMARY KEY") ||
			strings.Contains(rest, "USING ROWID SEARCH")
		switch {
		case kind == "SEARCH" && indexed:
		case m[2]+rest == "CONSTANT ROW":
			// A scalar subquery without FROM, such as LIMIT (SELECT ?).
		case kind == "SCAN" && (strings.HasPrefix(m[2], "(subquery-") || produced[m[2]]):
			// The rows a subquery or CTE produced, which its own steps bound.
		case kind == "SCAN" && m[2] == "json_each":
			// The list of ids the statement was given.
		case unfiltered:
			// No filter: a walk in rowid or index order is the query, and
			// max(sequence_number) is a bare SEARCH: one seek to the end of
			// the rowid b-tree.
		default:
			out = append(out, fmt.Sprintf("%q", s))
		}
	}
	return out
}

func planExplain(t *testing.T, db *sql.DB, st planStmt) []string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+st.query, st.args...)
	if err != nil {
		t.Fatalf("explain %s: %v", planOneLine(st.query), err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 {
		t.Fatalf("empty plan for %s", planOneLine(st.query))
	}
	return steps
}

type planIDs struct{ event, correlacao string }

// planSeed fills every table the queries read, with a few thousand events so
// that the log is not trivially small.
func planSeed(t *testing.T, db *DB) planIDs {
	t.Helper()
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	var ids planIDs
	var wg sync.WaitGroup
	errs := make(chan error, 2000)
	for i := range 2000 {
		id := uuid.Must(uuid.NewV7()).String()
		if i == 0 {
			ids.event, ids.correlacao = id, id
		}
		ev := app.Event{EventID: id, Tipo: fmt.Sprintf("plano:%c", 'a'+i%5), VersaoSchema: "1.0.0",
			Timestamp: base.Add(time.Duration(i) * time.Second), Origem: fmt.Sprintf("origem-%d", i%7),
			CorrelacaoID: ids.correlacao, Payload: json.RawMessage(`{"n":1}`)}
		if i%3 == 0 {
			ev.Agregado = fmt.Sprintf("ocorrencia:%d", i%11)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := db.Append(ctx, []app.Pending{{Event: ev, Full: ev.Payload}}); err != nil {
				errs <- err
			}
		}()
	}
	// Ocorrências in the read model, each with two despachos.
	for i := range 300 {
		s := ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{ID: uuid.NewString(), Natureza: fmt.Sprintf("natureza-%d", i%4),
			Status: []string{ocorrencia.Aberta, ocorrencia.EmAtendimento, ocorrencia.Encerrada}[i%3], Versao: 3},
			Integrador: fmt.Sprintf("int-%d", i%5), RegistradaEm: base.Add(time.Duration(i) * time.Minute),
			AtualizadaEm: base.Add(time.Duration(i) * time.Minute), Cursor: int64(i + 1), UltimaSequencia: int64(i + 2)}
		for j := range 2 {
			s.Despachos = append(s.Despachos, ocorrencia.Despacho{ID: uuid.NewString(), OcorrenciaID: s.ID,
				Recurso: ocorrencia.Recurso{Identificador: fmt.Sprintf("UR-%d", j)}, Status: ocorrencia.EmDeslocamento})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := db.SaveOcorrencia(ctx, s); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seed, _, err := db.EventsAfter(ctx, 0, nil, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, ev := range seed {
		colonia := fmt.Sprintf("colonia-%d", i%3)
		if err := db.RecordFailure(ctx, app.DLQEntry{EventID: ev.EventID, Sequence: ev.Sequence, Tipo: ev.Tipo,
			Colonia: colonia, HandlerNome: "h", MensagemErro: "falhou", UltimaTentativa: now, CriadoEm: now}); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			if err := db.SetDLQStatus(ctx, ev.EventID, colonia, app.DLQResolved); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SeedCursor(ctx, colonia, ev.Tipo, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := db.InsertToken(ctx, app.Token{ID: fmt.Sprintf("tok-%d", i), Nome: "t", Papel: app.PapelLeitor,
			CriadoEm: now}, fmt.Sprintf("hash-%d", i), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := db.InsertOperator(ctx, "", app.Operator{ID: fmt.Sprintf("op-%d", i), Login: fmt.Sprintf("login-%d", i),
			Papel: app.PapelLeitor, CriadoEm: now}, "bcrypt", nil); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// planStmt is one statement the store ran, with its arguments.
type planStmt struct {
	query string
	args  []any
}

type planRecorder struct {
	mu    sync.Mutex
	stmts []planStmt
}

func (r *planRecorder) add(query string, nv []driver.NamedValue) {
	args := make([]any, len(nv))
	for i, v := range nv {
		if v.Name != "" {
			args[i] = sql.Named(v.Name, v.Value)
		} else {
			args[i] = v.Value
		}
	}
	r.mu.Lock()
	r.stmts = append(r.stmts, planStmt{query, args})
	r.mu.Unlock()
}

func (r *planRecorder) reset() { r.mu.Lock(); r.stmts = nil; r.mu.Unlock() }

func (r *planRecorder) take() []planStmt {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

// planRecordingPool opens a reader pool exactly like Open's (same driver, same
// DSN) whose connections record each query before running it.
func planRecordingPool(t *testing.T, path string, rec *planRecorder) *sql.DB {
	t.Helper()
	probe, err := sql.Open(DriverName, "")
	if err != nil {
		t.Fatal(err)
	}
	inner := probe.Driver()
	probe.Close()
	return sql.OpenDB(planConnector{dsn: DSN(path, true), inner: inner, rec: rec})
}

type planConnector struct {
	dsn   string
	inner driver.Driver
	rec   *planRecorder
}

func (c planConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &planConn{Conn: conn, rec: c.rec}, nil
}

func (c planConnector) Driver() driver.Driver { return c.inner }

type planConn struct {
	driver.Conn
	rec *planRecorder
}

func (c *planConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, fmt.Errorf("driver %s has no QueryerContext: cannot record queries", DriverName)
	}
	c.rec.add(query, args)
	return q.QueryContext(ctx, query, args)
}

// PrepareContext is refused so that nothing runs unrecorded: every read of
// the store goes through QueryContext.
func (c *planConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return nil, fmt.Errorf("plan recorder: unexpected prepared statement %s", planOneLine(query))
}

// useRead points db's reads, its own and the shared ones, at p.
func useRead(db *DB, p *sql.DB) {
	db.read = p
	db.Reads = query.NewReads(conn{p}, sqliteDialect)
}
