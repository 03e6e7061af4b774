package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"geohub/app"
)

// TestAuditQueryPlans is TestQueryPlans (plan_test.go) for the audit trail:
// every filter of GET /api/auditoria and /auditoria, alone and together,
// with and without the keyset cursor, is an index search whose order is
// the page's (no sort), and the insert's read of the last row is one seek.
func TestAuditQueryPlans(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	tick := base
	db, err := Open(ctx, path, Options{Now: func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		tick = tick.Add(time.Second)
		return tick
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Enough rows, spread over actors, actions and targets, that a scan
	// would show in the plan as one.
	var wg sync.WaitGroup
	errs := make(chan error, 3000)
	for i := range 3000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := app.AuditEntry{Quem: app.Actor{Tipo: app.ActorOperador, ID: fmt.Sprintf("op-%d", i%13), Nome: fmt.Sprintf("login-%d", i%13),
				Papel: app.PapelAdmin}, Endereco: "192.0.2.1", Acao: app.AuditActions[i%len(app.AuditActions)],
				Alvo: app.AuditTarget{Tipo: "integrador", ID: fmt.Sprintf("int-%d", i%17)}, Resultado: app.AuditOK}
			if err := db.AppendAudit(ctx, e); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

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

	from, until := base.Add(10*time.Minute), base.Add(20*time.Minute)
	cases := []struct {
		name       string
		f          app.AuditFilter
		unfiltered bool
	}{
		{name: "no filter", unfiltered: true},
		{name: "antes", f: app.AuditFilter{Antes: 2000}},
		{name: "quem id", f: app.AuditFilter{QuemID: "op-3"}},
		{name: "quem id antes", f: app.AuditFilter{QuemID: "op-3", Antes: 2000}},
		{name: "quem name", f: app.AuditFilter{QuemNome: "login-3"}},
		{name: "quem name antes", f: app.AuditFilter{QuemNome: "login-3", Antes: 2000}},
		{name: "acao", f: app.AuditFilter{Acao: app.AcaoLoginFalhou}},
		{name: "acao antes", f: app.AuditFilter{Acao: app.AcaoLoginFalhou, Antes: 2000}},
		{name: "alvo", f: app.AuditFilter{Alvo: "int-4"}},
		{name: "alvo antes", f: app.AuditFilter{Alvo: "int-4", Antes: 2000}},
		{name: "inicio", f: app.AuditFilter{Inicio: from}},
		{name: "fim", f: app.AuditFilter{Fim: until}},
		{name: "period", f: app.AuditFilter{Inicio: from, Fim: until}},
		{name: "period antes", f: app.AuditFilter{Inicio: from, Fim: until, Antes: 700}},
		{name: "quem period", f: app.AuditFilter{QuemNome: "login-3", Inicio: from, Fim: until}},
		{name: "acao period", f: app.AuditFilter{Acao: app.AcaoLogin, Inicio: from, Fim: until}},
		{name: "every filter", f: app.AuditFilter{QuemID: "op-3", QuemNome: "login-3", Acao: app.AcaoLogin, Alvo: "int-4",
			Inicio: from, Fim: until, Antes: 2000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec.reset()
			f := c.f
			f.Limite = app.DefaultLimite
			if _, _, err := db.AuditEntries(ctx, f); err != nil {
				t.Fatal(err)
			}
			stmts := rec.take()
			if len(stmts) == 0 {
				t.Fatal("the store ran no statement on the reader pool")
			}
			var problems []string
			for _, st := range stmts {
				steps := planExplain(t, explain, st)
				t.Logf("%s\n  args %v\n  plan: %s", planOneLine(st.query), st.args, strings.Join(steps, " | "))
				problems = append(problems, planProblems(steps, c.unfiltered)...)
				for _, s := range steps {
					// The page comes in the order of the index it walks: a sort
					// would read every matching row to return a hundred.
					if strings.Contains(s, "TEMP B-TREE") {
						problems = append(problems, fmt.Sprintf("%q", s))
					}
				}
			}
			if len(problems) > 0 {
				t.Errorf("not served by an index in page order: %s", strings.Join(problems, "; "))
			}
		})
	}
	t.Run("insert reads the last row with one seek", func(t *testing.T) {
		// The writer's statement, explained as it is: a walk of the rowid
		// from its end that stops at the first row.
		steps := planExplain(t, explain, planStmt{query: insertAuditSQL, args: []any{ms(base), "operador", "id", "nome", "admin",
			"e", "login", "operador", "id", "", "[]", "ok", "", ""}})
		t.Logf("plan: %s", strings.Join(steps, " | "))
		for _, s := range steps {
			if strings.Contains(s, "TEMP B-TREE") || strings.Contains(s, "USING INDEX") {
				t.Errorf("the last row's em is not read from the end of the rowid: %q", s)
			}
		}
	})
}
