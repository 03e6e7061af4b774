package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// A data migration (geohub migrate-data, SPEC 12) copies a stopped SQLite
// data directory into PostgreSQL. The two sides never meet: the SQLite
// store is a MigrationSource, the PostgreSQL store a MigrationTarget, and
// CopyData moves batches from one to the other. Rows travel as the source
// stores them, sealed secrets and bodies included: both sides run with the
// same master key, so nothing is opened or sealed again on the way.

// ErrMigrationRefused says a migration did not start, or did not go on,
// because of the state of the source or the target (a server holds the
// source, the target holds other data); nothing was written. The wrapping
// error says what the operator should do.
var ErrMigrationRefused = errors.New("migration refused")

// ErrMigrationMismatch says every batch was copied but the target does not
// hold what the source does (a table's rows, the log's head).
var ErrMigrationMismatch = errors.New("migrated data does not match the source")

// MigrationTable is one table of the source, as read at the start.
type MigrationTable struct {
	Name    string   `json:"tabela"`
	Columns []string `json:"colunas"` // the order of each row's values
	// Key is the primary key's columns: rows come in its order, and a
	// batch continues after the key of the previous one's last row.
	Key  []string     `json:"chave"`
	Rows int64        `json:"linhas"`
	Last MigrationKey `json:"ultima_chave"` // the last row's key; nil when empty
}

// MigrationKey is one row's primary key, a value per Key column: int64 or
// string, which survive a JSON round trip as themselves (UnmarshalJSON).
type MigrationKey []any

// UnmarshalJSON reads numbers back as int64, not float64, which would lose
// precision past 2^53 and compare unequal to the source's int64.
func (k *MigrationKey) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*k = nil
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var vs []any
	if err := d.Decode(&vs); err != nil {
		return err
	}
	for i, v := range vs {
		switch v := v.(type) {
		case json.Number:
			n, err := v.Int64()
			if err != nil {
				return fmt.Errorf("migration key: %w", err)
			}
			vs[i] = n
		case string:
		default:
			return fmt.Errorf("migration key: unexpected value %v", v)
		}
	}
	*k = vs
	return nil
}

// Equal says whether k and o are the same key (nil equals empty).
func (k MigrationKey) Equal(o MigrationKey) bool {
	if len(k) != len(o) {
		return false
	}
	for i := range k {
		if k[i] != o[i] {
			return false
		}
	}
	return true
}

// MigrationSnapshot is what the source holds, read once at the start of
// each run. A resumed run compares it with the first run's: a source that
// changed in between (a server ran on it) is refused.
type MigrationSnapshot struct {
	// Origin identifies the source's data: keys.MigrationOrigin of its master
	// key. A target holding another origin's rows is refused.
	Origin string `json:"origem"`
	// Tables in copy order: each after the tables it references.
	Tables []MigrationTable `json:"tabelas"`
	// The log's head: the last sequence_number and its event_id.
	LastSequence int64  `json:"ultima_sequencia"`
	LastEventID  string `json:"ultimo_event_id"`
}

// MigrationBatch is consecutive rows of one table in key order.
type MigrationBatch struct {
	Table string
	After MigrationKey // where the batch continues from; nil: the table's start
	Last  MigrationKey // the key of its last row
	// Rows hold values in the table's Columns order, as the source's driver
	// gives them: nil, int64, float64, string or []byte.
	Rows [][]any
}

// MigrationProgress is where a target's copy stands: per table, the key of
// the last row committed (absent or nil: none yet).
type MigrationProgress struct {
	Resumed bool // an earlier run of the same source left rows
	Done    bool // an earlier run finished and verified
	Last    map[string]MigrationKey
	Copied  map[string]int64 // rows committed per table
}

