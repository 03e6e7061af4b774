//go:build linux

// Personal data at rest (issue 16 item 2, SPEC 6.4): the outbox keeps the
// full envelope of every event until it is delivered (and a while after),
// so it is the one place the database could hold what redaction removed
// from the log. These tests read every byte the server leaves on disk.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
)

// The person in every payload: jornada:iniciada's redaction drops
// servidor.nome and hashes servidor.cpf, so the log never holds either.
const (
	atRestCPF  = "52998224725"
	atRestName = "Marialva Quitéria Anunciação"
)

// clearForms is every way the name and the CPF could be written: as
// published, and JSON-escaped (\u00e9 in lower and upper case hex, which
// other encoders emit for non-ASCII text).
func clearForms() map[string][]byte {
	forms := map[string][]byte{"cpf": []byte(atRestCPF), "nome": []byte(atRestName)}
	for _, word := range strings.Fields(atRestName) {
		forms["nome: "+word] = []byte(word)
		var lower, upper strings.Builder
		escaped := false
		for _, r := range word {
			if r < 0x80 {
				lower.WriteRune(r)
				upper.WriteRune(r)
				continue
			}
			escaped = true
			fmt.Fprintf(&lower, `\u%04x`, r)
			fmt.Fprintf(&upper, `\u%04X`, r)
		}
		if escaped {
			forms["nome escapado: "+lower.String()] = []byte(lower.String())
			forms["nome escapado: "+upper.String()] = []byte(upper.String())
		}
	}
	return forms
}

// scanForClearText reads every byte of every file under root (a file or a
// directory) and reports each form it finds, with where.
func scanForClearText(t *testing.T, root string) (found []string, files int) {
	t.Helper()
	forms := clearForms()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for what, form := range forms {
			if i := bytes.Index(b, form); i >= 0 {
				found = append(found, fmt.Sprintf("%s in %s at byte %d of %d", what, p, i, len(b)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found, files
}

func requireNoClearText(t *testing.T, what, root string) {
	t.Helper()
	found, files := scanForClearText(t, root)
	if files == 0 {
		t.Fatalf("%s: no file to scan under %s", what, root)
	}
	for _, f := range found {
		t.Errorf("%s: personal data in clear: %s", what, f)
	}
	if len(found) == 0 {
		t.Logf("%s: %d files scanned, neither the CPF nor the name in any form", what, files)
	}
}

// atRestCAD is a receiver that records what arrives and answers with the
// status it is told to; it checks each signature with the integrator's
// secret as seed 000's receivers do.
type atRestCAD struct {
	secret string
	answer atomic.Int32
	// echo makes it answer with the refused event's person, as a CAD that
	// validates against its own records says which one it does not know:
	// the first bytes of that answer are kept with the attempt.
	echo atomic.Bool
	mu   sync.Mutex
	got  []atRestArrival
	// arrived rings after each request is recorded.
	arrived bell
}

type atRestArrival struct {
	eventID, agregado string
	seq               int64
	body              []byte
	signed            bool
}

func (c *atRestCAD) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ts, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Timestamp"), 10, 64)
	seq, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Sequencia"), 10, 64)
	c.mu.Lock()
	secret := c.secret
	c.got = append(c.got, atRestArrival{eventID: r.Header.Get("X-Geohub-Evento-Id"), agregado: r.Header.Get("X-Geohub-Agregado"),
		seq: seq, body: body, signed: r.Header.Get("X-Geohub-Assinatura") == app.Sign([]byte(secret), ts, body)})
	c.mu.Unlock()
	c.arrived.ring()
	w.WriteHeader(int(c.answer.Load()))
	if c.echo.Load() {
		fmt.Fprintf(w, `{"erro":"servidor não cadastrado","nome":%q,"cpf":%q}`, atRestName, atRestCPF)
	}
}

// setSecret is under the lock: the requests that read it come from another
// process, which gives the race detector no happens-before.
func (c *atRestCAD) setSecret(s string) {
	c.mu.Lock()
	c.secret = s
	c.mu.Unlock()
}

func (c *atRestCAD) arrivals() []atRestArrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]atRestArrival(nil), c.got...)
}

func TestNoPersonalDataInClearInTheDataDirectoryOrABackup(t *testing.T) {
	alongside(t)
	sqliteOnly(t)
	for _, stop := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(stop, func(t *testing.T) { testNoPersonalDataAtRest(t, stop) })
	}
}

