//go:build !mattn

package store

import (
	"errors"
	"net/url"

	"modernc.org/sqlite" // registers "sqlite": pure Go, static binaries
)

// DriverName names the SQLite driver this binary was built with.
const DriverName = "sqlite"

// DSN sets every pragma in the DSN so that each pooled connection gets them.
// busy_timeout comes first: the pragmas after it may need to wait for a lock.
func DSN(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	// Savepoint journals stay in memory instead of temp files.
	q.Add("_pragma", "temp_store(MEMORY)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		// The writer takes its lock at BEGIN, so another process (token
		// create) waits on busy_timeout instead of failing on upgrade.
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// sqliteCode is the primary SQLite result code of the driver error in err's
// chain, if there is one (modernc reports the extended code).
func sqliteCode(err error) (int, bool) {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code() & 0xff, true
	}
	return 0, false
}
