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
	db, err := sql.Open(DriverName, DSN(filepath.Join(t.TempDir(), FileName), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	blocks, err := migrations(geohub.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, db, blocks[:5]); err != nil {
		t.Fatal(err)
	}
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