// MigrationSource streams a stopped data directory's rows.
type MigrationSource interface {
	// Snapshot reads the tables, their row counts and last keys, and the
	// log's head. Origin is the caller's to fill.
	Snapshot(ctx context.Context) (MigrationSnapshot, error)
	// ReadBatch returns t's rows with a key after after (all when nil), in
	// key order: at most maxRows, and fewer once their values pass
	// maxBytes (one row at least). No rows means the table is done.
	ReadBatch(ctx context.Context, t MigrationTable, after MigrationKey, maxRows, maxBytes int) (MigrationBatch, error)
}

// MigrationTarget receives them.
type MigrationTarget interface {
	// Begin refuses (ErrMigrationRefused) a target that holds data of
	// another origin, or of this origin taken from a different snapshot,
	// and otherwise says where the copy stands.
	Begin(ctx context.Context, s MigrationSnapshot) (MigrationProgress, error)
	// Write inserts b's rows and records b.Last as its table's progress in
	// one transaction, so a run killed at any point resumes after the last
	// batch committed. It refuses a batch whose After is not where the
	// table's copy stands.
	Write(ctx context.Context, b MigrationBatch) error
	// Finish sets the counters the target keeps beside the rows (the log's
	// head, id generators), so that the next publish takes LastSequence+1
	// and the next ids follow the source's; then it compares every table
	// and the head with s and, when all match, records the migration done.
	// A mismatch is ErrMigrationMismatch, with the report.
	Finish(ctx context.Context, s MigrationSnapshot) (MigrationReport, error)
}

// MigrationReport is Finish's comparison of the target with the source.
type MigrationReport struct {
	Tables       []TableCount
	LastSequence int64  // the target's head after Finish
	LastEventID  string // the event at it
}

// TableCount is one table's rows in the source and in the target.
type TableCount struct {
	Table          string
	Source, Target int64
}

// CopyOptions tune CopyData; zero values are the defaults.
type CopyOptions struct {
	BatchRows  int // default 1000
	BatchBytes int // default 4 MiB: bodies and payloads are up to 1 MiB each
	// Progress, when set, is called after each committed batch, and once
	// per table before its first, with the rows copied so far.
	Progress func(table string, copied, total int64)
}

// CopyData copies every table of src into dst, resuming where dst's
// progress stands, then finishes and verifies. origin is
// keys.MigrationOrigin of the source's master key.
func CopyData(ctx context.Context, src MigrationSource, dst MigrationTarget, origin string, opt CopyOptions) (MigrationReport, error) {
	if opt.BatchRows <= 0 {
		opt.BatchRows = 1000
	}
	if opt.BatchBytes <= 0 {
		opt.BatchBytes = 4 << 20
	}
	snap, err := src.Snapshot(ctx)
	if err != nil {
		return MigrationReport{}, err
	}
	snap.Origin = origin
	prog, err := dst.Begin(ctx, snap)
	if err != nil {
		return MigrationReport{}, err
	}
	for _, t := range snap.Tables {
		after, copied := prog.Last[t.Name], prog.Copied[t.Name]
		if opt.Progress != nil {
			opt.Progress(t.Name, copied, t.Rows)
		}
		for !after.Equal(t.Last) {
			b, err := src.ReadBatch(ctx, t, after, opt.BatchRows, opt.BatchBytes)
			if err != nil {
				return MigrationReport{}, fmt.Errorf("read %s: %w", t.Name, err)
			}
			if len(b.Rows) == 0 {
				// The snapshot said more rows follow; a stopped source
				// cannot lose them.
				return MigrationReport{}, fmt.Errorf("read %s: no rows after %v, the snapshot ends at %v", t.Name, after, t.Last)
			}
			if err := dst.Write(ctx, b); err != nil {
				return MigrationReport{}, fmt.Errorf("write %s: %w", t.Name, err)
			}
			after, copied = b.Last, copied+int64(len(b.Rows))
			if opt.Progress != nil {
				opt.Progress(t.Name, copied, t.Rows)
			}
		}
	}
	return dst.Finish(ctx, snap)
}
