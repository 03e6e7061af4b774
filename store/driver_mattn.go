//go:build mattn

package store

import (
	"database/sql"
	"errors"
	"net/url"

	"github.com/mattn/go-sqlite3" // cgo, for those who build with it
)

// DriverName names the SQLite driver this binary was built with: mattn's,
// registered with a connect hook for the pragma its DSN cannot carry.
const DriverName = "geohub-sqlite3"

func init() {
	sql.Register(DriverName, &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			// Savepoint journals stay in memory instead of temp files.
			_, err := c.Exec("PRAGMA temp_store = MEMORY", nil)
			return err
		},
	})
}

// DSN sets every pragma in the DSN so that each pooled connection gets them.
// mattn/go-sqlite3 is compiled with WAL defaulting to synchronous=NORMAL, so
// FULL must be explicit here.
func DSN(path string, readOnly bool) string {
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

// sqliteCode is the primary SQLite result code of the driver error in err's
// chain, if there is one.
func sqliteCode(err error) (int, bool) {
	var e sqlite3.Error
	if errors.As(err, &e) {
		return int(e.Code), true
	}
	return 0, false
}
