package simulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"geohub/receiver"
)

const (
	self   = "0199bb3e-0000-7000-8000-0000000000f1"
	apiKey = "gk_teste"
)

var (
	secret   = []byte("whsec-simulador")
	uuidRE   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[47][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	echo     = &receiver.Autoria{ID: self, Tipo: "integrador"}
	operador = &receiver.Autoria{ID: "0199bb3e-0000-7000-8000-0000000000aa", Tipo: "usuario"}
)

// delivery is one webhook as Geohub would send it.
type delivery struct {
	id       string
	agregado string
	seq      int64 // 0: no X-Geohub-Sequencia
	body     []byte
}

// envelope builds the body of event id.
func envelope(t testing.TB, id, tipo string, autoria *receiver.Autoria, sol string, payload any) []byte {
	t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	plugin, _, _ := bytes.Cut([]byte(tipo), []byte(":"))
	b, err := json.Marshal(receiver.Envelope{
		ID:         id,
		OcorridoEm: time.Date(2026, 10, 31, 12, 4, 11, 0, time.UTC),
		Origem:     receiver.Origem{Autoria: autoria, Plugin: string(plugin), Solicitacao: sol, Versao: "1.0.0"},
		Payload:    p,
		Tipo:       tipo,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signedRequest is d as an HTTP request to url, signed now.
func signedRequest(t testing.TB, url string, d delivery, attempt int) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(receiver.HeaderEventoID, d.id)
	req.Header.Set(receiver.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(receiver.HeaderAssinatura, receiver.Sign(secret, ts, d.body))
	if d.agregado != "" {
		req.Header.Set(receiver.HeaderAgregado, d.agregado)
	}
	if d.seq > 0 {
		req.Header.Set(receiver.HeaderSequencia, strconv.FormatInt(d.seq, 10))
	}
	req.Header.Set(receiver.HeaderEntregaID, NewSolicitacaoID())
	req.Header.Set(receiver.HeaderTentativa, strconv.Itoa(attempt))
	return req
}

// deliverDirect hands d to h without a network (used inside the fake API,
// which already runs on a real server).
func deliverDirect(t testing.TB, h http.Handler, d delivery) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, signedRequest(t, "http://cad.test/geohub/eventos", d, 1))
	if w.Code != http.StatusNoContent {
		t.Errorf("delivery %s (%s #%d): %d %s", d.id, d.agregado, d.seq, w.Code, w.Body)
	}
}

func oc(id, natureza, status string, versao int64, ds ...Despacho) Ocorrencia {
	if ds == nil {
		ds = []Despacho{}
	}
	return Ocorrencia{ID: id, Natureza: natureza, Status: status, Versao: versao, Despachos: ds}
}

func desp(id, ocID, recurso, status string) Despacho {
	return Despacho{ID: id, OcorrenciaID: ocID, Recurso: Recurso{Identificador: recurso}, Status: status}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustEnvelope(t testing.TB, body []byte) receiver.Envelope {
	t.Helper()
	var env receiver.Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	return env
}
