package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"geohub/app"
	"geohub/app/keys"
	"geohub/store"
	"geohub/store/postgres"
)

// Exit codes of migrate-data, for scripts: 1 is a failure midway (run it
// again: it resumes), refusedExit a refusal before anything was written
// (fix what the message says first), mismatchExit a copy that does not
// match its source.
const (
	refusedExit  = 2
	mismatchExit = 3
)

// migrateData is what `geohub migrate-data` runs: From is a SQLite data
// directory, URL the PostgreSQL database.
type migrateData struct {
	From      string
	URL       string
	BatchRows int
	// BeforeCommit is the importer's test hook (postgres.Importer).
	BeforeCommit func(app.MigrationBatch) error
}

func migrateDataCmd(ctx context.Context, args []string) error {
	fs := newFlags("migrate-data")
	var m migrateData
	fs.StringVar(&m.From, "from", envOr("GEOHUB_FROM", ""), "the SQLite data directory to copy, of a stopped geohub (env GEOHUB_FROM)")
	fs.StringVar(&m.URL, "db", envOr("GEOHUB_DB", ""), "the PostgreSQL database to copy into: postgres://… (env GEOHUB_DB)")
	batch := fs.String("batch", envOr("GEOHUB_MIGRATE_BATCH", "1000"), "rows per transaction (env GEOHUB_MIGRATE_BATCH)")
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	n, err := strconv.Atoi(*batch)
	if err != nil || n < 1 {
		return fmt.Errorf("--batch: want a positive number of rows")
	}
	m.BatchRows = n
	return m.run(ctx, os.Stdout)
}

// run copies, resuming a run that was interrupted, verifies and prints
// the summary to out.
func (m migrateData) run(ctx context.Context, out io.Writer) error {
	if m.From == "" {
		return fmt.Errorf("--from is required: the data directory of the SQLite appliance")
	}
	if !strings.HasPrefix(m.URL, "postgres://") && !strings.HasPrefix(m.URL, "postgresql://") {
		return fmt.Errorf("--db (or GEOHUB_DB) is required: a postgres:// URL")
	}
	// The key is the source's own; nothing is sealed again, so it is only
	// read, never created: a directory without one has nothing to open.
	keyPath := filepath.Join(m.From, masterKeyFile)
	key, err := os.ReadFile(keyPath)
	if err != nil {
		return exitWith(refusedExit, fmt.Errorf("%w: read the master key: %v (is --from a geohub data directory?)", app.ErrMigrationRefused, err))
	}
	if len(key) != 32 {
		return exitWith(refusedExit, fmt.Errorf("%w: master key %s: want 32 bytes, found %d", app.ErrMigrationRefused, keyPath, len(key)))
	}
	origin, err := keys.MigrationOrigin(key)
	if err != nil {
		return err
	}
	// First, before anything else opens the file (see OpenExport).
	src, err := store.OpenExport(ctx, filepath.Join(m.From, store.FileName))
	if err != nil {
		return classify(err)
	}
	defer src.Close()
	dst, err := postgres.NewImporter(ctx, m.URL)
	if err != nil {
		return classify(err)
	}
	defer dst.Close()
	dst.BeforeCommit = m.BeforeCommit
	where := redactURL(m.URL)
	fmt.Fprintf(out, "copying %s into %s\n", filepath.Join(m.From, store.FileName), where)

	// One line when a table starts, at every tenth of it and at its end:
	// enough to follow a large log without flooding a terminal.
	shown := map[string]int64{}
	progress := func(table string, copied, total int64) {
		step := int64(10)
		if total > 0 {
			step = copied * 10 / total
		}
		if s, ok := shown[table]; ok && s == step {
			return
		}
		shown[table] = step
		fmt.Fprintf(out, "  %-24s %d/%d\n", table, copied, total)
	}
	rep, err := app.CopyData(ctx, src, dst, origin, app.CopyOptions{BatchRows: m.BatchRows, Progress: progress})
	if rep.Tables != nil {
		printReport(out, rep)
	}
	if err != nil {
		return classify(err)
	}
	fmt.Fprintf(out, "done: every table and the log's head match the source; the next publish gets sequence %d.\n", rep.LastSequence+1)
	fmt.Fprintf(out, "Start the replicas with --db %s and --master-key-file %s (or its content in GEOHUB_MASTER_KEY); keep the SQLite appliance stopped.\n",
		where, keyPath)
	return nil
}

func printReport(out io.Writer, rep app.MigrationReport) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "table\tsqlite\tpostgres\t")
	for _, t := range rep.Tables {
		mark := "ok"
		if t.Source != t.Target {
			mark = "DIFFERS"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", t.Table, t.Source, t.Target, mark)
	}
	tw.Flush()
	fmt.Fprintf(out, "log: last sequence_number %d, event_id %s\n", rep.LastSequence, rep.LastEventID)
}

// classify gives refusals and mismatches their exit codes.
func classify(err error) error {
	switch {
	case errors.Is(err, app.ErrMigrationRefused):
		return exitWith(refusedExit, err)
	case errors.Is(err, app.ErrMigrationMismatch):
		return exitWith(mismatchExit, err)
	}
	return err
}

// exitError carries a command's exit code to main.
type exitError struct {
	code int
	err  error
}

func exitWith(code int, err error) error { return &exitError{code: code, err: err} }
func (e *exitError) Error() string       { return e.err.Error() }
func (e *exitError) Unwrap() error       { return e.err }

// exitCode is the process's exit status for a command's error.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

// redactURL is u without its password, for messages.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "postgres"
	}
	if p.User != nil {
		p.User = url.User(p.User.Username())
	}
	return p.String()
}
