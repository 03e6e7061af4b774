package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
)

// Importer writes a SQLite data directory's rows into this database for
// geohub migrate-data (app.MigrationTarget). It works on one connection of
// its own, which holds a session advisory lock for as long as it is open,
// so that two migrations into one database cannot interleave.
//
// Its progress is kept in two tables it creates in the databases it writes
// into, migracao_dados (the origin and the snapshot of the source the copy
// started from; when it finished) and migracao_dados_tabela (per table, the
// rows committed and the key of the last), each batch's rows and progress
// committed together.
type Importer struct {
	conn *pgx.Conn
	cols map[string][]targetColumn
	// BeforeCommit, when set, runs in each batch's transaction after its
	// rows and progress are written; its error rolls the batch back. Tests
	// use it to kill a migration midway.
	BeforeCommit func(app.MigrationBatch) error
}

var _ app.MigrationTarget = (*Importer)(nil)

// migrateDataLock is the session advisory lock an Importer holds.
const migrateDataLock = 0x67656f6875626d64 // "geohubmd"

// progressSQL creates the progress tables. They belong to migrate-data,
// not to the schema every replica applies: a database never migrated
// into has none.
const progressSQL = `
CREATE TABLE IF NOT EXISTS migracao_dados (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    origem       TEXT    NOT NULL, -- keys.MigrationOrigin of the source's master key
    snapshot     TEXT    NOT NULL, -- app.MigrationSnapshot as JSON, read when the copy began
    iniciada_em  BIGINT  NOT NULL,
    concluida_em BIGINT            -- set once every table was copied and verified
);
CREATE TABLE IF NOT EXISTS migracao_dados_tabela (
    tabela        TEXT   PRIMARY KEY,
    linhas        BIGINT NOT NULL, -- rows committed
    ultima_chave  TEXT,            -- JSON array: the key of the last row committed; NULL before the first batch
    atualizada_em BIGINT NOT NULL
);`

// seeded are the rows the schema itself inserts into a table the source
// also fills, as a condition on the table's rows: they are not data, and
// give way to the source's. Migration 1 seeds the ocorrências consumer's
// cursors at 0, migration 2 the cadastro's version at 0 (which the copy of
// the integrators then moves further, as a version only has to). The
// master key's check is written by any open of the target (a `geohub
// migrate --db` run first, say): the source's, of the key the replicas
// will be given, replaces it.
var seeded = map[string]string{
	"consumer_cursor":   "last_sequence = 0",
	"cadastro_versao":   "versao = 0",
	"verificacao_chave": "true",
}

// targetColumn is what the import needs to know of a column.
type targetColumn struct {
	name     string
	dataType string // information_schema's data_type
	optional bool   // nullable, defaulted or generated: may be absent from the source
	identity bool
}

// NewImporter connects to the database at url, applies pending
// migrations, creates the progress tables and takes the migration lock.
func NewImporter(ctx context.Context, url string) (*Importer, error) {
	p, err := pool(ctx, url, 1)
	if err != nil {
		return nil, err
	}
	err = migrate(ctx, p)
	p.Close()
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	for k, v := range settings {
		cfg.RuntimeParams[k] = v
	}
	// A batch transaction may take longer than a group commit.
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "5min"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	im := &Importer{conn: conn}
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(migrateDataLock)).Scan(&locked); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if !locked {
		conn.Close(ctx)
		return nil, fmt.Errorf("%w: another geohub migrate-data is writing into this database: wait for it to end", app.ErrMigrationRefused)
	}
	if _, err := conn.Exec(ctx, progressSQL); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("create the progress tables: %w", err)
	}
	return im, nil
}

// Close releases the lock and ends the connection. The unlock is said
// first: a closed connection's backend releases its locks only once it
// has processed the end, after Close returns, and a run started right
// then (the operator's verifying second run) would be refused.
func (im *Importer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	im.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(migrateDataLock))
	return im.conn.Close(ctx)
}

