package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SPEC 10: a http:// loopback callback accepted under --insecure-callbacks
// is never used by the same data directory served without it. The server
// says so at start, the API and the console's integrator page say why, and
// each delivery dead-letters with that reason before any dial.
func TestAnInsecureCallbackIsRefusedAfterARestartWithoutInsecureCallbacks(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	rec := newCollector()
	cad := httptest.NewServer(rec)
	defer cad.Close()
	srv := startServer(t, data, "--insecure-callbacks")
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	var in struct{ ID string }
	json.Unmarshal(apiCall(t, client, "POST", "http://"+srv.addr+"/api/integradores", token,
		`{"nome":"CAD Bombeiros","callback_url":"`+cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"]}`), &in)
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.cmd.Wait()

	srv = startServer(t, data)
	if !strings.Contains(srv.out.String(), "callback refused by this server") || !strings.Contains(srv.out.String(), in.ID) {
		t.Errorf("the start log does not name the refused callback:\n%s", srv.out)
	}
	var got struct {
		CallbackRecusado string `json:"callback_recusado"`
	}
	json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/integradores/"+in.ID, token, ""), &got)
	if !strings.Contains(got.CallbackRecusado, "https") {
		t.Errorf("GET /api/integradores/{id}: callback_recusado %q", got.CallbackRecusado)
	}

	status, id, err := publish(client, srv.addr, token, jornada(1))
	if err != nil || status != http.StatusCreated {
		t.Fatalf("publish: %d %v", status, err)
	}
	var d struct {
		Linhas []struct {
			Status     string `json:"status"`
			UltimoErro string `json:"ultimo_erro"`
		} `json:"linhas"`
	}
	waitFor(t, 30*time.Second, "the delivery to end", func() (bool, string) {
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/entregas?event_id="+id, token, ""), &d)
		return len(d.Linhas) == 1 && d.Linhas[0].Status != "pendente" && d.Linhas[0].Status != "processando", fmt.Sprintf("%+v", d)
	})
	if d.Linhas[0].Status != "falhou" || !strings.Contains(d.Linhas[0].UltimoErro, "--insecure-callbacks") {
		t.Errorf("the delivery: %+v", d.Linhas[0])
	}
	if n := rec.has([]string{id}); n != 0 {
		t.Errorf("the refused callback got the event")
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if !consoleLogin(t, browser, srv.addr, "admin", "senha-de-teste-123") {
		t.Fatal("console login failed")
	}
	for _, path := range []string{"/integradores/" + in.ID, "/integradores"} {
		res, err := browser.Get("http://" + srv.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(page), "data-callback-recusado") || !strings.Contains(string(page), "o esquema deve ser https") {
			t.Errorf("%s does not say the callback is refused (%d)", path, res.StatusCode)
		}
	}
}
