package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"geohub/receiver"
)

// fakeAPI plays Geohub's command API (SPEC 7) in memory: Bearer, the
// x-solicitacao-id idempotency, the two state machines, versao, and the
// webhooks to the CAD (its echoes on ocorrencia:<id>, the outcomes on
// solicitacao:<id>), delivered synchronously to deliver before the answer.
type fakeAPI struct {
	t       testing.TB
	deliver http.Handler // the CAD's receiver; nil: no webhooks

	mu    sync.Mutex
	fail  int // answer the next POSTs 503, before doing anything
	n     int
	ocs   map[string]*Ocorrencia
	done  map[string]fakeDone // by x-solicitacao-id
	seqs  map[string]int64
	execs int // commands executed (not replayed)
	// beforeClose, if set, runs once before the first encerrar, inside the
	// lock (an operator acting at that moment).
	beforeClose func(f *fakeAPI, ocID string)
}

type fakeDone struct {
	body   []byte
	status int
	resp   []byte
}

func newFakeAPI(t testing.TB, deliver http.Handler) *fakeAPI {
	return &fakeAPI{t: t, deliver: deliver, ocs: map[string]*Ocorrencia{},
		done: map[string]fakeDone{}, seqs: map[string]int64{}}
}

func (f *fakeAPI) nextID(prefix string) string {
	f.n++
	return fmt.Sprintf("%s-%04d", prefix, f.n)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

func errBody(codigo, erro string) []byte {
	b, _ := json.Marshal(Motivo{Erro: erro, Codigo: codigo})
	return b
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		writeJSON(w, 401, errBody("nao-autenticado", "API key inválida"))
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, ocorrenciasPath)
	if !ok {
		writeJSON(w, 404, errBody("nao-encontrado", "rota"))
		return
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if r.Method == http.MethodGet {
		f.mu.Lock()
		o, ok := f.ocs[parts[0]]
		var b []byte
		if ok {
			b, _ = json.Marshal(o)
		}
		f.mu.Unlock()
		if !ok {
			writeJSON(w, 404, errBody("nao-encontrado", "ocorrência"))
			return
		}
		writeJSON(w, 200, b)
		return
	}
	sol := r.Header.Get(HeaderSolicitacao)
	if !uuidRE.MatchString(sol) {
		writeJSON(w, 400, errBody("solicitacao-invalida", "x-solicitacao-id"))
		return
	}
	if r.Header.Get("Content-Type") != "application/json" {
		writeJSON(w, 415, errBody("tipo", "content-type"))
		return
	}
	body, _ := io.ReadAll(r.Body)

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		writeJSON(w, 503, errBody("indisponivel", "tente de novo"))
		return
	}
	if prev, ok := f.done[sol]; ok {
		if !bytes.Equal(prev.body, body) {
			writeJSON(w, 409, errBody("solicitacao-reutilizada", "mesmo x-solicitacao-id com outro corpo"))
			return
		}
		writeJSON(w, prev.status, prev.resp)
		return
	}
	f.execs++
	status, res, motivo := f.exec(r.URL.Path, parts, sol, body)
	var resp []byte
	comando := map[string]string{"metodo": r.Method, "rota": r.URL.Path}
	if motivo != nil {
		resp, _ = json.Marshal(motivo)
		f.publish("solicitacao:"+sol, TipoComandoRecusado, echo, sol,
			map[string]any{"comando": comando, "status": status, "motivo": motivo})
	} else {
		resp, _ = json.Marshal(res)
		f.publish("solicitacao:"+sol, TipoComandoConcluido, echo, sol,
			map[string]any{"comando": comando, "status": status, "resultado": res})
	}
	f.done[sol] = fakeDone{body: body, status: status, resp: resp}
	writeJSON(w, status, resp)
}

func refused(status int, codigo, erro string) (int, Ocorrencia, *Motivo) {
	return status, Ocorrencia{}, &Motivo{Erro: erro, Codigo: codigo}
}

