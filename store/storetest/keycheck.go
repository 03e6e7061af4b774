package storetest

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"geohub/app"
	"geohub/app/keys"
	"geohub/store"
)

// KeyCheckConformance checks, on backend ("sqlite" or "postgres"), the
// master key's check (app.CheckMasterKey) through the backend's
// app.KeyCheckStore: the first open pins the key, later opens with another
// are refused, replicas starting together agree, and a database older than
// the check takes only a key that opens what it holds sealed.
func KeyCheckConformance(t *testing.T, backend string) {
	keyA, keyB := bytes.Repeat([]byte{0xa1}, 32), bytes.Repeat([]byte{0xb2}, 32)
	// fresh is a new database of the backend's; open opens one more handle
	// on it (another replica on PostgreSQL, another handle of the process
	// on SQLite), closed at cleanup.
	fresh := func(t *testing.T) string {
		t.Helper()
		t.Parallel()
		if backend == "postgres" {
			return PostgresDatabase(t)
		}
		return filepath.Join(t.TempDir(), store.FileName)
	}
	open := func(t *testing.T, loc string) Store {
		t.Helper()
		if backend == "postgres" {
			return OpenPostgres(t, loc, nil)
		}
		db, err := store.Open(context.Background(), loc, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return closed(t, db)
	}
	check := func(t *testing.T, db Store, key []byte) error {
		t.Helper()
		return app.CheckMasterKey(t.Context(), db, key)
	}
	stored := func(t *testing.T, db Store) []byte {
		t.Helper()
		v, err := db.KeyCheck(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// holding fills db as an earlier version left it, with no check: an
	// integrator whose secret secretKey sealed and, when bodyKey is set,
	// a delivery whose body it sealed (clear makes the body the clear
	// envelope an earlier version stored).
	holding := func(t *testing.T, db Store, secretKey, bodyKey []byte, clear bool) string {
		t.Helper()
		s, err := keys.NewSealer(secretKey)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		in := app.Integrator{ID: "samu", Nome: "samu", CallbackURL: "https://samu.exemplo.gov.br", Ativo: true,
			HostsPermitidos: []string{"samu.exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
		if err := db.InsertIntegrator(t.Context(), in, s.Seal([]byte("segredo"), in.ID), "hash-samu", nil); err != nil {
			t.Fatal(err)
		}
		if bodyKey == nil && !clear {
			return ""
		}
		ev := NewEvent("a:b")
		body := []byte(`{"a":1}`)
		if !clear {
			b, err := keys.NewSealer(bodyKey)
			if err != nil {
				t.Fatal(err)
			}
			body = b.SealBody(body, ev.EventID)
		}
		out := &app.Outbox{Body: body, Agregado: "x:1", Recipients: func(string) []string { return []string{in.ID} }}
		if _, err := db.Append(t.Context(), []app.Pending{{Event: ev, Full: ev.Payload, Outbox: out}}); err != nil {
			t.Fatal(err)
		}
		return ev.EventID
	}

	t.Run("the first open pins its key; later opens with it pass, with another are refused and change nothing", func(t *testing.T) {
		loc := fresh(t)
		db := open(t, loc)
		if v := stored(t, db); v != nil {
			t.Fatalf("a new database holds a check already: %x", v)
		}
		if err := check(t, db, keyA); err != nil {
			t.Fatal(err)
		}
		if v := stored(t, db); !bytes.Equal(v, keys.Check(keyA)) {
			t.Fatalf("stored %x, want key A's check %x", v, keys.Check(keyA))
		}
		if err := check(t, db, keyB); !errors.Is(err, app.ErrMasterKeyMismatch) {
			t.Fatalf("another key: %v, want ErrMasterKeyMismatch", err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		again := open(t, loc)
		if err := check(t, again, keyB); !errors.Is(err, app.ErrMasterKeyMismatch) {
			t.Fatalf("another key after a restart: %v, want ErrMasterKeyMismatch", err)
		}
		if err := check(t, again, keyA); err != nil {
			t.Fatalf("the key the database was first opened with: %v", err)
		}
		if v := stored(t, again); !bytes.Equal(v, keys.Check(keyA)) {
			t.Fatalf("the refused key changed the check: %x", v)
		}
	})

	t.Run("replicas starting together on an empty database keep one key: those given it start, the others refuse", func(t *testing.T) {
		loc := fresh(t)
		const replicas = 6
		dbs := make([]Store, replicas)
		for i := range dbs {
			dbs[i] = open(t, loc)
		}
		errs := make([]error, replicas)
		var ready, wg sync.WaitGroup
		ready.Add(replicas)
		start := make(chan struct{})
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := keyA
				if i%2 == 1 {
					key = keyB
				}
				ready.Done()
				<-start
				errs[i] = app.CheckMasterKey(context.Background(), db, key)
			}()
		}
		ready.Wait()
		close(start)
		wg.Wait()
		won := stored(t, dbs[0])
		for i, err := range errs {
			key := keyA
			if i%2 == 1 {
				key = keyB
			}
			switch mine := bytes.Equal(won, keys.Check(key)); {
			case mine && err != nil:
				t.Errorf("replica %d, given the key that was kept: %v", i, err)
			case !mine && !errors.Is(err, app.ErrMasterKeyMismatch):
				t.Errorf("replica %d, given the other key: %v, want ErrMasterKeyMismatch", i, err)
			}
		}
		if !bytes.Equal(won, keys.Check(keyA)) && !bytes.Equal(won, keys.Check(keyB)) {
			t.Fatalf("kept %x, neither key's check", won)
		}
	})

	t.Run("a database older than the check takes the key that opens its integrator's secret, not another", func(t *testing.T) {
		db := open(t, fresh(t))
		holding(t, db, keyA, keyA, false)
		err := check(t, db, keyB)
		if !errors.Is(err, app.ErrMasterKeyMismatch) {
			t.Fatalf("a key that opens nothing stored: %v, want ErrMasterKeyMismatch", err)
		}
		if v := stored(t, db); v != nil {
			t.Fatalf("the refused key was pinned: %x", v)
		}
		if err := check(t, db, keyA); err != nil {
			t.Fatalf("the key that sealed what is stored: %v", err)
		}
		if v := stored(t, db); !bytes.Equal(v, keys.Check(keyA)) {
			t.Fatalf("stored %x, want key A's check", v)
		}
	})

	t.Run("a database older than the check refuses a key that opens its secret but not its newest sealed body", func(t *testing.T) {
		db := open(t, fresh(t))
		id := holding(t, db, keyA, keyB, false)
		err := check(t, db, keyA)
		if !errors.Is(err, app.ErrMasterKeyMismatch) {
			t.Fatalf("a body sealed under another key: %v, want ErrMasterKeyMismatch", err)
		}
		if !bytes.Contains([]byte(err.Error()), []byte(id)) {
			t.Errorf("the refusal does not name event %s: %v", id, err)
		}
		if v := stored(t, db); v != nil {
			t.Fatalf("the refused key was pinned: %x", v)
		}
	})

	t.Run("a body an earlier version stored in clear proves nothing either way", func(t *testing.T) {
		db := open(t, fresh(t))
		holding(t, db, keyA, nil, true)
		if err := check(t, db, keyB); !errors.Is(err, app.ErrMasterKeyMismatch) {
			t.Fatalf("the secret does not open with key B, yet: %v", err)
		}
		if err := check(t, db, keyA); err != nil {
			t.Fatalf("key A opens the secret; the clear body must not refuse it: %v", err)
		}
	})
}