func testNoPersonalDataAtRest(t *testing.T, stop string) {
	const events = 4 // below the breaker's threshold of distinct events: none opens before each row was tried
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	flags := []string{"--insecure-callbacks"}
	srv := launch{data: data, flags: flags}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not start:\n%s", srv.out)
	}
	out, err := cli(t, nil, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, out)
	}
	token := lastLine(out)
	client := &http.Client{Timeout: 15 * time.Second}
	base := "http://" + srv.addr

	// Two receivers: one answers 400 (a protocol refusal: dead letter at
	// once), the other is down (nothing listens on its port: the rows stay
	// pendente, retrying).
	refusing := &atRestCAD{arrived: newBell()}
	refusing.answer.Store(http.StatusBadRequest)
	refusing.echo.Store(true)
	refusingLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusingSrv := &http.Server{Handler: refusing}
	go refusingSrv.Serve(refusingLn)
	t.Cleanup(func() { refusingSrv.Close() })
	downLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := downLn.Addr().String()
	downLn.Close()

	create := func(name, callback, backoff string) (id, secret string) {
		a, err := call(client, "POST", base+"/api/integradores", token, `{"nome":"`+name+`","callback_url":"`+callback+
			`","hosts_permitidos":["127.0.0.1"],"backoff":`+backoff+`}`)
		if err != nil || a.status != http.StatusCreated {
			t.Fatalf("create integrator %s: %v %d %s", name, err, a.status, a.body)
		}
		var in struct{ ID, Segredo string }
		json.Unmarshal(a.body, &in)
		return in.ID, in.Segredo
	}
	refusingID, refusingSecret := create("CAD que recusa", "http://"+refusingLn.Addr().String()+"/eventos", `["1s"]`)
	refusing.setSecret(refusingSecret)
	downID, downSecret := create("CAD fora do ar", "http://"+downAddr+"/eventos", `["1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s"]`)

	published := map[string]bool{}
	for i := range events {
		id := newEventID()
		body := fmt.Sprintf(`{"event_id":%q,"agregado":"jornada:equipe-%d","tipo":"jornada:iniciada","origem":"rh",`+
			`"payload":{"jornadaId":%q,"inicio":"2026-11-30T12:00:00Z","servidor":{"nome":%q,"cpf":%q}}}`,
			id, i%2, id, atRestName, atRestCPF)
		if a, err := call(client, "POST", base+"/api/events", token, body); err != nil || a.status != http.StatusCreated {
			t.Fatalf("publish: %v %d %s", err, a.status, a.body)
		}
		published[id] = true
	}

	// Wait for the outbox to settle into what it must hold at rest: every
	// row of the refusing receiver dead-lettered, every row of the one
	// that is down tried at least once and pending.
	type row struct {
		ID         int64  `json:"id,string"`
		EventID    string `json:"event_id"`
		Integrador string
		Status     string
		Tentativas int
	}
	waitFor(t, time.Minute, fmt.Sprintf("%d dead letters and %d pending rows tried", events, events), func() (bool, string) {
		rows := listAll[row](t, client, base+"/api/entregas", token)
		dead, waiting := 0, 0
		for _, r := range rows {
			switch {
			case r.Integrador == refusingID && r.Status == app.EntregaFalhou:
				dead++
			case r.Integrador == downID && r.Status == app.EntregaPendente && r.Tentativas > 0:
				waiting++
			}
		}
		return dead == events && waiting == events && len(rows) == 2*events, fmt.Sprintf("%d and %d; rows: %+v", dead, waiting, rows)
	})

	switch stop {
	case "SIGTERM":
		srv.stop()
	default:
		srv.kill()
		if fi, err := os.Stat(filepath.Join(data, "geohub.db-wal")); err != nil || fi.Size() == 0 {
			t.Fatalf("after SIGKILL the WAL should still hold the last commits: %v", err)
		}
	}
	// Before anything opens the database again: the files as the server
	// left them (after SIGKILL, the WAL with its last commits).
	requireNoClearText(t, "data directory after "+stop, data)

	backup := filepath.Join(t.TempDir(), "copia.db")
	if out, err := cli(t, nil, bin, "backup", "--out", backup, "--data", data); err != nil {
		t.Fatalf("backup: %v %s", err, out)
	}
	requireNoClearText(t, "backup", backup)
	requireNoClearText(t, "data directory after the backup", data)

	// Encryption must not break delivery: the server comes back, both
	// receivers recover, and every event arrives, signed, with the full
	// payload it was published with.
	srv = launch{data: data, flags: flags}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not restart:\n%s", srv.out)
	}
	base = "http://" + srv.addr
	recovered := &atRestCAD{secret: downSecret, arrived: newBell()}
	recovered.answer.Store(http.StatusNoContent)
	ln, err := net.Listen("tcp", downAddr)
	if err != nil {
		t.Skipf("the down receiver's port %s was taken meanwhile: %v", downAddr, err)
	}
	recoveredSrv := &http.Server{Handler: recovered}
	go recoveredSrv.Serve(ln)
	t.Cleanup(func() { recoveredSrv.Close() })
	// The operator still reads what the receiver answered, opened.
	for _, r := range listAll[row](t, client, base+"/api/entregas?integrador="+refusingID, token) {
		a, err := call(client, "GET", fmt.Sprintf("%s/api/entregas/%d", base, r.ID), token, "")
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("delivery %d: %v %d %s", r.ID, err, a.status, a.body)
		}
		var d struct {
			Tentativas []struct{ Resposta string } `json:"tentativas_registradas"`
		}
		json.Unmarshal(a.body, &d)
		if len(d.Tentativas) == 0 || !strings.Contains(d.Tentativas[0].Resposta, atRestCPF) {
			t.Errorf("delivery %d: the receiver's answer does not read back: %s", r.ID, a.body)
		}
	}
	refusing.echo.Store(false)
	refusing.answer.Store(http.StatusNoContent)
	before := len(refusing.arrivals())
	if a, err := call(client, "POST", base+"/api/integradores/"+downID+"/tentar-agora", token, ""); err != nil || a.status != http.StatusOK {
		t.Fatalf("tentar agora: %v %d %s", err, a.status, a.body)
	}
	if a, err := call(client, "POST", base+"/api/entregas/reenviar", token,
		`{"integrador":"`+refusingID+`","status":"falhou"}`); err != nil || a.status != http.StatusOK || !strings.Contains(string(a.body), fmt.Sprintf(`"reenviadas":%d`, events)) {
		t.Fatalf("bulk resend: %v %d %s", err, a.status, a.body)
	}
	waitFor(t, time.Minute, fmt.Sprintf("%d deliveries entregue after the receivers recovered", 2*events), func() (bool, string) {
		delivered, err := total(client, base+"/api/entregas?limite=1&status=entregue", token)
		if err != nil {
			t.Fatal(err)
		}
		return delivered == 2*events, fmt.Sprintf("%d entregue\n%s", delivered, srv.out)
	})
	for name, got := range map[string][]atRestArrival{"recovered": recovered.arrivals(), "refusing": refusing.arrivals()[before:]} {
		seen := map[string]bool{}
		for _, a := range got {
			if !a.signed {
				t.Errorf("%s: event %s arrived with a signature that does not verify", name, a.eventID)
			}
			var env struct {
				ID      string `json:"id"`
				Tipo    string `json:"tipo"`
				Payload struct {
					JornadaID string `json:"jornadaId"`
					Servidor  struct{ Nome, CPF string }
				} `json:"payload"`
			}
			if err := json.Unmarshal(a.body, &env); err != nil {
				t.Errorf("%s: event %s: the body is not the JSON envelope: %v: %q", name, a.eventID, err, a.body)
				continue
			}
			if env.ID != a.eventID || env.Payload.JornadaID != a.eventID || env.Tipo != "jornada:iniciada" ||
				env.Payload.Servidor.Nome != atRestName || env.Payload.Servidor.CPF != atRestCPF {
				t.Errorf("%s: event %s arrived as %s", name, a.eventID, a.body)
			}
			if !published[a.eventID] {
				t.Errorf("%s: event %s was never published", name, a.eventID)
			}
			seen[a.eventID] = true
		}
		if len(seen) != events {
			t.Errorf("%s: %d of %d events arrived", name, len(seen), events)
		}
	}
	srv.stop()
	requireNoClearText(t, "data directory after the deliveries", data)
}
