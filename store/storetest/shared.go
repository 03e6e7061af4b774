package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
)

// SharedStores is what SharedConformance checks: the state replicas share
// (app.SharedStore), with the cadastro whose changes move its version.
type SharedStores interface {
	app.SharedStore
	app.IntegratorStore
}

// SharedUnderTest is one fresh database of a backend: DB, and Again, which
// opens one more handle on the same database (another replica, on
// PostgreSQL; another handle of the one process, on SQLite).
type SharedUnderTest struct {
	DB    SharedStores
	Again func(t *testing.T) SharedStores
}

// SharedConformance checks, on a backend, the contracts of the state that
// one process used to keep in memory: login limits, the reprocess limit,
// the circuits and the cadastro's version.
func SharedConformance(t *testing.T, open func(t *testing.T) SharedUnderTest) {
	fresh := func(t *testing.T) SharedUnderTest {
		t.Helper()
		t.Parallel()
		return open(t)
	}
	const window, limit = 15 * time.Minute, 5
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	reserve := func(t *testing.T, db SharedStores, at time.Time, keys ...string) (string, time.Duration) {
		t.Helper()
		id, wait, err := db.ReserveLoginAttempt(t.Context(), keys, at, window, limit)
		if err != nil {
			t.Fatal(err)
		}
		return id, wait
	}

	t.Run("login: the attempt past the limit waits for the oldest to leave the window, and counts nothing", func(t *testing.T) {
		db := fresh(t).DB
		for i := range limit {
			if _, wait := reserve(t, db, at.Add(time.Duration(i)*time.Minute), "ip:192.0.2.1", "login:maria"); wait != 0 {
				t.Fatalf("attempt %d refused: wait %v", i+1, wait)
			}
		}
		_, wait := reserve(t, db, at.Add(10*time.Minute), "ip:198.51.100.9", "login:maria")
		if wait != 5*time.Minute {
			t.Fatalf("wait %v, want 5m (the first attempt leaves the window at 12:15)", wait)
		}
		// The refused attempt counted against neither key: the other
		// address is still free for another login.
		if _, wait := reserve(t, db, at.Add(11*time.Minute), "ip:198.51.100.9", "login:joao"); wait != 0 {
			t.Fatalf("a refused attempt was counted: wait %v", wait)
		}
		// At 12:15 the first attempt is out of the window: one more fits.
		if _, wait := reserve(t, db, at.Add(window), "ip:203.0.113.5", "login:maria"); wait != 0 {
			t.Fatalf("after the window: wait %v", wait)
		}
		if _, wait := reserve(t, db, at.Add(window+time.Second), "ip:203.0.113.6", "login:maria"); wait <= 0 {
			t.Fatal("a sixth attempt within the window was allowed")
		}
	})

	t.Run("login: a right password takes back its attempt and forgives the login, not the address", func(t *testing.T) {
		db := fresh(t).DB
		ctx := t.Context()
		for i := range limit - 1 {
			reserve(t, db, at.Add(time.Duration(i)*time.Second), "ip:192.0.2.1", "login:maria")
		}
		id, _ := reserve(t, db, at.Add(time.Minute), "ip:192.0.2.1", "login:maria")
		if err := db.ReleaseLoginAttempt(ctx, id, []string{"login:maria"}); err != nil {
			t.Fatal(err)
		}
		// The address keeps its four failures: one more fits, then it is
		// locked; the login starts from none.
		if _, wait := reserve(t, db, at.Add(2*time.Minute), "ip:192.0.2.1"); wait != 0 {
			t.Fatalf("the released attempt still counts: wait %v", wait)
		}
		if _, wait := reserve(t, db, at.Add(3*time.Minute), "ip:192.0.2.1"); wait <= 0 {
			t.Fatal("the address's failures were forgiven")
		}
		for i := range limit {
			if _, wait := reserve(t, db, at.Add(4*time.Minute), fmt.Sprintf("ip:198.51.100.%d", i), "login:maria"); wait != 0 {
				t.Fatalf("the login was not forgiven: attempt %d waits %v", i+1, wait)
			}
		}
	})

	t.Run("login: a flood of other keys neither lifts a lock nor resets a count", func(t *testing.T) {
		db := fresh(t).DB
		for i := range limit {
			reserve(t, db, at, fmt.Sprintf("ip:10.0.0.%d", i), "login:admin")
		}
		for i := range limit - 1 {
			reserve(t, db, at, fmt.Sprintf("ip:10.0.1.%d", i), "login:maria")
		}
		for i := range 300 {
			reserve(t, db, at.Add(time.Second), fmt.Sprintf("ip:2001:db8:%x::/64", i), fmt.Sprintf("login:x%d", i))
		}
		if _, wait := reserve(t, db, at.Add(2*time.Second), "ip:203.0.113.1", "login:admin"); wait <= 0 {
			t.Fatal("the flood lifted the lock on login:admin")
		}
		if _, wait := reserve(t, db, at.Add(2*time.Second), "ip:203.0.113.2", "login:maria"); wait != 0 {
			t.Fatalf("the fifth attempt was refused: %v", wait)
		}
		if _, wait := reserve(t, db, at.Add(3*time.Second), "ip:203.0.113.3", "login:maria"); wait <= 0 {
			t.Fatal("a sixth attempt was allowed: the flood reset the count")
		}
	})

	t.Run("login: attempts at once on two handles never pass the limit together", func(t *testing.T) {
		u := fresh(t)
		dbs := []SharedStores{u.DB, u.Again(t)}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for i := range 24 {
			wg.Go(func() {
				_, wait, err := dbs[i%2].ReserveLoginAttempt(context.Background(), []string{fmt.Sprintf("ip:192.0.2.%d", i), "login:maria"},
					at.Add(time.Duration(i)*time.Millisecond), window, limit)
				if err != nil {
					t.Error(err)
				}
				if wait == 0 {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := allowed.Load(); n != limit {
			t.Fatalf("%d attempts allowed at once, want %d", n, limit)
		}
	})

	t.Run("reprocess: once per interval per colônia, on every handle", func(t *testing.T) {
		u := fresh(t)
		a, b := u.DB, u.Again(t)
		ctx := t.Context()
		claim := func(db SharedStores, colonia string, at time.Time) time.Duration {
			t.Helper()
			wait, err := db.ClaimReprocess(ctx, colonia, at, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return wait
		}
		if w := claim(a, "ocorrencias", at); w != 0 {
			t.Fatalf("first claim waits %v", w)
		}
		if w := claim(b, "ocorrencias", at.Add(20*time.Second)); w != 40*time.Second {
			t.Fatalf("second claim within the minute: wait %v, want 40s", w)
		}
		if w := claim(b, "outra", at.Add(20*time.Second)); w != 0 {
			t.Fatalf("another colônia waits %v", w)
		}
		// The refused claim did not move the minute.
		if w := claim(a, "ocorrencias", at.Add(time.Minute)); w != 0 {
			t.Fatalf("after the minute: wait %v", w)
		}
		var won atomic.Int64
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				w, err := []SharedStores{a, b}[i%2].ClaimReprocess(context.Background(), "ocorrencias", at.Add(5*time.Minute), time.Minute)
				if err != nil {
					t.Error(err)
				}
				if w == 0 {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d claims at once succeeded, want 1", won.Load())
		}
	})

	t.Run("CAD sessions: one record per integrator, on every handle; a late save of an older session loses", func(t *testing.T) {
		u := fresh(t)
		a, b := u.DB, u.Again(t)
		ctx := t.Context()
		older := app.CADSessionRecord{Integrador: "cad-1", Sessao: "s1", Origem: "replica-a", Endereco: "10.0.0.1", Desde: at}
		newer := app.CADSessionRecord{Integrador: "cad-1", Sessao: "s2", Origem: "replica-b", Endereco: "10.0.0.2", Desde: at.Add(time.Second)}
		if err := b.SaveCADSession(ctx, newer); err != nil {
			t.Fatal(err)
		}
		if err := a.SaveCADSession(ctx, older); err != nil { // its write was held up
			t.Fatal(err)
		}
		r, ok, err := a.CADSessionRecord(ctx, "cad-1")
		if err != nil || !ok || r.Sessao != "s2" || r.Origem != "replica-b" || !r.Desde.Equal(newer.Desde) || !r.EncerradaEm.IsZero() {
			t.Fatalf("after a late save of an older session: %+v %v %v", r, ok, err)
		}
		if held, err := a.TouchCADSession(ctx, "cad-1", "s1", at.Add(2*time.Second), 3); err != nil || held {
			t.Fatalf("the older session's heartbeat: held %v, %v", held, err)
		}
		if held, err := b.TouchCADSession(ctx, "cad-1", "s2", at.Add(2*time.Second), 3); err != nil || !held {
			t.Fatalf("the newer session's heartbeat: held %v, %v", held, err)
		}
		if err := a.EndCADSession(ctx, "cad-1", "s1", at.Add(3*time.Second), "caiu"); err != nil {
			t.Fatal(err)
		}
		if err := b.EndCADSession(ctx, "cad-1", "s2", at.Add(4*time.Second), "o CAD fechou"); err != nil {
			t.Fatal(err)
		}
		all, err := a.CADSessionRecords(ctx)
		if err != nil || len(all) != 1 || all[0].Sessao != "s2" || all[0].Pendentes != 0 || all[0].Motivo != "o CAD fechou" ||
			!all[0].EncerradaEm.Equal(at.Add(4*time.Second)) || !all[0].VistoEm.Equal(at.Add(4*time.Second)) {
			t.Fatalf("the records: %+v %v", all, err)
		}
		if _, ok, err := a.CADSessionRecord(ctx, "cad-2"); ok || err != nil {
			t.Fatalf("an integrator without a session: %v %v", ok, err)
		}
	})

	t.Run("circuits: one row per integrator, the last write wins, each write one more version", func(t *testing.T) {
		u := fresh(t)
		a, b := u.DB, u.Again(t)
		ctx := t.Context()
		open := app.StoredCircuit{Integrador: "cad-1", Aberto: true, Desde: at, Ate: at.Add(30 * time.Second),
			Cooldown: 30 * time.Second, Falhas: 5, Origem: "replica-a"}
		if err := a.SaveCircuits(ctx, []app.StoredCircuit{open, {Integrador: "cad-2", Origem: "replica-a"}}); err != nil {
			t.Fatal(err)
		}
		got, err := b.Circuits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		open.Versao = 1
		if len(got) != 2 || got[0] != open || got[1].Aberto || got[1].Versao != 1 || !got[1].Ate.IsZero() {
			t.Fatalf("circuits %+v", got)
		}
		if err := b.SaveCircuits(ctx, []app.StoredCircuit{{Integrador: "cad-1", Origem: "replica-b"}}); err != nil {
			t.Fatal(err)
		}
		got, err = a.Circuits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (app.StoredCircuit{Integrador: "cad-1", Origem: "replica-b", Versao: 2}); len(got) != 2 || got[0] != want {
			t.Fatalf("after the close: %+v", got)
		}
	})

	t.Run("cadastro version: every change of an integrator moves it, on every handle", func(t *testing.T) {
		u := fresh(t)
		a, b := u.DB, u.Again(t)
		ctx := t.Context()
		version := func() int64 {
			t.Helper()
			v, err := b.CadastroVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		v0 := version()
		in := NewIntegrator("cad-versao", at)
		if err := a.InsertIntegrator(ctx, in, []byte("sealed"), "hash-versao", nil); err != nil {
			t.Fatal(err)
		}
		v1 := version()
		in.Ativo, in.AtualizadoEm = false, at.Add(time.Second)
		if err := a.UpdateIntegrator(ctx, in, nil); err != nil {
			t.Fatal(err)
		}
		v2 := version()
		if err := a.SetIntegratorSecret(ctx, in.ID, app.IntegratorSecrets{Atual: []byte("new"), Anterior: []byte("sealed"),
			AnteriorAte: at.Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
		v3 := version()
		if err := a.SetIntegratorAPIKey(ctx, in.ID, "hash-versao-2", nil); err != nil {
			t.Fatal(err)
		}
		v4 := version()
		if !(v0 < v1 && v1 < v2 && v2 < v3 && v3 < v4) {
			t.Fatalf("versions %d %d %d %d %d: each change must move it", v0, v1, v2, v3, v4)
		}
		if v := version(); v != v4 {
			t.Fatalf("a read moved it: %d, then %d", v4, v)
		}
	})
}
