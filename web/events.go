package web

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"geohub/app"
)

func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	var req app.PublishRequest
	if err := decodeJSON(r, &req); err != nil {
		s.Fail(w, r, err)
		return
	}
	if t, ok := tokenOf(r); ok && req.Autoria == nil {
		// SPEC 6.3: receivers read origem.autoria without a guard. A name
		// too long for autoria.id gives way to the token's id: the client
		// sent no autoria, so it must not be refused for one.
		id := t.Nome
		if len(id) > 255 || strings.TrimSpace(id) == "" {
			id = t.ID
		}
		req.Autoria = &app.Autoria{Tipo: "sistema", ID: id}
	}
	ev, created, err := s.Publisher.PublishExternal(r.Context(), req)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/events/"+ev.EventID)
	}
	writeEvent(w, status, ev)
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	page, err := s.Queries.EventPage(r.Context(), f)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	s.writeEventPage(w, r, page)
}

// parseFilter reads the query of GET /api/events, naming every bad parameter.
func parseFilter(r *http.Request) (app.EventFilter, error) {
	q := r.URL.Query()
	if err := knownParams(q, "tipo", "origem", "correlacao_id", "agregado", "timestamp_inicio", "timestamp_fim",
		"sequence_inicio", "sequence_fim", "ordem", "limite", "deslocamento"); err != nil {
		return app.EventFilter{}, err
	}
	f := app.EventFilter{Tipo: q.Get("tipo"), Origem: q.Get("origem"),
		CorrelacaoID: strings.ToLower(q.Get("correlacao_id")), Agregado: q.Get("agregado")}
	var bad []app.Detail
	f.Limite = int(nonNegative(q, "limite", &bad))
	f.Deslocamento = int(nonNegative(q, "deslocamento", &bad))
	f.SequenceInicio = nonNegative(q, "sequence_inicio", &bad)
	f.SequenceFim = nonNegative(q, "sequence_fim", &bad)
	f.Desc = descending(q, &bad)
	timeParam(q, "timestamp_inicio", &f.TimestampInicio, &bad)
	timeParam(q, "timestamp_fim", &f.TimestampFim, &bad)
	if len(bad) > 0 {
		return f, &app.Error{Code: app.EInvalid, Message: "filtro inválido", Details: bad}
	}
	return f, nil
}

// timeParam reads an optional RFC 3339 query parameter into dst; a
// malformed one is added to bad, named by its path.
func timeParam(q url.Values, name string, dst *time.Time, bad *[]app.Detail) {
	if v := q.Get(name); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			*bad = append(*bad, app.Detail{Caminho: "/" + name, Mensagem: "deve ser uma data RFC 3339"})
		}
		*dst = t
	}
}

// descending reads ordem: asc (the default) or desc.
func descending(q url.Values, bad *[]app.Detail) bool {
	switch q.Get("ordem") {
	case "", "asc":
		return false
	case "desc":
		return true
	}
	*bad = append(*bad, app.Detail{Caminho: "/ordem", Mensagem: "deve ser asc ou desc"})
	return false
}

// nonNegative reads an optional non-negative integer query parameter; a
// malformed one is added to bad, named by its path.
func nonNegative(q url.Values, name string, bad *[]app.Detail) int64 {
	v := q.Get(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		*bad = append(*bad, app.Detail{Caminho: "/" + name, Mensagem: "deve ser um inteiro não negativo"})
		return 0
	}
	return n
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) {
	ev, err := s.Queries.Event(r.Context(), r.PathValue("eventId"))
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeEvent(w, http.StatusOK, ev)
}

func (s *Server) trace(w http.ResponseWriter, r *http.Request) {
	page, err := s.Queries.TracePage(r.Context(), r.PathValue("correlacaoId"))
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	s.writeEventPage(w, r, page)
}

// replay streams NDJSON, one record per line, flushing each batch so a client
// starts reading before the last batch is loaded.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := knownParams(q, "de_sequence", "tipos"); err != nil {
		s.Fail(w, r, err)
		return
	}
	var bad []app.Detail
	after := nonNegative(q, "de_sequence", &bad)
	if len(bad) > 0 {
		s.Fail(w, r, &app.Error{Code: app.EInvalid, Message: "de_sequence inválido", Details: bad})
		return
	}
	var tipos []string
	for _, t := range strings.Split(q.Get("tipos"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			tipos = append(tipos, t)
		}
	}
	if len(tipos) > maxReplayTypes {
		s.Fail(w, r, &app.Error{Code: app.EInvalid, Message: "tipos demais",
			Details: []app.Detail{{Caminho: "/tipos", Mensagem: fmt.Sprintf("no máximo %d tipos", maxReplayTypes)}}})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	out := newStreamWriter(w)
	buf := make([]byte, 0, 64<<10)
	n := 0
	for ev, err := range s.Queries.Replay(r.Context(), after, tipos) {
		if err != nil {
			if n == 0 {
				s.Fail(w, r, err)
				return
			}
			// Headers are gone: end the stream early; the client resumes from
			// the last sequence it received.
			s.Logger.Error("replay interrupted", "err", err)
			break
		}
		buf = append(ev.AppendJSON(buf), '\n')
		n++
		// Stream in 32 KiB writes, each flushed, so a client reads while the
		// next batch is loaded and memory stays flat however long the replay.
		if len(buf) >= 32<<10 {
			if _, err := out.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
			if out.Flush() != nil {
				return
			}
		}
	}
	out.Write(buf)
}

func (s *Server) dlq(w http.ResponseWriter, r *http.Request) {
	st, err := s.Queries.DLQ(r.Context())
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) reprocessDLQ(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Colonia string `json:"colonia"`
	}
	if err := decodeJSON(r, &body); err != nil {
		s.Fail(w, r, err)
		return
	}
	if body.Colonia == "" {
		s.Fail(w, r, &app.Error{Code: app.EInvalid, Message: "colonia obrigatória",
			Details: []app.Detail{{Caminho: "/colonia", Mensagem: "obrigatório"}}})
		return
	}
	res, err := s.Consumers.ReprocessDLQ(r.Context(), body.Colonia)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// maxReplayTypes bounds the type filter of a replay (each is a bound SQL
// parameter).
const maxReplayTypes = 50

// knownParams refuses query parameters a route does not take: a misspelt
// filter (limit for limite) would otherwise be silently ignored. The answer
// is bounded whatever the query (issue 26, L7): the accepted names once,
// at most maxUnknownNamed unknown ones, each cut to 64 bytes; it was 21
// times the request, for a client to stall reading.
func knownParams(q url.Values, names ...string) error {
	var unknown []string
	for k := range q {
		if !slices.Contains(names, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	var bad []app.Detail
	for i, k := range unknown {
		if i == maxUnknownNamed {
			bad = append(bad, app.Detail{Caminho: "/", Mensagem: fmt.Sprintf("e mais %d parâmetros desconhecidos", len(unknown)-i)})
			break
		}
		if len(k) > 64 {
			k = strings.ToValidUTF8(k[:64], "") + "…"
		}
		bad = append(bad, app.Detail{Caminho: "/" + k, Mensagem: "parâmetro desconhecido"})
	}
	return &app.Error{Code: app.EInvalid, Message: "parâmetro de consulta desconhecido; aceitos: " + strings.Join(names, ", "), Details: bad}
}

// maxUnknownNamed is how many unknown query parameters a 422 names.
const maxUnknownNamed = 10
