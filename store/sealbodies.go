package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sealBatchBytes bounds the bodies one upgrade batch holds in memory: a body
// can be as large as a 1 MiB payload.
const sealBatchBytes = 8 << 20

// clearBodiesSQL reads the next bodies after the upgrade's cursor: two rowid
// seeks per row.
const clearBodiesSQL = `SELECT c.outbox_id, o.event_id, c.corpo FROM outbox_corpo AS c
	JOIN outbox AS o ON o.id = c.outbox_id WHERE c.outbox_id > ? ORDER BY c.outbox_id LIMIT ?`

// ClearBodiesPending implements app.ClearBodies.
func (db *DB) ClearBodiesPending(ctx context.Context) (bool, error) {
	var done bool
	err := db.read.QueryRowContext(ctx, `SELECT etapa = 2 FROM outbox_selagem WHERE id = 1`).Scan(&done)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return !done, err
}

// SealClearBodies implements app.ClearBodies: one writer transaction per
// batch, which moves the cursor with the bodies it rewrote.
func (db *DB) SealClearBodies(ctx context.Context, n int, seal func(eventID string, body []byte) []byte) (int, bool, error) {
	type stored struct {
		id      int64
		eventID string
		corpo   []byte
	}
	var sealed int
	var done bool
	err := db.do(ctx, func(tx *wtx) error {
		sealed, done = 0, false // the writer may run an operation twice
		var cursor int64
		if err := tx.QueryRow(`SELECT cursor FROM outbox_selagem WHERE id = 1`).Scan(&cursor); err != nil {
			return fmt.Errorf("read the sealing cursor: %w", err)
		}
		rows, err := tx.Query(clearBodiesSQL, cursor, n)
		if err != nil {
			return err
		}
		var batch []stored
		size, full := 0, false
		for rows.Next() {
			var s stored
			if err := rows.Scan(&s.id, &s.eventID, &s.corpo); err != nil {
				rows.Close()
				return err
			}
			batch = append(batch, s)
			if size += len(s.corpo); size >= sealBatchBytes {
				full = true
				break
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, s := range batch {
			if body := seal(s.eventID, s.corpo); body != nil {
				if _, err := tx.Exec(`UPDATE outbox_corpo SET corpo = ? WHERE outbox_id = ?`, body, s.id); err != nil {
					return fmt.Errorf("seal the body of delivery %d: %w", s.id, err)
				}
				sealed++
			}
			cursor = s.id
		}
		done = !full && len(batch) < n
		_, err = tx.Exec(`UPDATE outbox_selagem SET cursor = ? WHERE id = 1`, cursor)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return sealed, done, nil
}

// clearResponsesSQL reads the next attempts after the upgrade's cursor whose
// answer is still in clear (an attempt's answer is at most 512 bytes).
const clearResponsesSQL = `SELECT id, entrega_id, resposta FROM delivery_attempt
	WHERE id > ? AND resposta <> '' ORDER BY id LIMIT ?`

// SealClearResponses implements app.ClearBodies.
func (db *DB) SealClearResponses(ctx context.Context, n int, seal func(entregaID, resposta string) []byte) (int, bool, error) {
	var sealed int
	var done bool
	err := db.do(ctx, func(tx *wtx) error {
		sealed, done = 0, false // the writer may run an operation twice
		var cursor int64
		if err := tx.QueryRow(`SELECT cursor_resposta FROM outbox_selagem WHERE id = 1`).Scan(&cursor); err != nil {
			return fmt.Errorf("read the sealing cursor of answers: %w", err)
		}
		rows, err := tx.Query(clearResponsesSQL, cursor, n)
		if err != nil {
			return err
		}
		type stored struct {
			id                  int64
			entregaID, resposta string
		}
		var batch []stored
		for rows.Next() {
			var s stored
			if err := rows.Scan(&s.id, &s.entregaID, &s.resposta); err != nil {
				rows.Close()
				return err
			}
			batch = append(batch, s)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, s := range batch {
			if _, err := tx.Exec(`UPDATE delivery_attempt SET resposta = '', resposta_selada = ? WHERE id = ?`,
				seal(s.entregaID, s.resposta), s.id); err != nil {
				return fmt.Errorf("seal the answer of attempt %d: %w", s.id, err)
			}
			sealed++
			cursor = s.id
		}
		done = len(batch) < n
		_, err = tx.Exec(`UPDATE outbox_selagem SET cursor_resposta = ? WHERE id = 1`, cursor)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return sealed, done, nil
}

// ScrubClearBodies implements app.ClearBodies. Sealing a body (or an
// answer) rewrites its row, but SQLite leaves the old bytes in the page's free space, in pages
// on the freelist (and so do the bodies an earlier version purged), and in
// WAL frames past the last checkpoint. VACUUM rebuilds the file from the
// live rows only; the TRUNCATE checkpoint then copies it over the old pages
// and cuts the WAL to zero bytes. It runs once, at the start that finishes
// the upgrade, so the cost of secure_delete on every write is never paid;
// when only the checkpoint failed, a later start retries only that.
func (db *DB) ScrubClearBodies(ctx context.Context) error {
	var etapa int
	if err := db.read.QueryRowContext(ctx, `SELECT etapa FROM outbox_selagem WHERE id = 1`).Scan(&etapa); err != nil {
		return err
	}
	pool, err := sql.Open(DriverName, DSN(db.Path, false))
	if err != nil {
		return err
	}
	defer pool.Close()
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// VACUUM builds its copy in a temporary database as large as the file:
	// on disk, not in memory.
	if etapa == 0 {
		if _, err := conn.ExecContext(ctx, "PRAGMA temp_store = FILE"); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, "VACUUM"); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		if _, err := conn.ExecContext(ctx, `UPDATE outbox_selagem SET etapa = 1 WHERE id = 1`); err != nil {
			return err
		}
	}
	var busy, frames, copied int
	if err := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &copied); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if busy != 0 {
		// Another process reads an older snapshot: the WAL keeps frames it
		// may need. The upgrade stays unfinished, and the next start retries.
		return errors.New("the WAL could not be emptied: another process is reading the database")
	}
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`UPDATE outbox_selagem SET etapa = 2 WHERE id = 1`)
		return err
	})
}
