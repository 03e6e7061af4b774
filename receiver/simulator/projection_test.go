package simulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"sync"
	"testing"

	"geohub/receiver"
)

// script builds the deliveries Geohub would send the CAD, numbering each
// aggregate's sequence.
type script struct {
	t    *testing.T
	ds   []delivery
	seqs map[string]int64
}

func (s *script) add(agregado, tipo string, autoria *receiver.Autoria, sol string, payload any) {
	id := fmt.Sprintf("evt-%03d", len(s.ds)+1)
	var seq int64
	if agregado != "" {
		s.seqs[agregado]++
		seq = s.seqs[agregado]
	}
	s.ds = append(s.ds, delivery{id: id, agregado: agregado, seq: seq,
		body: envelope(s.t, id, tipo, autoria, sol, payload)})
}

type outcomePayload struct {
	Comando   map[string]string `json:"comando"`
	Status    int               `json:"status"`
	Resultado *Ocorrencia       `json:"resultado,omitempty"`
	Motivo    *Motivo           `json:"motivo,omitempty"`
}

// concluded adds the integracao:comando-concluido of command sol.
func (s *script) concluded(sol, metodo, rota string, status int, r Ocorrencia) {
	s.add("solicitacao:"+sol, TipoComandoConcluido, echo, sol,
		outcomePayload{Comando: map[string]string{"metodo": metodo, "rota": rota}, Status: status, Resultado: &r})
}

func despachoStatus(id, ocID, de, para string) map[string]string {
	return map[string]string{"id": id, "ocorrenciaId": ocID, "de": de, "para": para}
}

