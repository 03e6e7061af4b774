package store_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"geohub"
	"geohub/app"
	"geohub/store"
	"geohub/store/storetest"
)

// mustOpen opens a fresh database file in a temp dir and closes it with the test.
func mustOpen(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open(tb.Context(), filepath.Join(tb.TempDir(), store.FileName), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func TestPragmasHoldOnEveryConnection(t *testing.T) {
	db := mustOpen(t)
	want := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "10000",
		"temp_store": "2"}
	for _, writer := range []bool{true, false} {
		for name, v := range want {
			got, err := db.Pragma(t.Context(), name, writer)
			if err != nil {
				t.Fatal(err)
			}
			if got != v {
				t.Errorf("%s driver, writer=%v: PRAGMA %s = %s, want %s", store.DriverName, writer, name, got, v)
			}
		}
	}
	if got, _ := db.Pragma(t.Context(), "query_only", false); got != "1" {
		t.Errorf("reader connections must be query_only, got %s", got)
	}
}

func TestReopenAppliesNoMigrationTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	want := strconv.Itoa(strings.Count(geohub.Schema, "\n-- migration: "))
	for range 2 {
		db, err := store.Open(t.Context(), path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := db.Pragma(t.Context(), "user_version", true); v != want {
			t.Fatalf("user_version = %s, want %s", v, want)
		}
		if _, err := db.Append(t.Context(), []app.Pending{{Event: storetest.NewEvent("a:b")}}); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
}

func TestBackupIsAConsistentCopy(t *testing.T) {
	db := mustOpen(t)
	for range 20 {
		if _, err := db.Append(t.Context(), []app.Pending{{Event: storetest.NewEvent("a:b")}}); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "copy.db")
	if err := db.Backup(t.Context(), out); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a backup holds secrets and must be 0600: %v %v", fi.Mode(), err)
	}
	cp, err := store.Open(t.Context(), out, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if n, _ := cp.CountEvents(t.Context()); n != 20 {
		t.Fatalf("backup holds %d events, want 20", n)
	}
}
