package store

import (
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"geohub"
	"geohub/app"
	"geohub/app/keys"
)

// The clear text an earlier version's bodies held: a kept body's, and a
// purged one's (it lives on only in free space).
const (
	upgradeCPF    = "52998224725"
	upgradeName   = "Quitéria Anunciação"
	upgradePurged = "Expurgado-Veríssimo"
	upgradeAnswer = `{"erro":"servidor desconhecido","cpf":"` + upgradeCPF + `","nome":"` + upgradeName + `"}`
)

// writeVersion11 writes, at schema 11 and with the SQL that version ran,
// what an earlier server leaves: n outbox rows with their bodies in clear
// (pending, dead-lettered, delivered), some delivered bodies purged (their
// rows deleted, their bytes left in free space), and a body rewritten in
// place (as migration 8 did). The WAL is never checkpointed, and the files
// are copied to a fresh directory while the connection is open: the state a
// SIGKILL leaves. It returns that directory and each kept body by row.
func writeVersion11(t *testing.T, n int) (string, map[int64][]byte) {
	t.Helper()
	ctx := t.Context()
	src := t.TempDir()
	raw, err := sql.Open(DriverName, DSN(filepath.Join(src, FileName), false))
	if err != nil {
		t.Fatal(err)
	}
	raw.SetMaxOpenConns(1)
	t.Cleanup(func() { raw.Close() })
	blocks, err := migrations(geohub.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, raw, blocks[:11]); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := raw.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("PRAGMA wal_autocheckpoint = 0")
	exec(`INSERT INTO integrator (id, nome, callback_url, hosts_permitidos, eventos, ativo, segredo, api_key_hash,
		criado_em, atualizado_em) VALUES ('int-1', 'CAD', 'https://cad', '[]', '["*"]', 1, x'00', 'h', 0, 0)`)
	kept := map[int64][]byte{}
	statuses := []string{app.EntregaPendente, app.EntregaFalhou, app.EntregaEntregue}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("evento-%04d", i)
		status := statuses[i%3]
		body := fmt.Sprintf(`{"id":%q,"ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"autoria":{"id":"rh","tipo":"sistema"},"plugin":"rh","versao":"1.0.0"},"payload":{"servidor":{"cpf":%q,"nome":%q}},"tipo":"jornada:iniciada"}`,
			id, upgradeCPF, upgradeName)
		if i%10 == 0 && status == app.EntregaEntregue {
			body = strings.Replace(body, upgradeName, upgradePurged, 1)
		}
		exec(`INSERT INTO event_log (event_id, tipo, versao_schema, timestamp, origem, correlacao_id, payload, criado_em)
			VALUES (?, 'jornada:iniciada', '1.0.0', 0, 'rh', ?, '{}', 0)`, id, id)
		var entregue any
		if status == app.EntregaEntregue {
			entregue = 5000
		}
		exec(`INSERT INTO outbox (id, event_id, sequence_number, integrador_id, tipo, agregado, sequencia, status,
			proxima_tentativa, entregue_em, criado_em) VALUES (?, ?, ?, 'int-1', 'jornada:iniciada', 'x', ?, ?, 0, ?, 1000)`,
			i, id, i, i, status, entregue)
		exec(`INSERT INTO outbox_corpo (outbox_id, corpo) VALUES (?, ?)`, i, []byte(body))
		if status == app.EntregaFalhou {
			// A receiver that refuses an event and echoes its fields back.
			exec(`INSERT INTO delivery_attempt (outbox_id, entrega_id, tentativa, inicio, duracao_ms, status_code, resposta)
				VALUES (?, ?, 1, 7000, 250, 400, ?)`, i, "entrega-"+id, upgradeAnswer)
		}
		kept[int64(i)] = []byte(body)
	}
	// PurgeDelivered as version 11 ran it, for the marked bodies.
	exec(`DELETE FROM outbox_corpo WHERE outbox_id IN (SELECT id FROM outbox WHERE status = 'entregue' AND id % 10 = 0)`)
	exec(`UPDATE outbox SET expurgado = 1 WHERE status = 'entregue' AND id % 10 = 0`)
	for id := range kept {
		if id%10 == 0 && id%3 == 2 {
			delete(kept, id)
		}
	}
	// A body rewritten in place: its old bytes stay in the page's free space.
	exec(`UPDATE outbox_corpo SET corpo = CAST(replace(CAST(corpo AS TEXT), '"rh"', '"rh-2"') AS BLOB) WHERE outbox_id = 1`)
	kept[1] = bytes.ReplaceAll(kept[1], []byte(`"rh"`), []byte(`"rh-2"`))

	dst := t.TempDir()
	for _, name := range []string{FileName, FileName + "-wal"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if found := clearTextIn(t, dst); len(found) == 0 {
		t.Fatal("the version-11 files hold no clear text: the scan below would prove nothing")
	}
	return dst, kept
}