// Begin implements app.MigrationTarget.
func (im *Importer) Begin(ctx context.Context, s app.MigrationSnapshot) (app.MigrationProgress, error) {
	prog := app.MigrationProgress{Last: map[string]app.MigrationKey{}, Copied: map[string]int64{}}
	if err := im.loadColumns(ctx, s.Tables); err != nil {
		return prog, err
	}
	snap, err := json.Marshal(s)
	if err != nil {
		return prog, err
	}
	err = pgx.BeginFunc(ctx, im.conn, func(tx pgx.Tx) error {
		var origem, stored string
		var done *int64
		err := tx.QueryRow(ctx, "SELECT origem, snapshot, concluida_em FROM migracao_dados WHERE id = 1 FOR UPDATE").
			Scan(&origem, &stored, &done)
		switch {
		case isNoRows(err):
			return im.start(ctx, tx, s, string(snap))
		case err != nil:
			return err
		case origem != s.Origin:
			return fmt.Errorf("%w: this database holds a migration from another data directory (another master key): "+
				"to copy this one, create a new, empty database and point --db at it (or drop and recreate this one)",
				app.ErrMigrationRefused)
		case stored != string(snap):
			return fmt.Errorf("%w: the data directory changed since this migration began (did a geohub serve run on it?): "+
				"the rows copied so far may be stale; drop and recreate the database and migrate again", app.ErrMigrationRefused)
		}
		prog.Resumed, prog.Done = true, done != nil
		rows, err := tx.Query(ctx, "SELECT tabela, linhas, ultima_chave FROM migracao_dados_tabela")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var n int64
			var key *string
			if err := rows.Scan(&name, &n, &key); err != nil {
				return err
			}
			prog.Copied[name] = n
			if key != nil {
				var k app.MigrationKey
				if err := json.Unmarshal([]byte(*key), &k); err != nil {
					return fmt.Errorf("progress of %s: %w", name, err)
				}
				prog.Last[name] = k
			}
		}
		return rows.Err()
	})
	return prog, err
}

// start begins a migration into a database that holds nothing but what
// the schema seeds, and refuses any other.
func (im *Importer) start(ctx context.Context, tx pgx.Tx, s app.MigrationSnapshot, snap string) error {
	var head int64
	if err := tx.QueryRow(ctx, "SELECT ultima FROM log_head WHERE id = 1 FOR UPDATE").Scan(&head); err != nil {
		return fmt.Errorf("read the log's head: %w", err)
	}
	refuse := func(what string) error {
		return fmt.Errorf("%w: this database already holds data (%s) that no migrate-data of this directory wrote: "+
			"migrate-data copies into an empty database only; create one (createdb, or CREATE DATABASE) and point --db at it",
			app.ErrMigrationRefused, what)
	}
	if head != 0 {
		return refuse(fmt.Sprintf("events up to sequence %d", head))
	}
	for _, t := range s.Tables {
		q := "SELECT EXISTS (SELECT 1 FROM " + pgx.Identifier{t.Name}.Sanitize()
		if w, ok := seeded[t.Name]; ok {
			q += " WHERE NOT (" + w + ")"
		}
		var found bool
		if err := tx.QueryRow(ctx, q+")").Scan(&found); err != nil {
			return fmt.Errorf("check %s: %w", t.Name, err)
		}
		if found {
			return refuse("rows in " + t.Name)
		}
	}
	for _, t := range s.Tables {
		if w, ok := seeded[t.Name]; ok {
			if _, err := tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{t.Name}.Sanitize()+" WHERE "+w); err != nil {
				return fmt.Errorf("clear %s: %w", t.Name, err)
			}
		}
	}
	now := time.Now().UnixMilli()
	if _, err := tx.Exec(ctx, "DELETE FROM migracao_dados_tabela"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO migracao_dados (id, origem, snapshot, iniciada_em) VALUES (1, $1, $2, $3)",
		s.Origin, snap, now); err != nil {
		return fmt.Errorf("record the migration: %w", err)
	}
	for _, t := range s.Tables {
		if _, err := tx.Exec(ctx, "INSERT INTO migracao_dados_tabela (tabela, linhas, atualizada_em) VALUES ($1, 0, $2)",
			t.Name, now); err != nil {
			return fmt.Errorf("record the migration: %w", err)
		}
	}
	return nil
}