// convergenceScript is a busy afternoon: two ocorrências of this CAD with
// its own commands (echoes, and their outcomes) interleaved with an
// operator's actions on the console, a refused command, and jornadas. It
// returns the deliveries, in the order Geohub produced them, and the state
// they must lead to.
func convergenceScript(t *testing.T) ([]delivery, []Ocorrencia, map[string]string, map[string]Outcome) {
	s := &script{t: t, seqs: map[string]int64{}}
	const o1, o2 = "oc-1", "oc-2"
	o1Agg, o2Agg := "ocorrencia:"+o1, "ocorrencia:"+o2
	rotaO1 := "/api/ocorrencias/" + o1

	// oc-1: the CAD registers it and dispatches UR-12 (echoes, and outcomes).
	s.add(o1Agg, TipoRegistrada, echo, "sol-1", map[string]string{"id": o1, "natureza": "incendio", "status": "aberta"})
	s.concluded("sol-1", "POST", "/api/ocorrencias", 201, oc(o1, "incendio", "aberta", 1))
	s.add(o1Agg, TipoDespachada, echo, "sol-2", map[string]Despacho{"despacho": desp("d-1", o1, "UR-12", "em_deslocamento")})
	r2 := oc(o1, "incendio", "aberta", 2, desp("d-1", o1, "UR-12", "em_deslocamento"))
	r2.Despacho = &r2.Despachos[0]
	s.concluded("sol-2", "POST", rotaO1+"/despachos", 201, r2)
	// An operator sends ABT-03 and reports UR-12 on site.
	s.add(o1Agg, TipoDespachada, operador, "op-sol-1", map[string]Despacho{"despacho": desp("d-2", o1, "ABT-03", "em_deslocamento")})
	s.add(o1Agg, TipoDespachoMudouStatus, operador, "op-sol-2", despachoStatus("d-1", o1, "em_deslocamento", "no_local"))
	s.add(o1Agg, TipoMudouStatus, operador, "op-sol-2", map[string]string{"id": o1, "de": "aberta", "para": "em_atendimento"})
	// The CAD: ABT-03 on site, UR-12 released.
	s.add(o1Agg, TipoDespachoMudouStatus, echo, "sol-3", despachoStatus("d-2", o1, "em_deslocamento", "no_local"))
	s.concluded("sol-3", "POST", rotaO1+"/despachos/d-2/status", 200,
		oc(o1, "incendio", "em_atendimento", 6, desp("d-1", o1, "UR-12", "no_local"), desp("d-2", o1, "ABT-03", "no_local")))
	s.add(o1Agg, TipoDespachoMudouStatus, echo, "sol-4", despachoStatus("d-1", o1, "no_local", "liberado"))
	s.concluded("sol-4", "POST", rotaO1+"/despachos/d-1/status", 200,
		oc(o1, "incendio", "em_atendimento", 7, desp("d-1", o1, "UR-12", "liberado"), desp("d-2", o1, "ABT-03", "no_local")))
	// The CAD tries to close too early: refused, only the refusal is published.
	motivo := &Motivo{Erro: "há despachos no local", Codigo: "transicao-invalida",
		Detalhes: []Detalhe{{Caminho: "/para", Mensagem: "d-2 está no_local"}}}
	s.add("solicitacao:sol-6", TipoComandoRecusado, echo, "sol-6", outcomePayload{
		Comando: map[string]string{"metodo": "POST", "rota": rotaO1 + "/status"}, Status: 409, Motivo: motivo})
	// The operator releases ABT-03; the CAD closes.
	s.add(o1Agg, TipoDespachoMudouStatus, operador, "op-sol-3", despachoStatus("d-2", o1, "no_local", "liberado"))
	s.add(o1Agg, TipoMudouStatus, echo, "sol-5", map[string]string{"id": o1, "de": "em_atendimento", "para": "encerrada"})
	s.concluded("sol-5", "POST", rotaO1+"/status", 200,
		oc(o1, "incendio", "encerrada", 9, desp("d-1", o1, "UR-12", "liberado"), desp("d-2", o1, "ABT-03", "liberado")))

	// oc-2: the CAD registers and dispatches USA-07; the rest is the
	// operator's, after the CAD's last snapshot.
	s.add(o2Agg, TipoRegistrada, echo, "sol-7", map[string]string{"id": o2, "natureza": "atendimento_medico", "status": "aberta"})
	s.concluded("sol-7", "POST", "/api/ocorrencias", 201, oc(o2, "atendimento_medico", "aberta", 1))
	s.add(o2Agg, TipoDespachada, echo, "sol-8", map[string]Despacho{"despacho": desp("d-3", o2, "USA-07", "em_deslocamento")})
	s.concluded("sol-8", "POST", "/api/ocorrencias/"+o2+"/despachos", 201,
		oc(o2, "atendimento_medico", "aberta", 2, desp("d-3", o2, "USA-07", "em_deslocamento")))
	s.add(o2Agg, TipoDespachoMudouStatus, operador, "op-sol-4", despachoStatus("d-3", o2, "em_deslocamento", "no_local"))
	s.add(o2Agg, TipoMudouStatus, operador, "op-sol-4", map[string]string{"id": o2, "de": "aberta", "para": "em_atendimento"})
	s.add(o2Agg, TipoDespachada, operador, "op-sol-5", map[string]Despacho{"despacho": desp("d-4", o2, "VTR-21", "em_deslocamento")})

	// Jornadas, delivered to every integrator; and a ping without sequence.
	servidor := map[string]string{"nome": "Maria", "cpf": "hash"}
	s.add("jornada:j-1", TipoJornadaIniciada, operador, "", map[string]any{"jornadaId": "j-1", "inicio": "2026-10-31T08:00:00Z", "servidor": servidor})
	s.add("jornada:j-2", TipoJornadaIniciada, operador, "", map[string]any{"jornadaId": "j-2", "inicio": "2026-10-31T09:00:00Z", "servidor": servidor})
	s.add("jornada:j-1", TipoJornadaEncerrada, operador, "", map[string]any{"jornadaId": "j-1", "fim": "2026-10-31T17:00:00Z"})
	s.add("", "integracao:verificacao", nil, "", map[string]string{"mensagem": "ping"})

	wantOc := []Ocorrencia{
		oc(o1, "incendio", "encerrada", 9, desp("d-1", o1, "UR-12", "liberado"), desp("d-2", o1, "ABT-03", "liberado")),
		oc(o2, "atendimento_medico", "em_atendimento", 5, desp("d-3", o2, "USA-07", "no_local"), desp("d-4", o2, "VTR-21", "em_deslocamento")),
	}
	wantJ := map[string]string{"j-1": "encerrada", "j-2": "iniciada"}
	done := func(sol, rota string, status int, ocID string) Outcome {
		return Outcome{Solicitacao: sol, Status: status, Concluded: true, Metodo: "POST", Rota: rota, OcorrenciaID: ocID, FromEvent: true}
	}
	wantOut := map[string]Outcome{
		"sol-1": done("sol-1", "/api/ocorrencias", 201, o1),
		"sol-2": done("sol-2", rotaO1+"/despachos", 201, o1),
		"sol-3": done("sol-3", rotaO1+"/despachos/d-2/status", 200, o1),
		"sol-4": done("sol-4", rotaO1+"/despachos/d-1/status", 200, o1),
		"sol-5": done("sol-5", rotaO1+"/status", 200, o1),
		"sol-6": {Solicitacao: "sol-6", Status: 409, Metodo: "POST", Rota: rotaO1 + "/status", Motivo: motivo, FromEvent: true},
		"sol-7": done("sol-7", "/api/ocorrencias", 201, o2),
		"sol-8": done("sol-8", "/api/ocorrencias/"+o2+"/despachos", 201, o2),
	}
	return s.ds, wantOc, wantJ, wantOut
}

// scriptEchoes is the number of distinct envelopes of the script caused by
// the CAD itself.
const scriptEchoes = 7

