package store

import (
	"database/sql"
	"path/filepath"
	"testing"

	"geohub"
)

// TestMigration6MovesBodiesOutOfTheOutbox upgrades a database written by
// the schema before migration 6: every body must survive the move, and a
// purged one must stay purged.
func TestMigration6MovesBodiesOutOfTheOutbox(t *testing.T) {
	ctx := t.Context()
	db, blocks := openAtMigration(t, 5)
	for _, q := range []string{
		`INSERT INTO integrator (id, nome, callback_url, hosts_permitidos, eventos, ativo, segredo, api_key_hash,
			criado_em, atualizado_em) VALUES ('int-1', 'CAD', 'https://cad', '[]', '["*"]', 1, x'00', 'h', 0, 0)`,
		`INSERT INTO event_log (event_id, tipo, versao_schema, timestamp, origem, correlacao_id, payload, criado_em)
			VALUES ('e1', 'a:b', '1.0.0', 0, 'o', 'e1', '{}', 0), ('e2', 'a:b', '1.0.0', 0, 'o', 'e2', '{}', 0)`,
		`INSERT INTO outbox (event_id, sequence_number, integrador_id, tipo, agregado, sequencia, corpo, status,
			proxima_tentativa, entregue_em, criado_em) VALUES
			('e1', 1, 'int-1', 'a:b', 'x', 1, '{"id":"e1"}', 'falhou', 0, NULL, 0),
			('e2', 2, 'int-1', 'a:b', 'x', 2, NULL, 'entregue', 0, 5, 0)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := apply(ctx, db, blocks); err != nil {
		t.Fatal(err)
	}
	var body string
	var purged int
	if err := db.QueryRowContext(ctx, `SELECT c.corpo, o.expurgado FROM outbox o JOIN outbox_corpo c ON c.outbox_id = o.id
		WHERE o.event_id = 'e1'`).Scan(&body, &purged); err != nil || body != `{"id":"e1"}` || purged != 0 {
		t.Fatalf("kept body %q, expurgado %d, err %v", body, purged, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT expurgado, (SELECT count(*) FROM outbox_corpo WHERE outbox_id = outbox.id)
		FROM outbox WHERE event_id = 'e2'`).Scan(&purged, &n); err != nil || purged != 1 || n != 0 {
		t.Fatalf("purged body: expurgado %d, %d body rows, err %v", purged, n, err)
	}
}

// TestMigration8GivesWaitingEnvelopesAnAuthor: bodies enqueued before
// origem.autoria was always present, and not yet delivered, get the
// publishing system as author, with origem's keys still in order; the rest
// of the body is untouched, and a delivered body is left as it was.
func TestMigration8GivesWaitingEnvelopesAnAuthor(t *testing.T) {
	ctx := t.Context()
	db, blocks := openAtMigration(t, 7)
	const (
		plain   = `{"id":"e1","ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"plugin":"rh","versao":"1.0.0"},"payload":{"a":[1,2.50,"ç"],"z":{"b":1e3}},"tipo":"a:b"}`
		command = `{"id":"e2","ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"plugin":"rh","solicitacao":"s-1","versao":"1.0.0"},"payload":{},"tipo":"a:b"}`
		authord = `{"id":"e3","ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"autoria":{"id":"u","tipo":"usuario"},"plugin":"rh","versao":"1.0.0"},"payload":{},"tipo":"a:b"}`
	)
	for _, q := range []string{
		`INSERT INTO integrator (id, nome, callback_url, hosts_permitidos, eventos, ativo, segredo, api_key_hash,
			criado_em, atualizado_em) VALUES ('int-1', 'CAD', 'https://cad', '[]', '["*"]', 1, x'00', 'h', 0, 0)`,
		`INSERT INTO event_log (event_id, tipo, versao_schema, timestamp, origem, correlacao_id, payload, criado_em)
			VALUES ('e1', 'a:b', '1.0.0', 0, 'rh', 'e1', '{}', 0), ('e2', 'a:b', '1.0.0', 0, 'rh', 'e2', '{}', 0),
			('e3', 'a:b', '1.0.0', 0, 'rh', 'e3', '{}', 0), ('e4', 'a:b', '1.0.0', 0, 'rh', 'e4', '{}', 0)`,
		`INSERT INTO outbox (id, event_id, sequence_number, integrador_id, tipo, agregado, sequencia, status,
			proxima_tentativa, criado_em) VALUES (1, 'e1', 1, 'int-1', 'a:b', 'x', 1, 'pendente', 0, 0),
			(2, 'e2', 2, 'int-1', 'a:b', 'x', 2, 'falhou', 0, 0), (3, 'e3', 3, 'int-1', 'a:b', 'x', 3, 'pendente', 0, 0),
			(4, 'e4', 4, 'int-1', 'a:b', 'x', 4, 'entregue', 0, 0)`,
		`INSERT INTO outbox_corpo (outbox_id, corpo) VALUES (1, CAST('` + plain + `' AS BLOB)), (2, CAST('` + command +
			`' AS BLOB)), (3, CAST('` + authord + `' AS BLOB)), (4, CAST('` + plain + `' AS BLOB))`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := apply(ctx, db, blocks); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int]string{
		1: `{"id":"e1","ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"autoria":{"id":"rh","tipo":"sistema"},"plugin":"rh","versao":"1.0.0"},"payload":{"a":[1,2.50,"ç"],"z":{"b":1e3}},"tipo":"a:b"}`,
		2: `{"id":"e2","ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"autoria":{"id":"rh","tipo":"sistema"},"plugin":"rh","solicitacao":"s-1","versao":"1.0.0"},"payload":{},"tipo":"a:b"}`,
		3: authord,
		4: plain,
	} {
		var got []byte
		if err := db.QueryRowContext(ctx, `SELECT corpo FROM outbox_corpo WHERE outbox_id = ?`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("body %d:\n got %s\nwant %s", id, got, want)
		}
	}
}

// openAtMigration opens a new database with the first n migrations of
// schema.sql applied, and returns every migration block to apply the rest.
func openAtMigration(t *testing.T, n int) (*sql.DB, []migration) {
	t.Helper()
	db, err := sql.Open(DriverName, DSN(filepath.Join(t.TempDir(), FileName), false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	blocks, err := migrations(geohub.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(t.Context(), db, blocks[:n]); err != nil {
		t.Fatal(err)
	}
	return db, blocks
}
