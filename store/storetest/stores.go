package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// Stores is what StoresConformance checks of a backend: every store of
// app.Store but the outbox, the integrators and the attempt log, with the
// event log (DLQ entries name events) and the ocorrências read model.
type Stores interface {
	app.EventLog
	app.RegistryStore
	app.AuthStore
	app.SessionStore
	app.ConsumerStore
	app.StatsStore
	app.AuditStore
	ocorrencia.ReadModel
	Writable(ctx context.Context) error
}

// StoresUnderTest is one fresh, empty database of a backend, with the
// backend's own helpers for what the interfaces do not show.
type StoresUnderTest struct {
	DB Stores
	// AddIntegrator creates an integrator that outbox rows may name.
	AddIntegrator func(t *testing.T, id string)
	// Exec runs one statement straight on the database, past the store.
	Exec func(t *testing.T, stmt string) error
	// DLQRow reads one DLQ entry's status, attempts and whether
	// resolvido_em is set, whatever its status.
	DLQRow func(t *testing.T, eventID, colonia string) (status string, tentativas int, resolved bool)
}

// Clock is a clock a test moves by hand, also backwards.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock is a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

func (c *Clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *Clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// StoresConformance checks, on a backend, the contracts of the registry,
// tokens and operators, sessions, consumer cursors and the DLQ, the
// overview's stats, the audit trail and the ocorrências read model: the
// cases package store's SQLite tests check, run on every backend. open
// gives each subtest a fresh database whose store reads now (time.Now when
// nil).
func StoresConformance(t *testing.T, open func(t *testing.T, now func() time.Time) StoresUnderTest) {
	fresh := func(t *testing.T) (StoresUnderTest, Stores) {
		t.Helper()
		t.Parallel()
		u := open(t, nil)
		return u, u.DB
	}
	appendEvent := func(t *testing.T, db Stores, ev app.Event, audit *app.AuditEntry) app.Event {
		t.Helper()
		stored, err := db.Append(t.Context(), []app.Pending{{Event: ev, Full: ev.Payload, Audit: audit}})
		if err != nil {
			t.Fatal(err)
		}
		return stored[0].Event
	}
	entry := func(quem, acao, alvo string) app.AuditEntry {
		return app.AuditEntry{Quem: app.Actor{Tipo: app.ActorOperador, ID: "id-" + quem, Nome: quem, Papel: app.PapelAdmin},
			Endereco: "192.0.2.7", Acao: acao, Alvo: app.AuditTarget{Tipo: "integrador", ID: alvo},
			Campos: []app.AuditField{app.Changed("ativo", true, false)}, Resultado: app.AuditOK}
	}
	auditAll := func(t *testing.T, db Stores, f app.AuditFilter) []app.AuditEntry {
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
	now := time.Now().UTC().Truncate(time.Millisecond)

	t.Run("writable", func(t *testing.T) {
		_, db := fresh(t)
		if err := db.Writable(t.Context()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("registry: a version is stored once, audited once, and only its status moves", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		tv := app.TypeVersion{Tipo: "a:b", Versao: "1.0.0", Status: "ativo", Audiencia: "todos",
			Schema: json.RawMessage(`{"type":"object","b":1,"a":2}`), CriadoEm: now}
		e := entry("ana", app.AcaoRegistroRegistrar, "a:b@1.0.0")
		got, created, err := db.InsertTypeVersion(ctx, tv, &e)
		if err != nil || !created || got.Tipo != "a:b" {
			t.Fatalf("first insert: %+v %v %v", got, created, err)
		}
		again := tv
		again.Audiencia, again.Schema = "originador", json.RawMessage(`{}`)
		got, created, err = db.InsertTypeVersion(ctx, again, &e)
		if err != nil || created || got.Audiencia != "todos" || string(got.Schema) != string(tv.Schema) || !got.CriadoEm.Equal(now) {
			t.Fatalf("second insert: %+v %v %v; want the stored row, not created", got, created, err)
		}
		v2 := tv
		v2.Versao = "1.1.0"
		if _, _, err := db.InsertTypeVersion(ctx, v2, nil); err != nil {
			t.Fatal(err)
		}
		other := tv
		other.Tipo = "a:a"
		if _, _, err := db.InsertTypeVersion(ctx, other, nil); err != nil {
			t.Fatal(err)
		}
		bad := tv
		bad.Tipo, bad.Status = "a:c", "talvez"
		if _, _, err := db.InsertTypeVersion(ctx, bad, nil); err == nil {
			t.Fatal("a status outside the CHECK was stored")
		}
		if err := db.SetTypeStatus(ctx, "a:b", "1.0.0", "deprecado", nil); err != nil {
			t.Fatal(err)
		}
		if err := db.SetTypeStatus(ctx, "a:b", "9.9.9", "deprecado", &e); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("status of an unknown version: %v", err)
		}
		all, err := db.TypeVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, v := range all {
			keys = append(keys, v.Tipo+"@"+v.Versao+":"+v.Status)
		}
		if want := []string{"a:a@1.0.0:ativo", "a:b@1.0.0:deprecado", "a:b@1.1.0:ativo"}; !slices.Equal(keys, want) {
			t.Fatalf("registry %v, want %v", keys, want)
		}
		if n := len(auditAll(t, db, app.AuditFilter{QuemNome: "ana"})); n != 1 {
			t.Fatalf("%d audit entries, want 1 (the insert that created)", n)
		}
	})

	t.Run("tokens: a revoked token is not found, and its entry gets its name", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		tok := app.Token{ID: "t1", Nome: "painel", Papel: app.PapelLeitor, CriadoEm: now}
		if err := db.InsertToken(ctx, tok, "h1", nil); err != nil {
			t.Fatal(err)
		}
		if err := db.InsertToken(ctx, app.Token{ID: "t2", Nome: "x", Papel: app.PapelLeitor, CriadoEm: now}, "h1", nil); err == nil {
			t.Fatal("two tokens with one hash")
		}
		got, err := db.TokenByHash(ctx, "h1")
		if err != nil || got != tok {
			t.Fatalf("token %+v %v, want %+v", got, err, tok)
		}
		e := &app.AuditEntry{Quem: app.System, Acao: app.AcaoTokenRevogar, Alvo: app.AuditTarget{Tipo: "token", ID: "t1"},
			Resultado: app.AuditOK}
		if err := db.RevokeToken(ctx, "t1", now, e); err != nil {
			t.Fatal(err)
		}
		if _, err := db.TokenByHash(ctx, "h1"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("a revoked token still authenticates: %v", err)
		}
		if err := db.RevokeToken(ctx, "t1", now, e); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("revoking twice: %v", err)
		}
		rows := auditAll(t, db, app.AuditFilter{Alvo: "t1"})
		if len(rows) != 1 || rows[0].Alvo.Nome != "painel" {
			t.Fatalf("revocation recorded as %+v, want one entry naming the token", rows)
		}
	})

	t.Run("operators: logins are unique, and only an active admin adds one", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		admin := app.Operator{ID: uuid.NewString(), Login: "chefe", Papel: app.PapelAdmin, CriadoEm: now, Ativo: true}
		e := entry("geohub", app.AcaoOperadorCriar, admin.ID)
		if ok, err := db.InsertOperator(ctx, "", admin, "hash-chefe", &e); err != nil || !ok {
			t.Fatalf("first admin: %v %v", ok, err)
		}
		dup := admin
		dup.ID = uuid.NewString()
		if ok, err := db.InsertOperator(ctx, "", dup, "x", &e); err != nil || ok {
			t.Fatalf("a second account with one login: %v %v", ok, err)
		}
		leitor := app.Operator{ID: uuid.NewString(), Login: "maria", Papel: app.PapelLeitor, CriadoEm: now, Ativo: true}
		if ok, err := db.InsertOperator(ctx, admin.ID, leitor, "hash-maria", nil); err != nil || !ok {
			t.Fatalf("an admin adds an account: %v %v", ok, err)
		}
		third := app.Operator{ID: uuid.NewString(), Login: "jose", Papel: app.PapelLeitor, CriadoEm: now, Ativo: true}
		if _, err := db.InsertOperator(ctx, leitor.ID, third, "x", nil); app.ErrorCode(err) != app.EForbidden {
			t.Fatalf("a leitor adds an account: %v", err)
		}
		got, hash, err := db.OperatorByLogin(ctx, "maria")
		if err != nil || got != leitor || hash != "hash-maria" {
			t.Fatalf("OperatorByLogin = %+v %q %v, want %+v", got, hash, err, leitor)
		}
		if _, _, err := db.OperatorByLogin(ctx, "jose"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("unknown login: %v", err)
		}
		ops, err := db.Operators(ctx)
		if err != nil || len(ops) != 2 || ops[0].Login != "chefe" || ops[1].Login != "maria" {
			t.Fatalf("operators %+v %v", ops, err)
		}
		if n := len(auditAll(t, db, app.AuditFilter{QuemNome: "geohub"})); n != 1 {
			t.Fatalf("%d entries for one account created, want 1", n)
		}
	})

	t.Run("sessions: expiry, logout, password changes and deactivation end them", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		admin := app.Operator{ID: uuid.NewString(), Login: "chefe", Papel: app.PapelAdmin, CriadoEm: now, Ativo: true}
		op := app.Operator{ID: uuid.NewString(), Login: "maria", Papel: app.PapelOperador, CriadoEm: now, Ativo: true}
		for _, o := range []app.Operator{admin, op} {
			if _, err := db.InsertOperator(ctx, "", o, "x", nil); err != nil {
				t.Fatal(err)
			}
		}
		open := func(hash string, o app.Operator, at time.Time) {
			t.Helper()
			if err := db.InsertSession(ctx, hash, o.ID, at, at.Add(time.Hour), nil); err != nil {
				t.Fatal(err)
			}
		}
		live := func(hash string, at time.Time) bool {
			t.Helper()
			o, err := db.SessionOperator(ctx, hash, at)
			if errors.Is(err, app.ErrNotFound) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			return o.ID != ""
		}
		open("s1", op, now)
		if o, err := db.SessionOperator(ctx, "s1", now); err != nil || o != op {
			t.Fatalf("session operator %+v %v, want %+v", o, err, op)
		}
		if live("s1", now.Add(time.Hour)) {
			t.Fatal("a session outlived its expiry")
		}
		// A login after the expiry removes the expired session.
		open("s2", op, now.Add(2*time.Hour))
		if live("s1", now) {
			t.Fatal("an expired session survived a later login")
		}
		out := &app.AuditEntry{Quem: app.System, Acao: app.AcaoLogout, Alvo: app.AuditTarget{Tipo: "operador", ID: op.ID},
			Resultado: app.AuditOK}
		for range 2 {
			if err := db.DeleteSession(ctx, "s2", out); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(auditAll(t, db, app.AuditFilter{Acao: app.AcaoLogout})); n != 1 {
			t.Fatalf("%d logout entries, want 1: a second logout ended nothing", n)
		}

		t0 := now.Add(3 * time.Hour)
		open("a", op, t0)
		open("b", op, t0)
		open("adm", admin, t0)
		if err := db.SetOperatorPassword(ctx, op.ID, "novo", "a", nil); err != nil {
			t.Fatal(err)
		}
		if !live("a", t0) || live("b", t0) || !live("adm", t0) {
			t.Fatal("a password change keeps the session that made it and ends the operator's others only")
		}
		if _, h, _ := db.OperatorByLogin(ctx, "maria"); h != "novo" {
			t.Fatalf("password hash %q, want novo", h)
		}
		if err := db.SetOperatorPassword(ctx, "nao-existe", "x", "", nil); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("password of an unknown account: %v", err)
		}
		if err := db.ResetOperatorPassword(ctx, admin.ID, op.ID, "redefinida", nil); err != nil {
			t.Fatal(err)
		}
		if live("a", t0) {
			t.Fatal("a reset left a session")
		}
		if err := db.ResetOperatorPassword(ctx, op.ID, admin.ID, "x", nil); app.ErrorCode(err) != app.EForbidden {
			t.Fatalf("a non-admin resets a password: %v", err)
		}

		open("c", op, t0)
		off := entry("chefe", app.AcaoOperadorDesativar, op.ID)
		off.Campos = []app.AuditField{app.Set("ativo", false)}
		if err := db.SetOperatorActive(ctx, "", op.ID, false, nil); app.ErrorCode(err) != app.EForbidden {
			t.Fatalf("the server deactivates an account: %v", err)
		}
		if err := db.SetOperatorActive(ctx, admin.ID, op.ID, false, &off); err != nil {
			t.Fatal(err)
		}
		if live("c", t0) {
			t.Fatal("a deactivated operator kept a session")
		}
		// A session inserted after the deactivation (a login racing it) is
		// refused too.
		open("d", op, t0)
		if live("d", t0) {
			t.Fatal("a deactivated operator's session authenticates")
		}
		if o, _, _ := db.OperatorByLogin(ctx, "maria"); o.Ativo {
			t.Fatal("the account is still active")
		}
		rows := auditAll(t, db, app.AuditFilter{Acao: app.AcaoOperadorDesativar})
		if len(rows) != 1 || rows[0].Alvo.Nome != "maria" || string(rows[0].Campos[0].De) != "true" ||
			string(rows[0].Campos[0].Para) != "false" {
			t.Fatalf("deactivation recorded as %+v", rows)
		}
		if err := db.SetOperatorActive(ctx, admin.ID, "nao-existe", false, &off); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("deactivating an unknown account: %v", err)
		}
		if err := db.SetOperatorActive(ctx, admin.ID, "nao-existe", true, nil); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("activating an unknown account without an entry: %v", err)
		}
		if err := db.SetOperatorActive(ctx, admin.ID, op.ID, true, nil); err != nil {
			t.Fatal(err)
		}
		if live("d", t0) {
			t.Fatal("a reactivation brought back a session from before it")
		}
	})

	t.Run("operators: a role change reads the previous value in its transaction", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		o := app.Operator{ID: uuid.NewString(), Login: "maria", Papel: app.PapelLeitor, CriadoEm: now, Ativo: true}
		admin := app.Operator{ID: uuid.NewString(), Login: "chefe", Papel: app.PapelAdmin, CriadoEm: now, Ativo: true}
		for _, x := range []app.Operator{o, admin} {
			if _, err := db.InsertOperator(ctx, "", x, "x", nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.InsertSession(ctx, "s", o.ID, now, now.Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		e := &app.AuditEntry{Quem: app.System, Acao: app.AcaoOperadorPapelAlterar, Alvo: app.AuditTarget{Tipo: "operador", ID: o.ID},
			Campos: []app.AuditField{app.Set("papel", app.PapelOperador)}, Resultado: app.AuditOK}
		if err := db.SetOperatorRole(ctx, "", o.ID, app.PapelOperador, e); app.ErrorCode(err) != app.EForbidden {
			t.Fatalf("the server changes a role: %v", err)
		}
		if err := db.SetOperatorRole(ctx, admin.ID, o.ID, app.PapelOperador, e); err != nil {
			t.Fatal(err)
		}
		rows := auditAll(t, db, app.AuditFilter{Alvo: o.ID})
		if len(rows) != 1 || rows[0].Alvo.Nome != "maria" || string(rows[0].Campos[0].De) != `"leitor"` ||
			string(rows[0].Campos[0].Para) != `"operador"` {
			t.Fatalf("role change recorded as %+v", rows)
		}
		if got, err := db.SessionOperator(ctx, "s", now); err != nil || got.Papel != app.PapelOperador {
			t.Fatalf("the session after a role change: %+v %v; sessions stay and read the new role", got, err)
		}
		if err := db.SetOperatorRole(ctx, admin.ID, o.ID, "chefe", nil); err == nil {
			t.Fatal("a role outside the CHECK was stored")
		}
	})

	t.Run("cursors never pass an open failure, nor go back", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		var evs []app.Event
		for range 5 {
			evs = append(evs, appendEvent(t, db, NewEvent("a:b"), nil))
		}
		if err := db.SeedCursor(ctx, "c", "a:b", 0); err != nil {
			t.Fatal(err)
		}
		if err := db.SeedCursor(ctx, "c", "a:b", 4); err != nil { // seeding never overwrites
			t.Fatal(err)
		}
		if err := db.SeedCursor(ctx, "c", "a:c", 2); err != nil {
			t.Fatal(err)
		}
		fail := evs[2]
		if err := db.RecordFailure(ctx, app.DLQEntry{EventID: fail.EventID, Sequence: fail.Sequence, Tipo: "a:b",
			Colonia: "c", HandlerNome: "h", MensagemErro: "boom", UltimaTentativa: now, CriadoEm: now}); err != nil {
			t.Fatal(err)
		}
		if err := db.AdvanceCursors(ctx, "c", map[string]int64{"a:b": 5, "a:c": 5}); err != nil {
			t.Fatal(err)
		}
		cur, _ := db.Cursors(ctx, "c")
		if cur["a:b"] != fail.Sequence-1 || cur["a:c"] != 5 {
			t.Fatalf("cursors = %v, want a:b %d (just before the failure) and a:c 5 (another type's failure)",
				cur, fail.Sequence-1)
		}
		if err := db.SetDLQStatus(ctx, fail.EventID, "c", app.DLQResolved); err != nil {
			t.Fatal(err)
		}
		if err := db.AdvanceCursors(ctx, "c", map[string]int64{"a:b": 5}); err != nil {
			t.Fatal(err)
		}
		if cur, _ = db.Cursors(ctx, "c"); cur["a:b"] != 5 {
			t.Fatalf("cursor = %d after resolution, want 5", cur["a:b"])
		}
		if err := db.AdvanceCursors(ctx, "c", map[string]int64{"a:b": 3}); err != nil {
			t.Fatal(err)
		}
		if cur, _ = db.Cursors(ctx, "c"); cur["a:b"] != 5 {
			t.Fatalf("cursor moved backwards to %d", cur["a:b"])
		}
		if err := db.AdvanceCursors(ctx, "outra", map[string]int64{"a:b": 3}); err != nil {
			t.Fatal(err)
		}
		if cur, _ := db.Cursors(ctx, "outra"); len(cur) != 0 {
			t.Fatalf("advancing an unseeded cursor created %v", cur)
		}
		if cur, _ := db.Cursors(ctx, ocorrencia.Colonia); len(cur) != 4 || cur[ocorrencia.TipoRegistrada] != 0 {
			t.Fatalf("the read model's cursors %v, want its four types seeded at 0", cur)
		}
	})

	t.Run("the DLQ's life: pendente, retrying, resolved, reopened, failed_permanent", func(t *testing.T) {
		u, db := fresh(t)
		ctx := t.Context()
		ev := appendEvent(t, db, NewEvent("a:b"), nil)
		fail := func() {
			t.Helper()
			if err := db.RecordFailure(ctx, app.DLQEntry{EventID: ev.EventID, Sequence: ev.Sequence, Tipo: "a:b", Colonia: "c",
				HandlerNome: "h", MensagemErro: "boom", UltimaTentativa: time.Now(), CriadoEm: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		check := func(step, status string, tentativas int, stamped bool) {
			t.Helper()
			st, n, resolved := u.DLQRow(t, ev.EventID, "c")
			if st != status || n != tentativas || resolved != stamped {
				t.Fatalf("%s: status %s, tentativas %d, resolvido_em set %v; want %s, %d, %v",
					step, st, n, resolved, status, tentativas, stamped)
			}
		}
		fail()
		check("first failure", app.DLQPendente, 1, false)
		if err := db.SetDLQStatus(ctx, ev.EventID, "c", app.DLQRetrying); err != nil {
			t.Fatal(err)
		}
		check("reprocessing", app.DLQRetrying, 1, false)
		if open, err := db.DLQOpen(ctx, "c", 10); err != nil || len(open) != 1 || open[0].Status != app.DLQRetrying {
			t.Fatalf("a retrying entry is open: %+v %v", open, err)
		}
		if err := db.SetDLQStatus(ctx, ev.EventID, "c", app.DLQResolved); err != nil {
			t.Fatal(err)
		}
		check("resolved", app.DLQResolved, 1, true)
		fail()
		check("a new failure reopens it", app.DLQPendente, 2, false)
		for n := 3; n < app.MaxDLQAttempts; n++ {
			fail()
			check("failure", app.DLQPendente, n, false)
		}
		fail()
		check("the last attempt", app.DLQFailedPermanent, app.MaxDLQAttempts, true)
		fail()
		check("a failure after giving up", app.DLQFailedPermanent, app.MaxDLQAttempts+1, true)
		if open, err := db.DLQOpen(ctx, "c", 10); err != nil || len(open) != 0 {
			t.Fatalf("open entries %v %v", open, err)
		}
		if err := db.SetDLQStatus(ctx, "nao-existe", "c", app.DLQResolved); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("unknown entry: %v", err)
		}
	})

	t.Run("DLQ reads: open entries in log order, stats per colonia, newest first", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		var evs []app.Event
		for range 6 {
			evs = append(evs, appendEvent(t, db, NewEvent("a:b"), nil))
		}
		at := now.Add(-time.Minute)
		record := func(ev app.Event, colonia string) {
			t.Helper()
			if err := db.RecordFailure(ctx, app.DLQEntry{EventID: ev.EventID, Sequence: ev.Sequence, Tipo: ev.Tipo,
				Colonia: colonia, HandlerNome: "h-" + colonia, MensagemErro: "boom", PilhaErro: "pilha",
				UltimaTentativa: at, CriadoEm: at}); err != nil {
				t.Fatal(err)
			}
		}
		// Recorded out of log order.
		for _, i := range []int{4, 1, 3} {
			record(evs[i], "c")
		}
		record(evs[0], "d")
		record(evs[5], "d")
		if err := db.SetDLQStatus(ctx, evs[5].EventID, "d", app.DLQResolved); err != nil {
			t.Fatal(err)
		}
		open, err := db.DLQOpen(ctx, "c", 10)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, e := range open {
			seqs = append(seqs, e.Sequence)
		}
		if want := []int64{evs[1].Sequence, evs[3].Sequence, evs[4].Sequence}; !slices.Equal(seqs, want) {
			t.Fatalf("open entries at %v, want %v (log order)", seqs, want)
		}
		e := open[0]
		if e.EventID != evs[1].EventID || e.Colonia != "c" || e.HandlerNome != "h-c" || e.MensagemErro != "boom" ||
			e.PilhaErro != "pilha" || e.Tentativas != 1 || e.Status != app.DLQPendente || !e.UltimaTentativa.Equal(at) ||
			!e.CriadoEm.Equal(at) || e.ResolvidoEm != nil || e.Tipo != "a:b" {
			t.Fatalf("entry read back as %+v", e)
		}
		if two, _ := db.DLQOpen(ctx, "c", 2); len(two) != 2 {
			t.Fatalf("limit 2 gave %d", len(two))
		}
		st, err := db.DLQStats(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if st.TotalPendentes != 4 || st.PendentesPorColonia["c"] != 3 || st.PendentesPorColonia["d"] != 1 ||
			len(st.PendentesPorColonia) != 2 {
			t.Fatalf("stats %+v", st)
		}
		if len(st.Entradas) != 2 || st.Entradas[0].EventID != evs[0].EventID || st.Entradas[1].EventID != evs[3].EventID {
			t.Fatalf("newest open entries %+v, want the last two recorded", st.Entradas)
		}
		if st, err := db.DLQStats(ctx, 0); err != nil || len(st.Entradas) != 0 || st.TotalPendentes != 4 {
			t.Fatalf("stats without entries: %+v %v", st, err)
		}
	})

	t.Run("one failing operation does not undo its group commit", func(t *testing.T) {
		_, db := fresh(t)
		// A DLQ entry must name an existing event (a foreign key): this one
		// fails inside the group transaction while appends around it succeed.
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 100 {
			wg.Go(func() {
				if i%10 == 0 {
					errs <- db.RecordFailure(context.Background(), app.DLQEntry{EventID: "missing", Colonia: "c", Tipo: "a:b",
						HandlerNome: "h", MensagemErro: "x", UltimaTentativa: time.Now(), CriadoEm: time.Now()})
					return
				}
				_, err := db.Append(context.Background(), []app.Pending{{Event: NewEvent("a:b")}})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			if err != nil {
				if !strings.Contains(strings.ToLower(err.Error()), "foreign key") {
					t.Errorf("unexpected error: %v", err)
				}
				failed++
			}
		}
		if failed != 10 {
			t.Fatalf("%d operations failed, want the 10 bad ones", failed)
		}
		if n, _ := db.CountEvents(t.Context()); n != 90 {
			t.Fatalf("log holds %d rows, want 90", n)
		}
	})

	t.Run("stats: events per minute of their timestamp, deliveries by status", func(t *testing.T) {
		u, db := fresh(t)
		ctx := t.Context()
		base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		for _, off := range []time.Duration{0, 10 * time.Second, 59999 * time.Millisecond, time.Minute, 3*time.Minute + time.Second,
			-time.Millisecond, 10 * time.Minute} {
			ev := NewEvent("a:b")
			ev.Timestamp = base.Add(off)
			appendEvent(t, db, ev, nil)
		}
		got, err := db.EventsPerMinute(ctx, base, base.Add(10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		want := []app.MinuteCount{{Minuto: base, N: 3}, {Minuto: base.Add(time.Minute), N: 1}, {Minuto: base.Add(3 * time.Minute), N: 1}}
		if !slices.EqualFunc(got, want, func(a, b app.MinuteCount) bool { return a.Minuto.Equal(b.Minuto) && a.N == b.N }) {
			t.Fatalf("per minute %v, want %v", got, want)
		}
		if n, err := db.OutboxBacklog(ctx); err != nil || n != 0 {
			t.Fatalf("empty backlog: %d %v", n, err)
		}
		u.AddIntegrator(t, "int-a")
		u.AddIntegrator(t, "int-b")
		for range 3 {
			ev := NewEvent("a:b")
			if _, err := db.Append(ctx, []app.Pending{{Event: ev, Outbox: &app.Outbox{Body: []byte(`{}`), Agregado: "x:1",
				Recipients: func(string) []string { return []string{"int-a", "int-b"} }}}}); err != nil {
				t.Fatal(err)
			}
		}
		counts, err := db.DeliveryCounts(ctx)
		if err != nil || len(counts) != 1 || counts[app.EntregaPendente] != 6 {
			t.Fatalf("delivery counts %v %v, want 6 pendente", counts, err)
		}
		if n, err := db.OutboxBacklog(ctx); err != nil || n != 6 {
			t.Fatalf("backlog %d %v, want 6", n, err)
		}
	})

	t.Run("audit: the trail is append-only", func(t *testing.T) {
		u, db := fresh(t)
		for i := range 3 {
			if err := db.AppendAudit(t.Context(), entry("ana", app.AcaoIntegradorDesativar, fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		// Straight at the database, as a mistaken code path or a curious
		// operator with a SQL shell would: the triggers refuse both.
		for _, stmt := range []string{
			`UPDATE audit_log SET quem_nome = 'outra pessoa'`,
			`UPDATE audit_log SET resultado = 'recusado' WHERE id = 1`,
			`DELETE FROM audit_log WHERE id = 2`,
			`DELETE FROM audit_log`,
		} {
			err := u.Exec(t, stmt)
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
	})

	t.Run("audit: pages newest first by keyset, and every filter", func(t *testing.T) {
		t.Parallel()
		base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		clock := NewClock(base)
		db := open(t, clock.Now).DB
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
			e := entry(r.quem, r.acao, r.alvo)
			e.Codigo, e.Detalhe = app.EForbidden, "detalhe"
			if err := db.AppendAudit(t.Context(), e); err != nil {
				t.Fatal(err)
			}
			want = append(want, r)
		}
		slices.Reverse(want) // newest first

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
			if e.Quem.ID != "id-"+w.quem || e.Quem.Tipo != app.ActorOperador || e.Quem.Papel != app.PapelAdmin ||
				e.Endereco != "192.0.2.7" || e.Alvo.Tipo != "integrador" || e.Codigo != app.EForbidden ||
				e.Detalhe != "detalhe" || len(e.Campos) != 1 || e.Campos[0].Campo != "ativo" ||
				string(e.Campos[0].De) != "true" || string(e.Campos[0].Para) != "false" {
				t.Fatalf("row %d read back as %+v", i, e)
			}
		}
		rows, more, err := db.AuditEntries(t.Context(), app.AuditFilter{Limite: 60})
		if err != nil || len(rows) != 60 || more {
			t.Fatalf("an exact page: %d rows, more %v, %v", len(rows), more, err)
		}
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
		check(t, app.AuditFilter{QuemNome: "bruno"}, func(r row) bool { return r.quem == "bruno" })
		check(t, app.AuditFilter{QuemID: "id-carla"}, func(r row) bool { return r.quem == "carla" })
		check(t, app.AuditFilter{Acao: app.AcaoLoginFalhou}, func(r row) bool { return r.acao == app.AcaoLoginFalhou })
		check(t, app.AuditFilter{Alvo: "alvo-3"}, func(r row) bool { return r.alvo == "alvo-3" })
		check(t, app.AuditFilter{Inicio: from, Fim: until}, func(r row) bool { return !r.em.Before(from) && r.em.Before(until) })
		check(t, app.AuditFilter{Inicio: from}, func(r row) bool { return !r.em.Before(from) })
		check(t, app.AuditFilter{Fim: until}, func(r row) bool { return r.em.Before(until) })
		check(t, app.AuditFilter{Inicio: base.Add(-time.Hour), Fim: base.Add(-time.Minute)}, func(row) bool { return false })
		check(t, app.AuditFilter{Inicio: base.Add(24 * time.Hour)}, func(row) bool { return false })
		check(t, app.AuditFilter{QuemNome: "ana", Acao: app.AcaoIntegradorDesativar, Inicio: base, Fim: base.Add(time.Hour)},
			func(r row) bool { return r.quem == "ana" && r.acao == app.AcaoIntegradorDesativar })
	})

	t.Run("audit: an entry is stored within its bounds", func(t *testing.T) {
		_, db := fresh(t)
		big := entry("ana", app.AcaoAcessoNegado, "POST /api/integradores/"+strings.Repeat("A", 900_000)+"/verificar")
		big.Alvo.Tipo, big.Quem.Nome = "rota", strings.Repeat("n", 10_000)
		big.Detalhe, big.Campos = strings.Repeat("d", 100_000), nil
		for i := range 40 {
			big.Campos = append(big.Campos, app.Set(fmt.Sprintf("campo_%d", i), strings.Repeat("v", 50_000)))
		}
		if err := db.AppendAudit(t.Context(), big); err != nil {
			t.Fatal(err)
		}
		rows := auditAll(t, db, app.AuditFilter{})
		if len(rows) != 1 {
			t.Fatalf("%d rows", len(rows))
		}
		r := rows[0]
		if size := r.Size(); size > 200_000 {
			t.Errorf("the stored entry takes %d bytes", size)
		}
		if utf8.RuneCountInString(r.Alvo.ID) > 512 || !strings.HasSuffix(r.Alvo.ID, "…") || !strings.HasPrefix(r.Alvo.ID, "POST /api/integradores/AAA") {
			t.Errorf("alvo.id kept %d bytes: %.40q…", len(r.Alvo.ID), r.Alvo.ID)
		}
		if utf8.RuneCountInString(r.Quem.Nome) > 512 || utf8.RuneCountInString(r.Detalhe) > 4096 || len(r.Campos) != 32 ||
			r.Campos[31].Campo != "campos_omitidos" || string(r.Campos[31].Para) != "9" {
			t.Errorf("quem.nome %d bytes, detalhe %d, %d campos (last %+v)", len(r.Quem.Nome), len(r.Detalhe), len(r.Campos), r.Campos[len(r.Campos)-1])
		}
		var v string
		if err := json.Unmarshal(r.Campos[0].Para, &v); err != nil || !strings.HasSuffix(v, "(valor de 50002 bytes, cortado)") {
			t.Errorf("a long value is kept as %q (%v)", v, err)
		}
	})

	t.Run("audit: a page stops at AuditPageBytes and says more follow", func(t *testing.T) {
		_, db := fresh(t)
		// As large as an entry may be: every field at its bound.
		big := entry("ana", app.AcaoLogin, strings.Repeat("x", 512))
		big.Detalhe = strings.Repeat("d", 4096)
		for i := range 32 {
			big.Campos = append(big.Campos, app.Changed(fmt.Sprintf("campo_%d", i), strings.Repeat("a", 4000), strings.Repeat("b", 4000)))
		}
		for range 12 {
			if err := db.AppendAudit(t.Context(), big); err != nil {
				t.Fatal(err)
			}
		}
		rows, more, err := db.AuditEntries(t.Context(), app.AuditFilter{Limite: 100})
		if err != nil || !more || len(rows) == 0 || len(rows) >= 12 {
			t.Fatalf("%d rows, more %v, %v: want a page cut by size", len(rows), more, err)
		}
		if n := len(auditAll(t, db, app.AuditFilter{Limite: 100})); n != 12 {
			t.Fatalf("paging by size gave %d rows, want 12", n)
		}
	})

	t.Run("audit: time never goes back in id order", func(t *testing.T) {
		t.Parallel()
		base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		clock := NewClock(base)
		db := open(t, clock.Now).DB
		for _, at := range []time.Time{base, base.Add(time.Minute), base.Add(-time.Hour), base.Add(2 * time.Minute)} {
			clock.Set(at)
			if err := db.AppendAudit(t.Context(), entry("ana", app.AcaoLogin, "x")); err != nil {
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
	})

	t.Run("audit: an entry commits with its change, or neither does", func(t *testing.T) {
		_, db := fresh(t)
		ctx := t.Context()
		tv := app.TypeVersion{Tipo: "a:b", Versao: "1.0.0", Status: "ativo", Audiencia: "todos",
			Schema: json.RawMessage(`{}`), CriadoEm: now}
		if _, _, err := db.InsertTypeVersion(ctx, tv, nil); err != nil {
			t.Fatal(err)
		}
		bad := entry("ana", app.AcaoRegistroDescontinuar, "a:b@1.0.0")
		bad.Resultado = "talvez" // refused by the table's CHECK
		if err := db.SetTypeStatus(ctx, "a:b", "1.0.0", "deprecado", &bad); err == nil {
			t.Fatal("the change committed without its audit row")
		}
		if all, _ := db.TypeVersions(ctx); len(all) != 1 || all[0].Status != "ativo" {
			t.Fatalf("the type changed without its audit row: %+v", all)
		}
		ghost := entry("ana", app.AcaoRegistroDescontinuar, "nao-existe")
		if err := db.SetTypeStatus(ctx, "nao-existe", "1.0.0", "deprecado", &ghost); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("status of an unknown type: %v", err)
		}
		if rows := auditAll(t, db, app.AuditFilter{Alvo: "nao-existe"}); len(rows) != 0 {
			t.Fatalf("%d audit rows for a change that did not happen", len(rows))
		}

		// In a group commit, a failing operation takes only its own entry.
		var wg sync.WaitGroup
		errs := make([]error, 40)
		for i := range errs {
			wg.Go(func() {
				tipo, status := "a:b", []string{"ativo", "deprecado"}[i/2%2]
				if i%2 == 1 {
					tipo = fmt.Sprintf("fantasma:%d", i) // ErrNotFound inside the batch
				}
				e := entry("bruno", app.AcaoRegistroReativar, tipo)
				errs[i] = db.SetTypeStatus(context.Background(), tipo, "1.0.0", status, &e)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if (i%2 == 1) != errors.Is(err, app.ErrNotFound) {
				t.Fatalf("operation %d: %v", i, err)
			}
		}
		rows := auditAll(t, db, app.AuditFilter{QuemNome: "bruno"})
		if len(rows) != 20 {
			t.Fatalf("%d entries, want one per successful change (20)", len(rows))
		}
		for _, r := range rows {
			if r.Alvo.ID != "a:b" {
				t.Fatalf("an entry of a failed change survived: %+v", r)
			}
		}

		// A command's entry commits with its new outcome event, once.
		ev := NewEvent("plano:auditoria")
		e := entry("carla", app.AcaoOcorrenciaRegistrar, "oc-1")
		for range 2 { // the second is a repeat of the same event_id
			appendEvent(t, db, ev, &e)
		}
		if rows := auditAll(t, db, app.AuditFilter{QuemNome: "carla"}); len(rows) != 1 {
			t.Fatalf("%d entries for one event appended twice, want 1", len(rows))
		}
	})

	ocorrenciasConformance(t, func(t *testing.T) Stores { _, db := fresh(t); return db })
}

// ocorrenciasConformance checks the ocorrências read model.
func ocorrenciasConformance(t *testing.T, fresh func(t *testing.T) Stores) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	desp := func(id string, status ...string) []ocorrencia.Despacho {
		out := []ocorrencia.Despacho{}
		for i, s := range status {
			out = append(out, ocorrencia.Despacho{ID: fmt.Sprintf("%s-d%d", id[:8], i), OcorrenciaID: id,
				Recurso: ocorrencia.Recurso{Identificador: fmt.Sprintf("UR-%d", i+1)}, Status: s})
		}
		return out
	}

	// A row is replaced only by a fold that saw at least as much of the log:
	// a fold that read before a later one committed (a slow handler, one
	// that timed out and returned late) must not take the row back.
	t.Run("ocorrências: a save never goes back", func(t *testing.T) {
		db := fresh(t)
		id := uuid.NewString()
		row := func(versao int, ultima int64, status string, d []ocorrencia.Despacho) ocorrencia.Summary {
			return ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{ID: id, Natureza: "incendio", Status: status,
				Versao: versao, Despachos: d}, Integrador: "int-1", RegistradaEm: at,
				AtualizadaEm: at.Add(time.Duration(versao) * time.Minute), Cursor: 7, UltimaSequencia: ultima}
		}
		newer := row(3, 30, ocorrencia.EmAtendimento, desp(id, ocorrencia.NoLocal, ocorrencia.EmDeslocamento))
		for _, s := range []ocorrencia.Summary{
			row(1, 7, ocorrencia.Aberta, desp(id)),
			newer,
			newer, // a replay: the same fold again
			row(2, 20, ocorrencia.Aberta, desp(id, ocorrencia.EmDeslocamento)), // late, stale
		} {
			if err := db.SaveOcorrencia(t.Context(), s); err != nil {
				t.Fatal(err)
			}
		}
		got, cut, err := db.Ocorrencias(t.Context(), ocorrencia.Filter{Limite: 10})
		if err != nil || cut {
			t.Fatal(err, cut)
		}
		if len(got) != 1 {
			t.Fatalf("%d rows, want 1", len(got))
		}
		g := got[0]
		if g.Versao != 3 || g.Status != ocorrencia.EmAtendimento || g.UltimaSequencia != 30 || g.Integrador != "int-1" ||
			!g.RegistradaEm.Equal(at) || !g.AtualizadaEm.Equal(newer.AtualizadaEm) || !slices.Equal(g.Despachos, newer.Despachos) {
			t.Fatalf("stored %+v, want %+v", g, newer)
		}
	})

	t.Run("ocorrências: pages newest first by keyset, and every filter", func(t *testing.T) {
		db := fresh(t)
		type row struct {
			seq                          int64
			status, natureza, integrador string
			em                           time.Time
		}
		naturezas := []string{"incendio", "acidente"}
		statuses := []string{ocorrencia.Aberta, ocorrencia.EmAtendimento, ocorrencia.Encerrada}
		var want []row
		for i := range 30 {
			r := row{int64(10 + 3*i), statuses[i%3], naturezas[i%2], []string{"", "int-1", "int-2"}[i%3],
				at.Add(time.Duration(i) * time.Minute)}
			id := uuid.NewString()
			var d []ocorrencia.Despacho
			if i%4 == 0 {
				d = desp(id, ocorrencia.EmDeslocamento, ocorrencia.NoLocal)
			}
			if err := db.SaveOcorrencia(t.Context(), ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{ID: id,
				Natureza: r.natureza, Status: r.status, Versao: 1 + len(d), Despachos: d}, Integrador: r.integrador,
				RegistradaEm: r.em, AtualizadaEm: r.em, Cursor: r.seq, UltimaSequencia: r.seq + 1}); err != nil {
				t.Fatal(err)
			}
			want = append(want, r)
		}
		slices.Reverse(want)
		check := func(t *testing.T, f ocorrencia.Filter, keep func(row) bool) {
			t.Helper()
			var exp []row
			for _, r := range want {
				if keep(r) {
					exp = append(exp, r)
				}
			}
			f.Limite = 4
			var got []ocorrencia.Summary
			for range 100 {
				rows, cut, err := db.Ocorrencias(t.Context(), f)
				if err != nil || cut {
					t.Fatal(err, cut)
				}
				got = append(got, rows...)
				if len(rows) < f.Limite {
					break
				}
				f.Antes = rows[len(rows)-1].Cursor
			}
			if len(got) != len(exp) {
				t.Fatalf("%d rows, want %d", len(got), len(exp))
			}
			for i, g := range got {
				e := exp[i]
				if g.Cursor != e.seq || g.Status != e.status || g.Natureza != e.natureza || g.Integrador != e.integrador ||
					!g.RegistradaEm.Equal(e.em) || g.UltimaSequencia != e.seq+1 {
					t.Fatalf("row %d = %+v, want %+v", i, g, e)
				}
				if wantD := (e.seq-10)/3%4 == 0; wantD != (len(g.Despachos) == 2) {
					t.Fatalf("row %d has despachos %+v", i, g.Despachos)
				}
				if len(g.Despachos) == 2 && (g.Despachos[0].Status != ocorrencia.EmDeslocamento ||
					g.Despachos[1].Recurso.Identificador != "UR-2" || g.Despachos[0].OcorrenciaID != g.ID) {
					t.Fatalf("row %d despachos out of order: %+v", i, g.Despachos)
				}
			}
		}
		from, until := at.Add(5*time.Minute), at.Add(17*time.Minute)
		check(t, ocorrencia.Filter{}, func(row) bool { return true })
		check(t, ocorrencia.Filter{Status: ocorrencia.Aberta}, func(r row) bool { return r.status == ocorrencia.Aberta })
		check(t, ocorrencia.Filter{Natureza: "acidente"}, func(r row) bool { return r.natureza == "acidente" })
		check(t, ocorrencia.Filter{Integrador: "int-2"}, func(r row) bool { return r.integrador == "int-2" })
		check(t, ocorrencia.Filter{Inicio: from, Fim: until}, func(r row) bool { return !r.em.Before(from) && r.em.Before(until) })
		check(t, ocorrencia.Filter{Natureza: "incendio", Integrador: "int-1", Fim: until},
			func(r row) bool { return r.natureza == "incendio" && r.integrador == "int-1" && r.em.Before(until) })
		if rows, _, err := db.Ocorrencias(t.Context(), ocorrencia.Filter{Limite: 4, Antes: 10}); err != nil || len(rows) != 0 {
			t.Fatalf("before the first: %d rows, %v", len(rows), err)
		}
	})

	t.Run("ocorrências: a page stops at app.PageBytes with whole rows", func(t *testing.T) {
		db := fresh(t)
		statuses := make([]string, 3000)
		for i := range statuses {
			statuses[i] = ocorrencia.NoLocal
		}
		for i := range 5 {
			id := uuid.NewString()
			if err := db.SaveOcorrencia(t.Context(), ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{ID: id,
				Natureza: "incendio", Status: ocorrencia.EmAtendimento, Versao: 1, Despachos: desp(id, statuses...)},
				RegistradaEm: at, AtualizadaEm: at, Cursor: int64(i + 1), UltimaSequencia: int64(i + 1)}); err != nil {
				t.Fatal(err)
			}
		}
		rows, cut, err := db.Ocorrencias(t.Context(), ocorrencia.Filter{Limite: 10})
		if err != nil || !cut || len(rows) == 0 || len(rows) >= 5 {
			t.Fatalf("%d rows, cut %v, %v: want a page cut by size", len(rows), cut, err)
		}
		for i, r := range rows {
			if r.Cursor != int64(5-i) || len(r.Despachos) != 3000 {
				t.Fatalf("row %d: cursor %d with %d despachos", i, r.Cursor, len(r.Despachos))
			}
		}
	})
}
