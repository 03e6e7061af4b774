//go:build mattn

package store

import (
	"net/url"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3": cgo, for those who build with it
)

// DriverName names the SQLite driver this binary was built with.
const DriverName = "sqlite3"

// dsn sets every pragma in the DSN so that each pooled connection gets them.
// mattn/go-sqlite3 is compiled with WAL defaulting to synchronous=NORMAL, so
// FULL must be explicit here.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}
