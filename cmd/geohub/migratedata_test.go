package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/keys"
	"geohub/store"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// errKilled is the test's stand-in for a migrate-data killed midway.
var errKilled = errors.New("killed")

// TestMigrateDataMovesADemoApplianceToPostgres runs the real binary with
// --demo and traffic of its own (deliveries to a loopback CAD, dead
// letters, tokens, a login), stops it, migrates its data directory in two
// runs (the first dies after a few batches), and reads the PostgreSQL
// copy through the services: the same events, secrets, deliveries,
// accounts, and counters that continue the source's.
func TestMigrateDataMovesADemoApplianceToPostgres(t *testing.T) {
	alongside(t)
	if storetest.Backend() == "postgres" {
		t.Skip("the source of migrate-data is SQLite: this test runs in the SQLite pass, against PostgreSQL all the same")
	}
	url := storetest.PostgresDatabase(t)
	data := t.TempDir()
	srv := startServer(t, data, "--demo")
	admin := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	produtor := lastLine(runCLI(t, "token", "create", "--papel", "produtor", "--nome", "escala", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + srv.addr

	good := newE2ECAD(t, client, srv.addr, admin, "CAD Bom")
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest) // an answer of the protocol: a dead letter at once
	}))
	defer refusing.Close()
	apiCall(t, client, "POST", base+"/api/integradores", admin,
		`{"nome":"CAD Recusa","callback_url":"`+refusing.URL+`/eventos","hosts_permitidos":["127.0.0.1"]}`)
	for i := range 30 {
		if status, _, err := publish(client, srv.addr, produtor, jornada(i)); err != nil || status != http.StatusCreated {
			t.Fatalf("publish %d: %d %v", i, status, err)
		}
	}
	// Wait for real traffic: the demo's first ocorrência delivered back to
	// its CAD, the good CAD's jornadas delivered, the refusing one's dead.
	waitFor(t, time.Minute, "traffic to settle", func() (bool, string) {
		var page struct {
			Linhas []struct{ Tipo, Status, Integrador string }
		}
		json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas?limite=500", admin, ""), &page)
		seen := map[string]int{}
		for _, d := range page.Linhas {
			seen[d.Status]++
			if d.Integrador == good.ID && d.Status == "entregue" {
				seen["good"]++
			}
			if strings.HasPrefix(d.Tipo, "ocorrencia:") && d.Status == "entregue" {
				seen["ocorrencia"]++
			}
		}
		// The refusing CAD's breaker opens after a few dead letters and
		// defers the rest: pending rows, which migrate as well.
		return seen["falhou"] >= 3 && seen["good"] >= 30 && seen["ocorrencia"] > 0, fmt.Sprintf("%v\n%s", seen, srv.out)
	})

	// While the appliance runs, migrate-data refuses and writes nothing.
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "migrate-data", "--from", data, "--db", url)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != refusedExit || !strings.Contains(string(out), "stop it") {
		t.Fatalf("migrate-data beside a running server: %v\n%s", err, out)
	}
	srv.cmd.Process.Signal(os.Interrupt)
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("server did not exit cleanly: %v\n%s", err, srv.out)
	}
	key, err := os.ReadFile(filepath.Join(data, masterKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	graph := func(db app.Store) *app.Services {
		svc, err := app.New(ctx, app.Deps{Store: db, MasterKey: key, NoDispatch: true,
			Policy: callback.Policy{Insecure: true}})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	// An operator of the console's, and a session of the admin's, as the
	// console makes them (a session and audit entries). Closed before the
	// migration opens the file.
	sdb, err := store.Open(ctx, filepath.Join(data, store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lite := graph(sdb)
	adminOp, err := lite.Sessions.Operators(ctx)
	if err != nil || len(adminOp) != 1 {
		t.Fatalf("operators: %v, %v", adminOp, err)
	}
	if _, err := lite.Sessions.CreateOperator(ctx, adminOp[0].ID, "fulana", "senha-da-fulana-1", app.PapelOperador); err != nil {
		t.Fatal(err)
	}
	session, _, err := lite.Sessions.Login(ctx, "admin", "senha-de-teste-123", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	sdb.Close()

	// The first run dies after five batches, the second resumes.
	var log bytes.Buffer
	batches := 0
	m := migrateData{From: data, URL: url, BatchRows: 7, BeforeCommit: func(app.MigrationBatch) error {
		if batches++; batches > 5 {
			return errKilled
		}
		return nil
	}}
	if err := m.run(t.Context(), &log); !errors.Is(err, errKilled) {
		t.Fatalf("first run: %v\n%s", err, &log)
	}
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var copied int64
	var done *int64
	c.QueryRow(t.Context(), "SELECT sum(linhas) FROM migracao_dados_tabela").Scan(&copied)
	c.QueryRow(t.Context(), "SELECT concluida_em FROM migracao_dados").Scan(&done)
	if copied == 0 || copied > 5*7 || done != nil {
		t.Fatalf("after the killed run: %d rows committed (want those of 5 batches of at most 7), done %v", copied, done)
	}
	// A replica started on the half-copied database refuses: its
	// counters are set only at the end.
	if db, err := postgres.Open(t.Context(), url, postgres.Options{}); err == nil {
		db.Close()
		t.Fatal("a replica opened a database migrate-data has not finished")
	} else if !strings.Contains(err.Error(), "migrate-data has not finished") {
		t.Fatalf("opening the half-copied database: %v", err)
	}
	m.BeforeCommit = nil
	log.Reset()
	if err := m.run(t.Context(), &log); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, &log)
	}
	if !strings.Contains(log.String(), "done:") || strings.Contains(log.String(), "DIFFERS") {
		t.Fatalf("resumed run's summary:\n%s", &log)
	}
	t.Logf("migrate-data's output:\n%s", &log)
	// A third run finds it done and verifies again.
	log.Reset()
	if err := m.run(t.Context(), &log); err != nil || !strings.Contains(log.String(), "done:") {
		t.Fatalf("run after the end: %v\n%s", err, &log)
	}

	sdb, err = store.Open(ctx, filepath.Join(data, store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	pdb, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	lite, pg := graph(sdb), graph(pdb)

	// The same events with the same sequences.
	var want, got []app.Event
	for ev, err := range lite.Queries.Replay(ctx, 0, nil) {
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ev)
	}
	for ev, err := range pg.Queries.Replay(ctx, 0, nil) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if len(want) < 30 || !reflect.DeepEqual(got, want) {
		t.Fatalf("events on PostgreSQL differ: %d events, the source %d", len(got), len(want))
	}

	// The integrators' secrets open with the same master key: a webhook
	// signed on PostgreSQL is the one signed on SQLite.
	ins, err := pg.Integrators.List(ctx)
	if err != nil || len(ins) != 3 {
		t.Fatalf("integrators on PostgreSQL: %d, %v", len(ins), err)
	}
	body := []byte(`{"tipo":"jornada:iniciada"}`)
	for _, in := range ins {
		ls, _, err := lite.Integrators.Secrets(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		ps, _, err := pg.Integrators.Secrets(ctx, in.ID)
		if err != nil {
			t.Fatalf("secret of %s on PostgreSQL: %v", in.Nome, err)
		}
		if app.Sign(ps, 1700000000, body) != app.Sign(ls, 1700000000, body) {
			t.Fatalf("%s signs differently on PostgreSQL", in.Nome)
		}
	}
	if in, err := pg.Integrators.Authenticate(ctx, good.APIKey); err != nil || in.ID != good.ID {
		t.Fatalf("the good CAD's API key on PostgreSQL: %v", err)
	}

	// Deliveries and dead letters, with their bodies: resendable.
	liteDead, _ := lite.Deliveries.List(ctx, app.DeliveryFilter{Status: "falhou", Limite: 500})
	dead, err := pg.Deliveries.List(ctx, app.DeliveryFilter{Status: "falhou", Limite: 500})
	if err != nil || len(dead.Linhas) < 3 || !reflect.DeepEqual(dead, liteDead) {
		t.Fatalf("dead letters on PostgreSQL: %d (the source %d), %v", len(dead.Linhas), len(liteDead.Linhas), err)
	}
	sealer, err := keys.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	d, attempts, err := pdb.Delivery(ctx, dead.Linhas[0].ID)
	if err != nil || len(attempts) == 0 {
		t.Fatalf("dead letter %d on PostgreSQL: %d attempts, %v", dead.Linhas[0].ID, len(attempts), err)
	}
	if plain, err := sealer.OpenBody(d.Corpo, d.EventID); err != nil || !json.Valid(plain) {
		t.Fatalf("dead letter's body does not open on PostgreSQL: %v", err)
	}
	if err := pg.Deliveries.Resend(ctx, d.ID); err != nil {
		t.Fatalf("resend on PostgreSQL: %v", err)
	}
	for _, status := range []string{"entregue", "pendente"} {
		l, _ := lite.Deliveries.List(ctx, app.DeliveryFilter{Status: status, Limite: 500})
		p, _ := pg.Deliveries.List(ctx, app.DeliveryFilter{Status: status, Limite: 500})
		extra := 0
		if status == "pendente" {
			extra = 1 // the one resent
		}
		if len(p.Linhas) != len(l.Linhas)+extra {
			t.Fatalf("%s deliveries: %d on PostgreSQL, %d on SQLite", status, len(p.Linhas), len(l.Linhas))
		}
	}

	// Operators log in with their passwords; tokens authenticate.
	for login, senha := range map[string]string{"admin": "senha-de-teste-123", "fulana": "senha-da-fulana-1"} {
		if _, op, err := pg.Sessions.Login(ctx, login, senha, "127.0.0.1"); err != nil || op.Login != login {
			t.Fatalf("%s's login on PostgreSQL: %v", login, err)
		}
	}
	if op, err := pg.Sessions.Resolve(ctx, session); err != nil || op.Login != "admin" {
		t.Fatalf("the admin's session on PostgreSQL: %v", err)
	}
	if tok, err := pg.Auth.Authenticate(ctx, admin); err != nil || tok.Papel != app.PapelAdmin {
		t.Fatalf("admin token on PostgreSQL: %+v, %v", tok, err)
	}
	la, _ := lite.AuditTrail.List(ctx, "", app.AuditFilter{Limite: 1000})
	pa, _ := pg.AuditTrail.List(ctx, "", app.AuditFilter{Limite: 1000})
	if len(la.Linhas) == 0 || len(pa.Linhas) < len(la.Linhas) {
		t.Fatalf("audit trail: %d entries on PostgreSQL, %d on SQLite", len(pa.Linhas), len(la.Linhas))
	}

	// The next publish continues the sequence; the next ids follow too.
	ev, _, err := pg.Publisher.Publish(ctx, app.PublishRequest{Tipo: "jornada:iniciada", VersaoSchema: "1.1.0", Origem: "teste",
		Payload: json.RawMessage(fmt.Sprintf(`{"jornadaId":"0199bb3e-0000-7000-8000-%012d","inicio":"2026-11-30T12:00:00Z","servidor":{"nome":"Ana","cpf":"12345678901"}}`, 999))})
	if err != nil {
		t.Fatal(err)
	}
	if last := want[len(want)-1].Sequence; ev.Sequence != last+1 {
		t.Fatalf("first publish on PostgreSQL got sequence %d, want %d", ev.Sequence, last+1)
	}
	for _, table := range []string{"outbox", "delivery_attempt", "audit_log"} {
		var maxID, next int64
		if err := c.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+table).Scan(&maxID); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRow(ctx, "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence($1, 'id')), 0)", table).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next != maxID {
			t.Fatalf("%s: the id sequence stands at %d, the table's last id is %d", table, next, maxID)
		}
	}

	pdb.Close()

	// The console on PostgreSQL shows the same events, deliveries and
	// integrators as the appliance did.
	srv = startServer(t, t.TempDir(), "--db", url, "--master-key-file", filepath.Join(data, masterKeyFile), "--insecure-callbacks")
	var events struct{ Total int }
	json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/events?limite=1", admin, ""), &events)
	if events.Total < len(want)+1 {
		t.Fatalf("the API on PostgreSQL counts %d events, want at least %d", events.Total, len(want)+1)
	}
	var list struct{ Integradores []struct{ ID string } }
	json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/integradores", admin, ""), &list)
	if len(list.Integradores) != 3 {
		t.Fatalf("the API on PostgreSQL lists %d integrators, want 3", len(list.Integradores))
	}
	// Every dead letter migrated but the one resent is listed. The server
	// also tries the refusing CAD's pending rows and the resent one (its
	// circuit probes after 2 s, SPEC 6.4), which may dead-letter again.
	var mortas struct {
		Linhas []struct {
			ID json.Number `json:"id"`
		}
	}
	json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/entregas?limite=500&status=falhou&integrador="+dead.Linhas[0].Integrador, admin, ""), &mortas)
	listed := map[string]bool{}
	for _, m := range mortas.Linhas {
		listed[m.ID.String()] = true
	}
	for _, m := range dead.Linhas[1:] {
		if m.Integrador == dead.Linhas[0].Integrador && !listed[strconv.FormatInt(m.ID, 10)] {
			t.Fatalf("the API on PostgreSQL does not list dead letter %d (it lists %v), one of the %d not resent", m.ID, listed, len(dead.Linhas)-1)
		}
	}

}

// TestMigrateDataRefusesATargetItDidNotFill checks the three refusals that
// protect a target: data that no migration wrote, a migration of another
// data directory, and a source that changed after its copy began.
func TestMigrateDataRefusesATargetItDidNotFill(t *testing.T) {
	alongside(t)
	if storetest.Backend() == "postgres" {
		t.Skip("the source of migrate-data is SQLite: this test runs in the SQLite pass, against PostgreSQL all the same")
	}
	ctx := t.Context()
	source := func(t *testing.T) string {
		dir := t.TempDir()
		key, err := masterKey(filepath.Join(dir, masterKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		db, err := store.Open(ctx, filepath.Join(dir, store.FileName), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		svc, err := app.New(ctx, app.Deps{Store: db, MasterKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.Auth.EnsureAdmin(ctx, "senha-de-teste-123"); err != nil {
			t.Fatal(err)
		}
		// As every start does: a new database's sealing upgrade is done.
		sealer, err := keys.NewSealer(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := app.SealStoredBodies(ctx, db, sealer, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if !errors.Is(err, app.ErrMigrationRefused) || exitCode(err) != refusedExit || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v (exit %d), want a refusal saying %q", err, exitCode(err), want)
		}
	}

	t.Run("a database that holds data of its own", func(t *testing.T) {
		url := storetest.PostgresDatabase(t)
		db, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := (&app.Auth{Store: db, Now: time.Now}).EnsureAdmin(ctx, "outra-senha-123"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		err = migrateData{From: source(t), URL: url}.run(ctx, io.Discard)
		refused(t, err, "already holds data")
	})
	t.Run("a migration of another data directory", func(t *testing.T) {
		url := storetest.PostgresDatabase(t)
		if err := (migrateData{From: source(t), URL: url}).run(ctx, io.Discard); err != nil {
			t.Fatal(err)
		}
		refused(t, migrateData{From: source(t), URL: url}.run(ctx, io.Discard), "another data directory")
	})
	t.Run("a source that changed after its copy began", func(t *testing.T) {
		url, dir := storetest.PostgresDatabase(t), source(t)
		if err := (migrateData{From: dir, URL: url}).run(ctx, io.Discard); err != nil {
			t.Fatal(err)
		}
		mainToken(t, dir, app.PapelLeitor, "depois")
		refused(t, migrateData{From: dir, URL: url}.run(ctx, io.Discard), "changed since")
	})
}