// exec runs one command. The caller holds mu.
func (f *fakeAPI) exec(path string, parts []string, sol string, body []byte) (int, Ocorrencia, *Motivo) {
	var in struct {
		Natureza string `json:"natureza"`
		Recurso  struct {
			Identificador string `json:"identificador"`
		} `json:"recurso"`
		Para string `json:"para"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return refused(400, "json-invalido", err.Error())
	}
	if len(parts) == 1 && parts[0] == "" { // register
		if in.Natureza == "" {
			return refused(422, "validacao", "natureza é obrigatória")
		}
		o := &Ocorrencia{ID: f.nextID("oc"), Natureza: in.Natureza, Status: StatusAberta, Despachos: []Despacho{}}
		f.ocs[o.ID] = o
		f.event(o, TipoRegistrada, echo, sol, map[string]string{"id": o.ID, "natureza": o.Natureza, "status": o.Status})
		return 201, *o, nil
	}
	o, ok := f.ocs[parts[0]]
	if !ok {
		return refused(404, "nao-encontrado", "ocorrência")
	}
	switch {
	case len(parts) == 2 && parts[1] == "despachos":
		if in.Recurso.Identificador == "" {
			return refused(422, "validacao", "recurso.identificador")
		}
		if o.Status == StatusEncerrada {
			return refused(409, "transicao-invalida", "ocorrência encerrada")
		}
		d := desp(f.nextID("de"), o.ID, in.Recurso.Identificador, DespachoEmDeslocamento)
		o.Despachos = append(o.Despachos, d)
		f.event(o, TipoDespachada, echo, sol, map[string]Despacho{"despacho": d})
		res := f.copyOf(o)
		res.Despacho = &d
		return 201, res, nil
	case len(parts) == 4 && parts[1] == "despachos" && parts[3] == "status":
		i := -1
		for j, d := range o.Despachos {
			if d.ID == parts[2] {
				i = j
			}
		}
		if i < 0 {
			return refused(404, "nao-encontrado", "despacho")
		}
		d := &o.Despachos[i]
		allowed := map[string]string{DespachoNoLocal: DespachoEmDeslocamento, DespachoCancelado: DespachoEmDeslocamento, DespachoLiberado: DespachoNoLocal}
		if from, ok := allowed[in.Para]; !ok || from != d.Status {
			return refused(409, "transicao-invalida", d.Status+" → "+in.Para)
		}
		de := d.Status
		d.Status = in.Para
		f.event(o, TipoDespachoMudouStatus, echo, sol, despachoStatus(d.ID, o.ID, de, in.Para))
		if in.Para == DespachoNoLocal && o.Status == StatusAberta {
			o.Status = StatusEmAtendimento
			f.event(o, TipoMudouStatus, echo, sol, map[string]string{"id": o.ID, "de": StatusAberta, "para": StatusEmAtendimento})
		}
		res := f.copyOf(o)
		dc := *d
		res.Despacho = &dc
		return 200, res, nil
	case len(parts) == 2 && parts[1] == "status":
		if in.Para == StatusEncerrada && f.beforeClose != nil {
			before := f.beforeClose
			f.beforeClose = nil
			before(f, o.ID)
		}
		ok := map[string]string{StatusEmAtendimento: StatusAberta}[in.Para] == o.Status ||
			in.Para == StatusEncerrada && (o.Status == StatusAberta || o.Status == StatusEmAtendimento)
		if !ok {
			return refused(409, "transicao-invalida", o.Status+" → "+in.Para)
		}
		if in.Para == StatusEncerrada {
			for _, d := range o.Despachos {
				if d.Status == DespachoEmDeslocamento || d.Status == DespachoNoLocal {
					return refused(409, "transicao-invalida", "despacho "+d.ID+" ainda "+d.Status)
				}
			}
		}
		de := o.Status
		o.Status = in.Para
		f.event(o, TipoMudouStatus, echo, sol, map[string]string{"id": o.ID, "de": de, "para": in.Para})
		return 200, f.copyOf(o), nil
	}
	return refused(404, "nao-encontrado", path)
}

// operatorDispatch is an operator sending recurso from the console: an
// event the CAD did not cause. The caller holds mu.
func (f *fakeAPI) operatorDispatch(ocID, recurso string) {
	o := f.ocs[ocID]
	d := desp(f.nextID("de"), o.ID, recurso, DespachoEmDeslocamento)
	o.Despachos = append(o.Despachos, d)
	f.event(o, TipoDespachada, operador, "", map[string]Despacho{"despacho": d})
}

func (f *fakeAPI) copyOf(o *Ocorrencia) Ocorrencia {
	c := *o
	c.Despachos = append([]Despacho{}, o.Despachos...)
	return c
}

// event applies one event to o (versao+1) and publishes it. The caller
// holds mu.
func (f *fakeAPI) event(o *Ocorrencia, tipo string, autoria *receiver.Autoria, sol string, payload any) {
	o.Versao++
	f.publish("ocorrencia:"+o.ID, tipo, autoria, sol, payload)
}

// publish delivers one envelope to the CAD. The caller holds mu.
func (f *fakeAPI) publish(agregado, tipo string, autoria *receiver.Autoria, sol string, payload any) {
	if f.deliver == nil {
		return
	}
	f.seqs[agregado]++
	id := f.nextID("evt")
	deliverDirect(f.t, f.deliver, delivery{id: id, agregado: agregado, seq: f.seqs[agregado],
		body: envelope(f.t, id, tipo, autoria, sol, payload)})
}

func (f *fakeAPI) executed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.execs
}
