//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/keys"
	"geohub/store"
)

// A data directory whose outbox holds bodies in clear, as the previous
// version left it (the store writes whatever body it is given; that version
// gave it the envelope itself), is sealed when geohub starts: no file holds
// the clear text afterwards, and the sealed bodies still deliver, byte for
// byte and signed.
func TestStartSealsTheBodiesAnEarlierVersionLeftInClear(t *testing.T) {
	alongside(t)
	sqliteOnly(t)
	const events = 5
	ctx := context.Background()
	data := t.TempDir()
	key, err := masterKey(filepath.Join(data, masterKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(data, store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := keys.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	cad := &atRestCAD{arrived: newBell()}
	cad.answer.Store(http.StatusNoContent)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cadSrv := &http.Server{Handler: cad}
	go cadSrv.Serve(ln)
	t.Cleanup(func() { cadSrv.Close() })
	integrators := &app.Integrators{Store: db, Sealer: sealer, Now: time.Now, Policy: callback.Policy{Insecure: true}}
	in, err := integrators.Create(ctx, app.NewIntegrator{Nome: "CAD antigo", CallbackURL: "http://" + ln.Addr().String() + "/eventos",
		HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	cad.setSecret(in.Segredo)
	bodies := map[string]string{}
	for i := range events {
		id := uuid.Must(uuid.NewV7()).String()
		body := fmt.Sprintf(`{"id":%q,"ocorridoEm":"2026-11-30T12:00:00.000Z","origem":{"autoria":{"id":"rh","tipo":"sistema"},"plugin":"rh","versao":"1.0.0"},"payload":{"inicio":"2026-11-30T12:00:00Z","jornadaId":%q,"servidor":{"cpf":%q,"nome":%q}},"tipo":"jornada:iniciada"}`,
			id, id, atRestCPF, atRestName)
		bodies[id] = body
		ev := app.Event{EventID: id, Tipo: "jornada:iniciada", VersaoSchema: "1.0.0", Timestamp: time.Now(), Origem: "rh",
			CorrelacaoID: id, Agregado: fmt.Sprintf("jornada:%d", i), Payload: json.RawMessage(`{}`)}
		out := &app.Outbox{Body: []byte(body), Agregado: ev.Agregado, Recipients: func(string) []string { return []string{in.ID} }}
		if _, err := db.Append(ctx, []app.Pending{{Event: ev, Outbox: out}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if found, _ := scanForClearText(t, data); len(found) == 0 {
		t.Fatal("the earlier version's directory holds no clear text: the scan below would prove nothing")
	}

	srv := launch{data: data, flags: []string{"--insecure-callbacks"}}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not start:\n%s", srv.out)
	}
	cad.arrived.await(t, 30*time.Second, fmt.Sprintf("%d upgraded deliveries", events), func() (bool, string) {
		return len(cad.arrivals()) >= events, fmt.Sprintf("%d arrived\n%s", len(cad.arrivals()), srv.out)
	})
	srv.stop()
	if !strings.Contains(srv.out.String(), "stored in clear; rewriting the database file") || !strings.Contains(srv.out.String(), "corpos=5 ") {
		t.Errorf("the start does not say it sealed the clear bodies:\n%s", srv.out)
	}
	for _, a := range cad.arrivals() {
		if !a.signed || string(a.body) != bodies[a.eventID] {
			t.Errorf("event %s arrived (signed: %v) as %s; stored as %s", a.eventID, a.signed, a.body, bodies[a.eventID])
		}
	}
	requireNoClearText(t, "data directory after the upgrade", data)
}