// clearTextIn scans every byte of every file under dir for the clear text
// of writeVersion11, also JSON-escaped.
func clearTextIn(t *testing.T, dir string) []string {
	t.Helper()
	forms := []string{upgradeCPF, upgradeName, upgradePurged, "Quitéria", "Anunciação", "Veríssimo",
		`Quit\u00e9ria`, `Anuncia\u00e7\u00e3o`, `Ver\u00edssimo`}
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, f := range forms {
			if i := bytes.Index(b, []byte(f)); i >= 0 {
				found = append(found, fmt.Sprintf("%q in %s at byte %d", f, filepath.Base(p), i))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestUpgradeSealsTheClearBodiesAndLeavesNoCopyInTheFiles(t *testing.T) {
	ctx := t.Context()
	const rows = 700 // several batches
	dir, kept := writeVersion11(t, rows)
	path := filepath.Join(dir, FileName)
	sealer, err := keys.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	seal := func(eventID string, body []byte) []byte {
		if keys.BodySealed(body) {
			return nil
		}
		return sealer.SealBody(body, eventID)
	}

	// The first start seals one batch and dies: the batch and the cursor
	// committed together, so the next start resumes after it.
	upgraded := time.Now().UnixMilli()
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := db.ClearBodiesPending(ctx); err != nil || !pending {
		t.Fatalf("migration 12 must leave the upgrade pending: %v %v", pending, err)
	}
	n, done, err := db.SealClearBodies(ctx, 256, seal)
	if err != nil || n != 256 || done {
		t.Fatalf("first batch: sealed %d, done %v, err %v; want 256 of the %d bodies, not done", n, done, err, len(kept))
	}
	db.Close()

	db, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.SealStoredBodies(ctx, db, sealer, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if pending, err := db.ClearBodiesPending(ctx); err != nil || pending {
		t.Fatalf("the upgrade did not finish: %v %v", pending, err)
	}
	// Every kept body is sealed once (not twice, across the restart), opens
	// to what it was, and only on its own event.
	rs, err := db.read.QueryContext(ctx, `SELECT c.outbox_id, o.event_id, c.corpo FROM outbox_corpo c JOIN outbox o ON o.id = c.outbox_id`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rs.Next() {
		var id int64
		var eventID string
		var corpo []byte
		if err := rs.Scan(&id, &eventID, &corpo); err != nil {
			t.Fatal(err)
		}
		seen++
		body, err := sealer.OpenBody(corpo, eventID)
		if err != nil || !bytes.Equal(body, kept[id]) {
			t.Errorf("row %d: opens to %q (%v); want %q", id, body, err, kept[id])
		}
		if _, err := sealer.OpenBody(corpo, "evento-outro"); err == nil {
			t.Errorf("row %d: the sealed body opens for another event", id)
		}
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	if seen != len(kept) {
		t.Errorf("%d bodies after the upgrade; %d before", seen, len(kept))
	}
	checkAnswersSealed(t, db, sealer, (rows+2)/3) // the dead letters: i % 3 == 1
	// Finished, a start costs one read and changes nothing.
	if err := app.SealStoredBodies(ctx, db, sealer, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	// Migration 12 dated the dead letters by the upgrade, not by their last
	// attempt (7 s after the epoch here): one whole retention to resend them.
	var dead, dated int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE falhou_em BETWEEN ? AND ?)
		FROM outbox WHERE status = 'falhou'`, upgraded-1000, time.Now().UnixMilli()+1000).Scan(&dead, &dated); err != nil || dead == 0 || dated != dead {
		t.Errorf("dead letters: %d dated by the upgrade, of %d (%v)", dated, dead, err)
	}
	// Still a server's running database: the WAL holds what it wrote since
	// the scrub, which is no clear text.
	if found := clearTextIn(t, dir); len(found) > 0 {
		t.Errorf("clear text survives while the database is open: %s", strings.Join(found, "; "))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if found := clearTextIn(t, dir); len(found) > 0 {
		t.Errorf("clear text survives the upgrade: %s", strings.Join(found, "; "))
	}
	checkFile(t, path)
}

// checkFile runs integrity_check on a closed database file.
func checkFile(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open(DriverName, DSN(path, true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q %v", res, err)
	}
}

// A new database passes through the upgrade over nothing at its first start.
func TestANewDatabaseFinishesTheUpgradeAtOnce(t *testing.T) {
	ctx := t.Context()
	db, err := Open(ctx, filepath.Join(t.TempDir(), FileName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sealer, _ := keys.NewSealer(make([]byte, 32))
	start := time.Now()
	if err := app.SealStoredBodies(ctx, db, sealer, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if pending, err := db.ClearBodiesPending(ctx); err != nil || pending {
		t.Fatalf("pending after the first start: %v %v", pending, err)
	}
	t.Logf("upgrade of an empty database: %v", time.Since(start))
}

// checkAnswersSealed checks that want attempts had an answer, that each is
// sealed and opens to upgradeAnswer on its own attempt only, and that none
// is left in clear.
func checkAnswersSealed(t *testing.T, db *DB, sealer *keys.Sealer, want int) {
	t.Helper()
	rs, err := db.read.QueryContext(t.Context(), `SELECT entrega_id, resposta, resposta_selada FROM delivery_attempt`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		var entregaID, resposta string
		var sealed []byte
		if err := rs.Scan(&entregaID, &resposta, &sealed); err != nil {
			t.Fatal(err)
		}
		n++
		if resposta != "" {
			t.Errorf("attempt %s: answer still in clear: %q", entregaID, resposta)
		}
		if got, err := sealer.OpenResponse(sealed, entregaID); err != nil || got != upgradeAnswer {
			t.Errorf("attempt %s: answer opens to %q (%v)", entregaID, got, err)
		}
		if _, err := sealer.OpenResponse(sealed, "entrega-outra"); err == nil {
			t.Errorf("attempt %s: the sealed answer opens for another attempt", entregaID)
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("%d attempts after the upgrade, want %d", n, want)
	}
}

// A database whose bodies an earlier version already sealed (the upgrade
// done) but whose attempts keep receivers' answers in clear goes through
// the upgrade again: migration 15 sends it back, the answers are sealed
// and the file rewritten, so no clear copy survives.
func TestUpgradeSealsTheClearAnswersOfADatabaseWhoseBodiesWereSealed(t *testing.T) {
	ctx := t.Context()
	dir, _ := writeVersion11(t, 30)
	path := filepath.Join(dir, FileName)
	sealer, err := keys.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Up to migration 14 and through the upgrade as that version ran it:
	// bodies sealed, file rewritten, answers left as they were.
	raw, err := sql.Open(DriverName, DSN(path, false))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := migrations(geohub.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, raw, blocks[:14]); err != nil {
		t.Fatal(err)
	}
	rs, err := raw.QueryContext(ctx, `SELECT c.outbox_id, o.event_id, c.corpo FROM outbox_corpo c JOIN outbox o ON o.id = c.outbox_id`)
	if err != nil {
		t.Fatal(err)
	}
	sealed := map[int64][]byte{}
	for rs.Next() {
		var id int64
		var eventID string
		var corpo []byte
		if err := rs.Scan(&id, &eventID, &corpo); err != nil {
			t.Fatal(err)
		}
		sealed[id] = sealer.SealBody(corpo, eventID)
	}
	rs.Close()
	for id, b := range sealed {
		if _, err := raw.ExecContext(ctx, `UPDATE outbox_corpo SET corpo = ? WHERE outbox_id = ?`, b, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{`UPDATE outbox_selagem SET cursor = 1000, etapa = 2`, "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()

	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := db.ClearBodiesPending(ctx); err != nil || !pending {
		t.Fatalf("migration 15 must send a database with clear answers through the upgrade again: %v %v", pending, err)
	}
	if err := app.SealStoredBodies(ctx, db, sealer, logger); err != nil {
		t.Fatal(err)
	}
	if pending, err := db.ClearBodiesPending(ctx); err != nil || pending {
		t.Fatalf("the upgrade did not finish: %v %v", pending, err)
	}
	checkAnswersSealed(t, db, sealer, 10)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if found := clearTextIn(t, dir); len(found) > 0 {
		t.Errorf("clear text survives the upgrade: %s", strings.Join(found, "; "))
	}
	checkFile(t, path)
}
