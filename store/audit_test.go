package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/store"
)

// auditClock is a clock a test moves by hand, also backwards.
type auditClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *auditClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *auditClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func auditOpen(t *testing.T, clock *auditClock) (*store.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), store.FileName)
	opt := store.Options{}
	if clock != nil {
		opt.Now = clock.Now
	}
	db, err := store.Open(t.Context(), path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func auditEntry(quem, acao, alvo string) app.AuditEntry {
	return app.AuditEntry{Quem: app.Actor{Tipo: app.ActorOperador, ID: "id-" + quem, Nome: quem, Papel: app.PapelAdmin},
		Endereco: "192.0.2.7", Acao: acao, Alvo: app.AuditTarget{Tipo: "integrador", ID: alvo},
		Campos: []app.AuditField{app.Changed("ativo", true, false)}, Resultado: app.AuditOK}
}

// auditAll reads every row, newest first, one page at a time.
func auditAll(t *testing.T, db *store.DB, f app.AuditFilter) []app.AuditEntry {
	t.Helper()
	if f.Limite == 0 {
		f.Limite = 500
	}
	var out []app.AuditEntry
	for range 1000 {
		rows, more, err := db.AuditEntries(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
		if !more {
			return out
		}
		if len(rows) == 0 {
			t.Fatal("more rows promised, none given")
		}
		f.Antes = rows[len(rows)-1].ID
	}
	t.Fatal("paging never ended")
	return nil
}

func TestAuditLogIsAppendOnly(t *testing.T) {
	db, path := auditOpen(t, nil)
	for i := range 3 {
		if err := db.AppendAudit(t.Context(), auditEntry("ana", app.AcaoIntegradorDesativar, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Straight at the file, as a mistaken code path or a curious operator
	// with sqlite3 would: the triggers refuse both.
	raw, err := sql.Open(store.DriverName, store.DSN(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, stmt := range []string{
		`UPDATE audit_log SET quem_nome = 'outra pessoa'`,
		`UPDATE audit_log SET resultado = 'recusado' WHERE id = 1`,
		`DELETE FROM audit_log WHERE id = 2`,
		`DELETE FROM audit_log`,
	} {
		_, err := raw.ExecContext(t.Context(), stmt)
		if err == nil || !strings.Contains(err.Error(), "somente inclusão") {
			t.Errorf("%s: %v, want the append-only refusal", stmt, err)
		}
	}
	rows := auditAll(t, db, app.AuditFilter{})
	if len(rows) != 3 {
		t.Fatalf("%d rows after the refused changes, want 3", len(rows))
	}
	for _, r := range rows {
		if r.Quem.Nome != "ana" || r.Resultado != app.AuditOK {
			t.Errorf("row %d changed: %+v", r.ID, r)
		}
	}
}

func TestAuditEntriesPageNewestFirstAndFilter(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := &auditClock{now: base}
	db, _ := auditOpen(t, clock)
	quem := []string{"ana", "bruno", "carla"}
	acoes := []string{app.AcaoIntegradorDesativar, app.AcaoIntegradorSegredoRotacionar, app.AcaoLoginFalhou, app.AcaoLogin}
	type row struct {
		quem, acao, alvo string
		em               time.Time
	}
	var want []row
	for i := range 60 {
		clock.Set(base.Add(time.Duration(i) * time.Minute))
		r := row{quem[i%3], acoes[i%4], fmt.Sprintf("alvo-%d", i%5), base.Add(time.Duration(i) * time.Minute)}
		if err := db.AppendAudit(t.Context(), auditEntry(r.quem, r.acao, r.alvo)); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	slices.Reverse(want) // newest first

	t.Run("pages by keyset neither repeat nor skip, newest first", func(t *testing.T) {
		all := auditAll(t, db, app.AuditFilter{Limite: 7})
		if len(all) != len(want) {
			t.Fatalf("%d rows, want %d", len(all), len(want))
		}
		for i, e := range all {
			if i > 0 && e.ID >= all[i-1].ID {
				t.Fatalf("row %d (id %d) after id %d: not newest first", i, e.ID, all[i-1].ID)
			}
			w := want[i]
			if e.Quem.Nome != w.quem || e.Acao != w.acao || e.Alvo.ID != w.alvo || !e.Em.Equal(w.em) {
				t.Fatalf("row %d = %+v, want %+v", i, e, w)
			}
			if e.Quem.ID != "id-"+w.quem || e.Quem.Papel != app.PapelAdmin || e.Endereco != "192.0.2.7" ||
				len(e.Campos) != 1 || e.Campos[0].Campo != "ativo" || string(e.Campos[0].De) != "true" ||
				string(e.Campos[0].Para) != "false" {
				t.Fatalf("row %d read back as %+v", i, e)
			}
		}
		rows, more, err := db.AuditEntries(t.Context(), app.AuditFilter{Limite: 60})
		if err != nil || len(rows) != 60 || more {
			t.Fatalf("an exact page: %d rows, more %v, %v", len(rows), more, err)
		}
	})

	check := func(t *testing.T, f app.AuditFilter, keep func(row) bool) {
		t.Helper()
		var exp []row
		for _, r := range want {
			if keep(r) {
				exp = append(exp, r)
			}
		}
		f.Limite = 4
		got := auditAll(t, db, f)
		if len(got) != len(exp) {
			t.Fatalf("%d rows, want %d", len(got), len(exp))
		}
		for i := range got {
			if got[i].Quem.Nome != exp[i].quem || got[i].Acao != exp[i].acao || got[i].Alvo.ID != exp[i].alvo ||
				!got[i].Em.Equal(exp[i].em) {
				t.Fatalf("row %d = %+v, want %+v", i, got[i], exp[i])
			}
		}
	}
	from, until := base.Add(10*time.Minute), base.Add(25*time.Minute)
	inRange := func(r row) bool { return !r.em.Before(from) && r.em.Before(until) }
	t.Run("quem by name", func(t *testing.T) {
		check(t, app.AuditFilter{QuemNome: "bruno"}, func(r row) bool { return r.quem == "bruno" })
	})
	t.Run("quem by id", func(t *testing.T) {
		check(t, app.AuditFilter{QuemID: "id-carla"}, func(r row) bool { return r.quem == "carla" })
	})
	t.Run("acao", func(t *testing.T) {
		check(t, app.AuditFilter{Acao: app.AcaoLoginFalhou}, func(r row) bool { return r.acao == app.AcaoLoginFalhou })
	})
	t.Run("alvo", func(t *testing.T) {
		check(t, app.AuditFilter{Alvo: "alvo-3"}, func(r row) bool { return r.alvo == "alvo-3" })
	})
	t.Run("period, start included and end excluded", func(t *testing.T) {
		check(t, app.AuditFilter{Inicio: from, Fim: until}, inRange)
	})
	t.Run("from a time on", func(t *testing.T) {
		check(t, app.AuditFilter{Inicio: from}, func(r row) bool { return !r.em.Before(from) })
	})
	t.Run("up to a time", func(t *testing.T) {
		check(t, app.AuditFilter{Fim: until}, func(r row) bool { return r.em.Before(until) })
	})
	t.Run("a period with no rows", func(t *testing.T) {
		check(t, app.AuditFilter{Inicio: base.Add(-time.Hour), Fim: base.Add(-time.Minute)}, func(row) bool { return false })
		check(t, app.AuditFilter{Inicio: base.Add(24 * time.Hour)}, func(row) bool { return false })
	})
	t.Run("every filter at once", func(t *testing.T) {
		check(t, app.AuditFilter{QuemNome: "ana", Acao: app.AcaoIntegradorDesativar, Inicio: base, Fim: base.Add(time.Hour)},
			func(r row) bool { return r.quem == "ana" && r.acao == app.AcaoIntegradorDesativar })
	})
}

func TestAuditTimeNeverGoesBack(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := &auditClock{now: base}
	db, _ := auditOpen(t, clock)
	for _, at := range []time.Time{base, base.Add(time.Minute), base.Add(-time.Hour), base.Add(2 * time.Minute)} {
		clock.Set(at)
		if err := db.AppendAudit(t.Context(), auditEntry("ana", app.AcaoLogin, "x")); err != nil {
			t.Fatal(err)
		}
	}
	rows := auditAll(t, db, app.AuditFilter{})
	var ems []time.Time
	for _, r := range rows {
		ems = append([]time.Time{r.Em}, ems...)
	}
	want := []time.Time{base, base.Add(time.Minute), base.Add(time.Minute), base.Add(2 * time.Minute)}
	if !slices.EqualFunc(ems, want, time.Time.Equal) {
		t.Fatalf("em in id order %v, want %v: a clock that steps back must not reorder the trail", ems, want)
	}
}

// The audit row and its change are one transaction: neither exists alone.
func TestAuditCommitsWithItsChange(t *testing.T) {
	db, _ := auditOpen(t, nil)
	ctx := t.Context()
	now := time.Now().UTC()
	in := app.Integrator{ID: uuid.NewString(), Nome: "CAD", CallbackURL: "https://cad.example/x",
		HostsPermitidos: []string{"cad.example"}, Eventos: []string{"*"}, Ativo: true, CriadoEm: now, AtualizadoEm: now}
	created := auditEntry("ana", app.AcaoIntegradorCriar, in.ID)
	if err := db.InsertIntegrator(ctx, in, []byte("sealed"), "hash-1", &created); err != nil {
		t.Fatal(err)
	}

	t.Run("an entry that cannot be written undoes its change", func(t *testing.T) {
		bad := auditEntry("ana", app.AcaoIntegradorDesativar, in.ID)
		bad.Resultado = "talvez" // refused by the table's CHECK
		off := in
		off.Ativo = false
		if err := db.UpdateIntegrator(ctx, off, &bad); err == nil {
			t.Fatal("the update committed without its audit row")
		}
		got, err := db.Integrator(ctx, in.ID)
		if err != nil || !got.Ativo {
			t.Fatalf("the integrator changed without its audit row: ativo %v, %v", got.Ativo, err)
		}
	})
	t.Run("a change that fails leaves no entry", func(t *testing.T) {
		e := auditEntry("ana", app.AcaoIntegradorDesativar, "nao-existe")
		ghost := in
		ghost.ID = "nao-existe"
		if err := db.UpdateIntegrator(ctx, ghost, &e); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("update of an unknown integrator: %v", err)
		}
		if rows := auditAll(t, db, app.AuditFilter{Alvo: "nao-existe"}); len(rows) != 0 {
			t.Fatalf("%d audit rows for a change that did not happen", len(rows))
		}
	})
	t.Run("in a group commit, a failing operation takes only its own entry", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 40)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				target := in
				if i%2 == 1 {
					target.ID = fmt.Sprintf("fantasma-%d", i) // ErrNotFound inside the batch
				}
				e := auditEntry("bruno", app.AcaoIntegradorEditar, target.ID)
				errs[i] = db.UpdateIntegrator(context.Background(), target, &e)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if (i%2 == 1) != errors.Is(err, app.ErrNotFound) {
				t.Fatalf("operation %d: %v", i, err)
			}
		}
		rows := auditAll(t, db, app.AuditFilter{QuemNome: "bruno"})
		if len(rows) != 20 {
			t.Fatalf("%d entries, want one per successful update (20)", len(rows))
		}
		for _, r := range rows {
			if r.Alvo.ID != in.ID {
				t.Fatalf("an entry of a failed update survived: %+v", r)
			}
		}
	})
	t.Run("a command's entry commits with its new outcome event, once", func(t *testing.T) {
		ev := newEvent("plano:auditoria")
		e := auditEntry("carla", app.AcaoOcorrenciaRegistrar, "oc-1")
		for range 2 { // the second is a repeat of the same event_id
			if _, err := db.Append(ctx, []app.Pending{{Event: ev, Full: ev.Payload, Audit: &e}}); err != nil {
				t.Fatal(err)
			}
		}
		if rows := auditAll(t, db, app.AuditFilter{QuemNome: "carla"}); len(rows) != 1 {
			t.Fatalf("%d entries for one event appended twice, want 1", len(rows))
		}
	})
	t.Run("the operator changes read the previous value in the transaction", func(t *testing.T) {
		o := app.Operator{ID: uuid.NewString(), Login: "maria", Papel: app.PapelLeitor, CriadoEm: now, Ativo: true}
		if _, err := db.InsertOperator(ctx, "", o, "x", nil); err != nil {
			t.Fatal(err)
		}
		e := &app.AuditEntry{Quem: app.System, Acao: app.AcaoOperadorPapelAlterar, Alvo: app.AuditTarget{Tipo: "operador", ID: o.ID},
			Campos: []app.AuditField{app.Set("papel", app.PapelOperador)}, Resultado: app.AuditOK}
		admin := app.Operator{ID: uuid.NewString(), Login: "chefe", Papel: app.PapelAdmin, CriadoEm: now, Ativo: true}
		if _, err := db.InsertOperator(ctx, "", admin, "x", nil); err != nil {
			t.Fatal(err)
		}
		if err := db.SetOperatorRole(ctx, admin.ID, o.ID, app.PapelOperador, e); err != nil {
			t.Fatal(err)
		}
		rows := auditAll(t, db, app.AuditFilter{Alvo: o.ID})
		if len(rows) != 1 || rows[0].Alvo.Nome != "maria" || string(rows[0].Campos[0].De) != `"leitor"` ||
			string(rows[0].Campos[0].Para) != `"operador"` {
			t.Fatalf("role change recorded as %+v", rows)
		}
	})
}