// TestProjectionConverges feeds the same deliveries through the real
// receiver over loopback HTTP, in Geohub's order and then shuffled with
// repeats (a failed attempt being resent, the sweep catching up), and
// checks the projection always ends in the same, expected state.
func TestProjectionConverges(t *testing.T) {
	ds, wantOc, wantJ, wantOut := convergenceScript(t)
	for seed := range uint64(10) {
		concurrent := seed >= 8
		t.Run(fmt.Sprintf("seed=%d,concurrent=%v", seed, concurrent), func(t *testing.T) {
			var mu sync.Mutex
			discarded := map[string]map[string]bool{}
			cad := New(Config{Secret: secret, Self: self, OnDiscard: func(id, motivo string) {
				mu.Lock()
				defer mu.Unlock()
				if discarded[motivo] == nil {
					discarded[motivo] = map[string]bool{}
				}
				discarded[motivo][id] = true
			}})
			srv := httptest.NewServer(cad.Handler())
			defer srv.Close()

			order := append([]delivery(nil), ds...)
			if seed > 0 {
				rng := rand.New(rand.NewPCG(seed, 42))
				for _, d := range ds {
					if rng.IntN(2) == 0 {
						order = append(order, d)
					}
				}
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			}
			// send delivers d as Geohub does: a 503 (the same envelope in
			// flight at once, without an aggregate to queue on) is retried.
			send := func(i int, d delivery) {
				for attempt := 1; ; attempt++ {
					resp, err := srv.Client().Do(signedRequest(t, srv.URL, d, attempt))
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable && attempt < 50 {
						runtime.Gosched()
						continue
					}
					if resp.StatusCode != http.StatusNoContent {
						t.Errorf("%s: %d", d.id, resp.StatusCode)
					}
					return
				}
			}
			if concurrent {
				var wg sync.WaitGroup
				for i, d := range order {
					wg.Go(func() { send(i, d) })
				}
				wg.Wait()
			} else {
				for i, d := range order {
					send(i, d)
				}
			}

			p := cad.Projection()
			if got := p.Ocorrencias(); !reflect.DeepEqual(got, wantOc) {
				t.Errorf("ocorrências:\n%s\nwant:\n%s", mustJSON(t, got), mustJSON(t, wantOc))
			}
			if got := p.Jornadas(); !reflect.DeepEqual(got, wantJ) {
				t.Errorf("jornadas = %v, want %v", got, wantJ)
			}
			if got := p.Outcomes(); !reflect.DeepEqual(got, wantOut) {
				t.Errorf("outcomes:\n%s\nwant:\n%s", mustJSON(t, got), mustJSON(t, wantOut))
			}
			if got := len(discarded[receiver.MotivoEcoProprio]); got != scriptEchoes {
				t.Errorf("%d echoes discarded, want %d", got, scriptEchoes)
			}
			if d, ok := p.Despacho("d-4"); !ok || d.Status != DespachoEmDeslocamento || d.Recurso.Identificador != "VTR-21" {
				t.Errorf("Despacho(d-4) = %+v, %v", d, ok)
			}
		})
	}
}

// TestSnapshotOrder: a snapshot with a lower versao changes nothing, and a
// later one does not undo an operator's move that arrived before it.
func TestSnapshotOrder(t *testing.T) {
	p := NewProjection()
	v3 := oc("o", "resgate", "em_atendimento", 3, desp("d", "o", "UR-1", "no_local"))
	v2 := oc("o", "resgate", "aberta", 2, desp("d", "o", "UR-1", "em_deslocamento"))
	p.ApplySnapshot(v3)
	p.ApplySnapshot(v2)
	if got, _ := p.Ocorrencia("o"); !reflect.DeepEqual(got, v3) {
		t.Fatalf("after an older snapshot: %+v, want %+v", got, v3)
	}

	// The operator releases d (sequence 4) before the CAD's v3 arrives.
	q := NewProjection()
	q.ApplySnapshot(v2)
	body := envelope(t, "e4", TipoDespachoMudouStatus, operador, "", despachoStatus("d", "o", "no_local", "liberado"))
	if err := q.Apply(context.Background(), receiver.Delivery{Envelope: mustEnvelope(t, body), Agregado: "ocorrencia:o", Sequencia: 4}); err != nil {
		t.Fatal(err)
	}
	q.ApplySnapshot(v3)
	want := oc("o", "resgate", "em_atendimento", 4, desp("d", "o", "UR-1", "liberado"))
	if got, _ := q.Ocorrencia("o"); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}

	// Copies: changing what an accessor returned changes nothing inside.
	got, _ := q.Ocorrencia("o")
	got.Despachos[0].Status = "x"
	if again, _ := q.Ocorrencia("o"); again.Despachos[0].Status != DespachoLiberado {
		t.Fatal("Ocorrencia returned shared state")
	}
}

// TestApplyRejectsBadPayload: a payload that does not decode is an error
// (500, Geohub retries); an unknown type is ignored.
func TestApplyRejectsBadPayload(t *testing.T) {
	p := NewProjection()
	bad := receiver.Delivery{Envelope: receiver.Envelope{ID: "e", Tipo: TipoDespachada, Payload: []byte(`{"despacho":"x"}`)}}
	if err := p.Apply(context.Background(), bad); err == nil {
		t.Error("bad payload applied")
	}
	unknown := receiver.Delivery{Envelope: receiver.Envelope{ID: "e", Tipo: "guarnicao:formada", Payload: []byte(`{}`)}}
	if err := p.Apply(context.Background(), unknown); err != nil {
		t.Error(err)
	}
	if len(p.Ocorrencias()) != 0 {
		t.Error("state changed")
	}
}
