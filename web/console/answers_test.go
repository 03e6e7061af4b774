package console

import (
	"testing"
	"time"

	"geohub/app"
)

func TestSplitDetailKeepsWhatFollowsTheDetail(t *testing.T) {
	for msg, want := range map[string][2]string{
		"conexão recusada: nada escuta no endereço do callback (detalhe: dial tcp 127.0.0.1:9: connect: connection refused)": {
			"conexão recusada: nada escuta no endereço do callback", "dial tcp 127.0.0.1:9: connect: connection refused"},
		// What app adds after the detail has parentheses of its own.
		"o receptor não respondeu a tempo (detalhe: Post \"https://cad/x\": context deadline exceeded (Client.Timeout exceeded)); tentativas esgotadas (3)": {
			"o receptor não respondeu a tempo; tentativas esgotadas (3)", `Post "https://cad/x": context deadline exceeded (Client.Timeout exceeded)`},
		"o receptor respondeu 503": {"o receptor respondeu 503", ""},
	} {
		reason, detail := splitDetail(msg)
		if reason != want[0] || detail != want[1] {
			t.Errorf("%q:\n got %q / %q\nwant %q / %q", msg, reason, detail, want[0], want[1])
		}
	}
}

func TestAnswerPartsLeadWithTheCode(t *testing.T) {
	for _, c := range []struct {
		d            app.Delivery
		code, reason string
	}{
		{app.Delivery{UltimoStatus: 400, UltimoErro: "o receptor respondeu 400: não haverá nova tentativa", Tentativas: 1}, "HTTP 400", "não haverá nova tentativa"},
		{app.Delivery{UltimoStatus: 503, UltimoErro: "o receptor respondeu 503", Tentativas: 2}, "HTTP 503", ""},
		{app.Delivery{UltimoErro: "conexão recusada: nada escuta no endereço do callback (detalhe: dial tcp: refused)", Tentativas: 1}, "", "conexão recusada: nada escuta no endereço do callback"},
		{app.Delivery{}, "", "ainda sem tentativa"},
	} {
		if code, reason := answerParts(c.d); code != c.code || reason != c.reason {
			t.Errorf("%+v: %q %q, want %q %q", c.d, code, reason, c.code, c.reason)
		}
	}
}

func TestHealthWordsSayTheirWindow(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	rate := 0.975
	if got := healthWindow(&app.Health{Desde: now.Add(-time.Hour)}, now); got != "última hora" {
		t.Errorf("an hour: %q", got)
	}
	if got := healthWindow(&app.Health{Desde: now.Add(-10 * time.Minute)}, now); got != "desde 11:50:00, quando o servidor iniciou" {
		t.Errorf("a young server: %q", got)
	}
	if got := rateText(&app.Health{Tentativas: 40, Sucessos: 39, TaxaSucesso: &rate}); got != "97,5% (39 de 40)" {
		t.Errorf("rate %q", got)
	}
	if got := rateText(&app.Health{}); got != "sem tentativas" {
		t.Errorf("no attempts: %q", got)
	}
	open := app.Integrator{Nome: "b", Ativo: true, Circuito: &app.Circuit{Estado: app.CircuitoAberto}}
	failing := app.Integrator{Nome: "a", Ativo: true, FalhandoDesde: &now, Circuito: &app.Circuit{Estado: app.CircuitoFechado}}
	if troubleRank(open) != 0 || troubleRank(failing) != 1 || troubleRank(app.Integrator{Ativo: false}) != 1 || troubleRank(app.Integrator{Ativo: true}) != 2 {
		t.Error("trouble ranks: open circuit, then failing or inactive, then the rest")
	}
}
