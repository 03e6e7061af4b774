package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"geohub/app"
)

// consolePeakRSS is what the server may hold at its peak, start included,
// while operators look at the deepest event an older binary stored. The
// server idles at a few tens of MB; the review measured 539 MB per view of
// this event and 1.7 GB for three.
const consolePeakRSS = 150 << 20

// TestConsoleShowsADeepStoredEventWithinBoundedMemory stores, as a binary
// without the nesting limit did (201 to anyone with a type that keeps a
// free-form object), the reviewer's event of 9,000 levels, then has three
// operators open its console page at once and measures the server's peak
// resident memory from outside, in /proc.
func TestConsoleShowsADeepStoredEventWithinBoundedMemory(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	first := startServer(t, data) // makes the data directory: database, master key
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM must exit 0: %v\n%s", err, first.out)
	}

	const levels = 9000
	payload := json.RawMessage(strings.Repeat(`{"a":`, levels) + `"fundo"` + strings.Repeat("}", levels))
	id := newEventID()
	ctx := context.Background()
	db := openTestStore(t, data)
	ev := app.Event{EventID: id, Tipo: "teste:livre", VersaoSchema: "1.0.0", Origem: "rh", CorrelacaoID: id,
		Timestamp: time.Now(), Autoria: &app.Autoria{Tipo: "sistema", ID: "rh"}, Payload: payload}
	if _, err := db.Append(ctx, []app.Pending{{Event: ev, Full: payload}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	srv := startBinary(t, plainBinary, data)
	const views = 3
	clients := make([]*http.Client, views)
	for i := range clients {
		jar, _ := cookiejar.New(nil)
		clients[i] = &http.Client{Jar: jar, Timeout: 2 * time.Minute,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if !consoleLogin(t, clients[i], srv.addr, "admin", "senha-de-teste-123") {
			t.Fatal("the admin cannot sign in on the console")
		}
	}
	pages := make([]string, views)
	errs := make([]error, views)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range clients {
		wg.Go(func() {
			<-start
			res, err := c.Get("http://" + srv.addr + "/eventos/" + id)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			if err == nil && res.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
			pages[i], errs[i] = string(b), err
		})
	}
	close(start)
	wg.Wait()
	peak := peakRSS(t, srv.cmd.Process.Pid)
	t.Logf("server peak RSS %d MB after %d concurrent views of a %d-byte, %d-level event", peak>>20, views, len(payload), levels)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("view %d: %v", i, err)
		}
	}
	if peak > consolePeakRSS {
		t.Fatalf("the server peaked at %d MB, over the bound of %d MB", peak>>20, consolePeakRSS>>20)
	}

	// The page says it cut the payload and links to the whole record,
	// which the same session opens as JSON that no browser runs.
	raw := "/eventos/" + id + "/bruto"
	for i, p := range pages {
		if !strings.Contains(p, `href="`+raw+`"`) || !strings.Contains(p, "data-json-cortado") {
			t.Fatalf("view %d does not say the payload is cut or does not link to %s", i, raw)
		}
		if len(p) > 1<<20 {
			t.Fatalf("view %d is %d bytes: the payload was not bounded", i, len(p))
		}
	}
	res, err := clients[0].Get("http://" + srv.addr + raw)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") ||
		res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("raw record: status %d, Content-Type %q, X-Content-Type-Options %q",
			res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("X-Content-Type-Options"))
	}
	var rec struct {
		EventID string          `json:"event_id"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(body, &rec); err != nil || rec.EventID != id || string(rec.Payload) != string(payload) {
		t.Fatalf("the raw record is not the stored event whole (%v): %.200s", err, body)
	}
	// A schema too large to show indented: cut on its page, whole at its link.
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--nome", "registro", "--data", data))
	props := make([]string, 3000)
	for i := range props {
		props[i] = fmt.Sprintf(`"campo%04d":{"type":"string","maxLength":10}`, i)
	}
	schema := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	reg, err := call(clients[0], "POST", "http://"+srv.addr+"/api/registro", token,
		`{"tipo":"teste:largo","versao":"1.0.0","audiencia":"todos","redacao":{"manter":[""]},"schema":`+schema+`}`)
	if err != nil || reg.status != http.StatusCreated {
		t.Fatalf("register a large schema: %+v %v", reg, err)
	}
	res, err = clients[0].Get("http://" + srv.addr + "/registro/teste:largo")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if link := "/registro/teste:largo/1.0.0/schema"; res.StatusCode != http.StatusOK || !strings.Contains(string(page), `href="`+link+`"`) ||
		!strings.Contains(string(page), "data-json-cortado") {
		t.Fatalf("the registry page (%d) does not cut the schema or link to %s", res.StatusCode, link)
	}
	res, err = clients[0].Get("http://" + srv.addr + "/registro/teste:largo/1.0.0/schema")
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var got, want any
	if json.Unmarshal(whole, &got) != nil || json.Unmarshal([]byte(schema), &want) != nil || !reflect.DeepEqual(got, want) ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("the raw schema (%d, %s) is not the registered one: %.200s", res.StatusCode, res.Header.Get("Content-Type"), whole)
	}

	// Signed out, the raw record is not there to read.
	anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = anon.Get("http://" + srv.addr + raw)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the raw record without a session answered %d, want the redirect to /login", res.StatusCode)
	}
}