// loadColumns reads the target's columns of every source table and
// refuses a source whose tables or columns this schema lacks: their data
// would be lost.
func (im *Importer) loadColumns(ctx context.Context, tables []app.MigrationTable) error {
	rows, err := im.conn.Query(ctx, `SELECT table_name, column_name, data_type,
			is_nullable = 'YES' OR column_default IS NOT NULL OR is_identity = 'YES' OR is_generated <> 'NEVER',
			is_identity = 'YES'
		FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`)
	if err != nil {
		return fmt.Errorf("read the target's columns: %w", err)
	}
	all := map[string][]targetColumn{}
	for rows.Next() {
		var table string
		var c targetColumn
		if err := rows.Scan(&table, &c.name, &c.dataType, &c.optional, &c.identity); err != nil {
			rows.Close()
			return err
		}
		all[table] = append(all[table], c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	im.cols = map[string][]targetColumn{}
	for _, t := range tables {
		cols, ok := all[t.Name]
		if !ok {
			return fmt.Errorf("%w: the source's table %s has no counterpart in this database's schema: use a geohub binary whose PostgreSQL schema has it",
				app.ErrMigrationRefused, t.Name)
		}
		var ordered []targetColumn
		for _, name := range t.Columns {
			i := slices.IndexFunc(cols, func(c targetColumn) bool { return c.name == name })
			if i < 0 {
				return fmt.Errorf("%w: the source's column %s.%s has no counterpart in this database's schema", app.ErrMigrationRefused, t.Name, name)
			}
			ordered = append(ordered, cols[i])
		}
		for _, c := range cols {
			if !slices.Contains(t.Columns, c.name) && !c.optional {
				return fmt.Errorf("%w: this database's column %s.%s is required and the source has no value for it", app.ErrMigrationRefused, t.Name, c.name)
			}
		}
		im.cols[t.Name] = ordered
	}
	return nil
}

// Write implements app.MigrationTarget.
func (im *Importer) Write(ctx context.Context, b app.MigrationBatch) error {
	cols, ok := im.cols[b.Table]
	if !ok {
		return fmt.Errorf("table %s is not in the migration", b.Table)
	}
	rows := make([][]any, len(b.Rows))
	for i, r := range b.Rows {
		if len(r) != len(cols) {
			return fmt.Errorf("%s: a row of %d values for %d columns", b.Table, len(r), len(cols))
		}
		out := make([]any, len(r))
		for j, v := range r {
			c, err := convert(v, cols[j].dataType)
			if err != nil {
				return fmt.Errorf("%s.%s: %w", b.Table, cols[j].name, err)
			}
			out[j] = c
		}
		rows[i] = out
	}
	last, err := json.Marshal(b.Last)
	if err != nil {
		return err
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return pgx.BeginFunc(ctx, im.conn, func(tx pgx.Tx) error {
		var stored *string
		if err := tx.QueryRow(ctx, "SELECT ultima_chave FROM migracao_dados_tabela WHERE tabela = $1 FOR UPDATE",
			b.Table).Scan(&stored); err != nil {
			return fmt.Errorf("read the progress of %s: %w", b.Table, err)
		}
		var at app.MigrationKey
		if stored != nil {
			if err := json.Unmarshal([]byte(*stored), &at); err != nil {
				return err
			}
		}
		if !at.Equal(b.After) {
			return fmt.Errorf("the copy of %s stands at %v, the batch continues from %v", b.Table, at, b.After)
		}
		if err := im.guardHead(ctx, tx, b); err != nil {
			return err
		}
		// COPY writes the source's ids into identity columns as given,
		// as INSERT would only with OVERRIDING SYSTEM VALUE.
		n, err := tx.CopyFrom(ctx, pgx.Identifier{b.Table}, names, pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("copy into %s: %w", b.Table, err)
		}
		if n != int64(len(rows)) {
			return fmt.Errorf("copy into %s: %d of %d rows", b.Table, n, len(rows))
		}
		if _, err := tx.Exec(ctx, `UPDATE migracao_dados_tabela SET linhas = linhas + $2, ultima_chave = $3, atualizada_em = $4
			WHERE tabela = $1`, b.Table, n, string(last), time.Now().UnixMilli()); err != nil {
			return fmt.Errorf("record the progress of %s: %w", b.Table, err)
		}
		if im.BeforeCommit != nil {
			return im.BeforeCommit(b)
		}
		return nil
	})
}

// guardHead keeps log_head at the last event copied, under its lock, and
// refuses to go on when it is anywhere else: a replica started on the
// database during the migration appends events from it.
func (im *Importer) guardHead(ctx context.Context, tx pgx.Tx, b app.MigrationBatch) error {
	var head int64
	if err := tx.QueryRow(ctx, "SELECT ultima FROM log_head WHERE id = 1 FOR UPDATE").Scan(&head); err != nil {
		return fmt.Errorf("read the log's head: %w", err)
	}
	var copied int64
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(sequence_number), 0) FROM event_log").Scan(&copied); err != nil {
		return err
	}
	if head != copied {
		return fmt.Errorf("%w: the log's head is at %d, the last event copied at %d: a geohub serve wrote into this database during the migration; "+
			"stop every replica, drop and recreate the database, and migrate again", app.ErrMigrationRefused, head, copied)
	}
	if b.Table != "event_log" {
		return nil
	}
	seq, ok := b.Last[0].(int64)
	if len(b.Last) != 1 || !ok {
		return fmt.Errorf("event_log: key %v is not a sequence number", b.Last)
	}
	_, err := tx.Exec(ctx, "UPDATE log_head SET ultima = $1 WHERE id = 1", seq)
	return err
}

// convert turns a value as SQLite's driver gives it into the type of the
// target's column: SQLite keeps flags as 0/1 integers, PostgreSQL as
// booleans, and a driver may give TEXT as bytes or BLOB as text.
func convert(v any, dataType string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch dataType {
	case "boolean":
		switch n := v.(type) {
		case int64:
			if n != 0 && n != 1 {
				return nil, fmt.Errorf("flag %d is neither 0 nor 1", n)
			}
			return n == 1, nil
		case bool:
			return n, nil
		}
	case "bytea":
		switch b := v.(type) {
		case []byte:
			return b, nil
		case string:
			return []byte(b), nil
		}
	case "text":
		switch s := v.(type) {
		case string:
			return s, nil
		case []byte:
			return string(s), nil
		}
	case "bigint", "integer", "smallint":
		if n, ok := v.(int64); ok {
			return n, nil
		}
	default:
		return v, nil
	}
	return nil, fmt.Errorf("a %T value for a %s column", v, dataType)
}

// Finish implements app.MigrationTarget, in one transaction: a mismatch
// leaves the migration unfinished, and a database that was not verified is
// never marked done.
func (im *Importer) Finish(ctx context.Context, s app.MigrationSnapshot) (app.MigrationReport, error) {
	var rep app.MigrationReport
	err := pgx.BeginFunc(ctx, im.conn, func(tx pgx.Tx) error {
		rep = app.MigrationReport{}
		if _, err := tx.Exec(ctx, "SELECT ultima FROM log_head WHERE id = 1 FOR UPDATE"); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT sequence_number, event_id FROM event_log ORDER BY sequence_number DESC LIMIT 1`).
			Scan(&rep.LastSequence, &rep.LastEventID)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("read the log's head: %w", err)
		}
		// The next publish takes LastSequence+1.
		if _, err := tx.Exec(ctx, "UPDATE log_head SET ultima = $1 WHERE id = 1", rep.LastSequence); err != nil {
			return err
		}
		var mismatch []string
		for _, t := range s.Tables {
			name := pgx.Identifier{t.Name}.Sanitize()
			for _, c := range im.cols[t.Name] {
				if !c.identity {
					continue
				}
				// The next id the table gives follows the source's last.
				col := pgx.Identifier{c.name}.Sanitize()
				if _, err := tx.Exec(ctx, `SELECT CASE WHEN m IS NULL THEN setval(s, 1, false) ELSE setval(s, m, true) END
					FROM (SELECT pg_get_serial_sequence($1, $2) AS s, (SELECT max(`+col+`) FROM `+name+`) AS m) AS x`,
					name, c.name); err != nil {
					return fmt.Errorf("set the id sequence of %s.%s: %w", t.Name, c.name, err)
				}
			}
			tc := app.TableCount{Table: t.Name, Source: t.Rows}
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+name).Scan(&tc.Target); err != nil {
				return fmt.Errorf("count %s: %w", t.Name, err)
			}
			if tc.Target != tc.Source {
				mismatch = append(mismatch, fmt.Sprintf("%s has %d rows, the source %d", t.Name, tc.Target, tc.Source))
			}
			rep.Tables = append(rep.Tables, tc)
		}
		if rep.LastSequence != s.LastSequence || rep.LastEventID != s.LastEventID {
			mismatch = append(mismatch, fmt.Sprintf("the log ends at %d (%s), the source's at %d (%s)",
				rep.LastSequence, rep.LastEventID, s.LastSequence, s.LastEventID))
		}
		if len(mismatch) > 0 {
			return fmt.Errorf("%w: %s", app.ErrMigrationMismatch, strings.Join(mismatch, "; "))
		}
		_, err = tx.Exec(ctx, "UPDATE migracao_dados SET concluida_em = coalesce(concluida_em, $1) WHERE id = 1", time.Now().UnixMilli())
		return err
	})
	if err != nil && !errors.Is(err, app.ErrMigrationMismatch) {
		return app.MigrationReport{}, err
	}
	return rep, err
}
