package store_test

import (
	"path/filepath"
	"testing"

	"geohub/store"
	"geohub/store/storetest"
)

// The shared state's contracts (storetest.SharedConformance) on SQLite,
// where one process owns the file; Again is a second handle on it.
func TestSharedConformance(t *testing.T) {
	storetest.SharedConformance(t, func(t *testing.T) storetest.SharedUnderTest {
		path := filepath.Join(t.TempDir(), store.FileName)
		openDB := func(t *testing.T) storetest.SharedStores {
			db, err := store.Open(t.Context(), path, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		return storetest.SharedUnderTest{DB: openDB(t), Again: openDB}
	})
}
