package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
	"geohub/store/storetest"
)

// receiver is a CAD endpoint whose answer the test changes.
func receiver(t *testing.T, status int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var answer atomic.Int32
	answer.Store(int32(status))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(answer.Load()))
	}))
	t.Cleanup(srv.Close)
	return srv, &answer
}

func (b *tailBench) integrator(t *testing.T, nome, callback string, eventos, backoff []string) app.Integrator {
	t.Helper()
	created, err := b.integrators.Create(context.Background(), app.NewIntegrator{Nome: nome, CallbackURL: callback + "/eventos",
		HostsPermitidos: []string{"127.0.0.1"}, Eventos: eventos, Backoff: backoff})
	if err != nil {
		t.Fatal(err)
	}
	return created.Integrator
}

func (b *tailBench) operator(t *testing.T, login string, papel app.Papel) (*http.Client, string) {
	t.Helper()
	senha := "senha-de-" + login + "-1"
	if _, err := b.sessions.CreateOperator(context.Background(), "", login, senha, papel); err != nil {
		t.Fatal(err)
	}
	return loginAs(t, b, login, senha)
}

// waitRecorded re-checks cond each time the dispatcher commits a round's
// outcomes, until it holds.
func (b *tailBench) waitRecorded(t *testing.T, what string, cond func() bool) {
	t.Helper()
	storetest.Await(t, what, cond, &b.dispatcher.Signals.Recorded)
}

// flashOf follows a form's redirect and returns the confirmation it shows.
func flashOf(t *testing.T, c *http.Client, base string, res *http.Response) string {
	t.Helper()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("form answered %d, want 303", res.StatusCode)
	}
	_, page := get(t, c, base+res.Header.Get("Location"))
	m := regexp.MustCompile(`<p class="aviso-ok" role="status">([^<]*)</p>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no confirmation after %s", res.Header.Get("Location"))
	}
	return html.UnescapeString(m[1])
}

// SPEC 9, issue 15 items 1 and 2: a CAD that fails shows its open circuit
// and its backlog; once it is back, "Tentar agora" (operador and admin,
// CSRF like every form) closes the circuit and its queue is delivered.
func TestIntegratorHealthAndTryNow(t *testing.T) {
	b := newTailBench(t)
	down, answer := receiver(t, http.StatusServiceUnavailable)
	up, _ := receiver(t, http.StatusNoContent)
	// An hour between attempts: without "Tentar agora" the queue waits.
	failing := b.integrator(t, "CAD Defesa Civil", down.URL, []string{"jornada:iniciada"}, []string{"1h"})
	healthy := b.integrator(t, "A CAD Saudável", up.URL, []string{"jornada:iniciada"}, nil)
	operadora, csrf := b.operator(t, "operadora", app.PapelOperador)
	leitora, leitoraCSRF := b.operator(t, "leitora", app.PapelLeitor)
	for range 6 {
		b.publish(t, iniciada("rh"))
	}
	storetest.Await(t, "the circuit to open", func() bool {
		in, err := b.integrators.Get(context.Background(), failing.ID)
		return err == nil && in.Circuito.Estado == app.CircuitoAberto
	}, &b.dispatcher.Signals.Circuit)
	b.waitRecorded(t, "the healthy CAD's deliveries", func() bool {
		p, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: healthy.ID, Status: app.EntregaEntregue})
		return p.Total == 6
	})

	retryPath := "/integradores/" + failing.ID + "/tentar-agora"
	t.Run("the list shows the open circuit, since when, and the backlog", func(t *testing.T) {
		_, page := get(t, operadora, b.srv.URL+"/integradores")
		row := rowOf(t, page, failing.ID)
		for _, want := range []string{`data-circuito="aberto"`, "circuito aberto", "aberto desde", "próxima sondagem às",
			">6</a>", `action="` + retryPath + `"`} {
			if !strings.Contains(row, want) {
				t.Errorf("the failing CAD's row lacks %q: %s", want, row)
			}
		}
		if !strings.Contains(page, "desde ") && !strings.Contains(page, "última hora") {
			t.Error("the list does not say which window the success rate counts")
		}
		if row := rowOf(t, page, healthy.ID); !strings.Contains(row, "circuito fechado") || !strings.Contains(row, "100% (6 de 6)") ||
			strings.Contains(row, "tentar-agora") {
			t.Errorf("the healthy CAD's row: %s", row)
		}
	})
	t.Run("the overview lists the CAD in trouble first", func(t *testing.T) {
		_, page := get(t, operadora, b.srv.URL+"/")
		i, j := strings.Index(page, `data-integrador="`+failing.ID+`"`), strings.Index(page, `data-integrador="`+healthy.ID+`"`)
		if i < 0 || j < 0 || i > j {
			t.Fatalf("the failing CAD must come before the healthy one (at %d and %d)", i, j)
		}
		if !strings.Contains(page, "1 com problema, listado primeiro") {
			t.Error("the overview does not say how many integrators are in trouble")
		}
	})
	t.Run("the integrator's page shows its health", func(t *testing.T) {
		_, page := get(t, operadora, b.srv.URL+"/integradores/"+failing.ID)
		for _, want := range []string{"Saúde das entregas", "circuito aberto", "6 entregas pendentes ou em envio",
			"nenhuma entrega bem-sucedida registrada", "0% (0 de ", `action="` + retryPath + `"`} {
			if !strings.Contains(page, want) {
				t.Errorf("the integrator page lacks %q", want)
			}
		}
	})
	t.Run("a leitor sees the health but cannot try now", func(t *testing.T) {
		_, page := get(t, leitora, b.srv.URL+"/integradores/"+failing.ID)
		if !strings.Contains(page, "circuito aberto") || strings.Contains(page, "tentar-agora") {
			t.Fatal("a leitor sees the circuit and no Tentar agora button")
		}
		if res, _ := post(t, leitora, b.srv.URL+retryPath, url.Values{"csrf": {leitoraCSRF}}); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a leitor's forged Tentar agora: %d", res.StatusCode)
		}
		if res, _ := post(t, operadora, b.srv.URL+retryPath, url.Values{"csrf": {"00"}}); res.StatusCode != http.StatusForbidden {
			t.Fatalf("Tentar agora without the CSRF token: %d", res.StatusCode)
		}
	})

	pending, err := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: failing.ID, Status: app.EntregaPendente, Desc: true})
	if err != nil || len(pending.Linhas) != 6 {
		t.Fatalf("pending deliveries: %+v %v", pending, err)
	}
	one := pending.Linhas[0]
	t.Run("each pending delivery has its own Tentar agora, which says the circuit still holds it", func(t *testing.T) {
		_, page := get(t, operadora, b.srv.URL+"/entregas?status=pendente")
		path := fmt.Sprintf("/entregas/%d/tentar-agora", one.ID)
		if !strings.Contains(page, `action="`+path+`"`) || regexp.MustCompile(`/entregas/\d+/reenviar`).MatchString(page) {
			t.Fatal("a pending delivery offers Tentar agora, not Reenviar")
		}
		_, detail := get(t, operadora, b.srv.URL+fmt.Sprintf("/entregas/%d", one.ID))
		if !strings.Contains(detail, "O circuito de CAD Defesa Civil está aberto") || !strings.Contains(detail, `action="`+path+`"`) {
			t.Fatal("the delivery's page must say the open circuit holds it and offer Tentar agora")
		}
		res, _ := post(t, operadora, b.srv.URL+path, url.Values{"csrf": {csrf}, "volta": {"/entregas?status=pendente"}})
		if msg := flashOf(t, operadora, b.srv.URL, res); !strings.Contains(msg, fmt.Sprintf("Entrega #%d adiantada", one.ID)) ||
			!strings.Contains(msg, "circuito de CAD Defesa Civil está aberto") {
			t.Fatalf("notice %q", msg)
		}
	})
	t.Run("after the CAD recovers, Tentar agora closes the circuit and delivers the queue", func(t *testing.T) {
		answer.Store(http.StatusNoContent)
		res, _ := post(t, operadora, b.srv.URL+retryPath, url.Values{"csrf": {csrf}, "volta": {"/integradores/" + failing.ID}})
		msg := flashOf(t, operadora, b.srv.URL, res)
		if !strings.Contains(msg, "circuito de CAD Defesa Civil fechado") || !strings.Contains(msg, "saem agora") {
			t.Fatalf("notice %q", msg)
		}
		b.waitRecorded(t, "the queue to be delivered", func() bool {
			p, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: failing.ID, Status: app.EntregaEntregue})
			return p.Total == 6
		})
		_, page := get(t, operadora, b.srv.URL+"/integradores/"+failing.ID)
		for _, want := range []string{"circuito fechado", "nenhuma entrega esperando"} {
			if !strings.Contains(page, want) {
				t.Errorf("after the retry the page lacks %q", want)
			}
		}
		if strings.Contains(page, "nenhuma entrega bem-sucedida registrada") {
			t.Error("the last success is not shown")
		}
	})
	t.Run("Tentar agora on an inactive integrator says to reactivate it", func(t *testing.T) {
		off := false
		if _, err := b.integrators.Update(context.Background(), failing.ID, app.IntegratorPatch{Ativo: &off}); err != nil {
			t.Fatal(err)
		}
		res, page := post(t, operadora, b.srv.URL+retryPath, url.Values{"csrf": {csrf}})
		if res.StatusCode != http.StatusConflict || !strings.Contains(page, "reative-o") {
			t.Fatalf("%d %s", res.StatusCode, page)
		}
	})
}

// A failed delivery keeps its "Reenviar" and offers no "Tentar agora".
func TestFailedDeliveryKeepsResend(t *testing.T) {
	b := newTailBench(t)
	cad, _ := receiver(t, http.StatusBadRequest)
	in := b.integrator(t, "CAD Bombeiros", cad.URL, nil, nil)
	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	b.publish(t, iniciada("rh"))
	b.waitRecorded(t, "the dead letter", func() bool {
		p, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID, Status: app.EntregaFalhou})
		return p.Total == 1
	})
	p, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
	id := p.Linhas[0].ID
	for _, u := range []string{"/entregas", fmt.Sprintf("/entregas/%d", id)} {
		_, page := get(t, admin, b.srv.URL+u)
		if !strings.Contains(page, fmt.Sprintf(`action="/entregas/%d/reenviar"`, id)) || strings.Contains(page, "tentar-agora") {
			t.Errorf("%s: a dead letter offers Reenviar and not Tentar agora", u)
		}
		// The code first: a narrow column cuts the explanation, not it.
		if !strings.Contains(page, `<strong class="codigo-http">HTTP 400</strong>`) && u == "/entregas" {
			t.Errorf("%s: the last answer does not lead with its HTTP code", u)
		}
	}
	res, page := post(t, admin, b.srv.URL+fmt.Sprintf("/entregas/%d/tentar-agora", id), url.Values{"csrf": {csrf}})
	if res.StatusCode != http.StatusConflict || !strings.Contains(page, "use Reenviar") {
		t.Fatalf("Tentar agora on a dead letter: %d", res.StatusCode)
	}
}

var (
	olderLink = regexp.MustCompile(`href="([^"]*)" rel="next" data-mais-antigos`)
	newerLink = regexp.MustCompile(`href="([^"]*)" rel="prev" data-mais-recentes`)
	idCell    = regexp.MustCompile(`<td class="num mono chave"><a href="/entregas/(\d+)">`)
)

func link(re *regexp.Regexp, page string) string {
	if m := re.FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1])
	}
	return ""
}

func keys(re *regexp.Regexp, page string) []int64 {
	var out []int64
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, n)
	}
	return out
}

// pageBack follows "Mais antigos" from first, calling between after each
// page, and returns every key in page order and each page's URL.
func pageBack(t *testing.T, c *http.Client, base, first string, cell *regexp.Regexp, between func()) (all []int64, urls []string) {
	t.Helper()
	u := first
	for range 100 {
		res, page := get(t, c, base+u)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", u, res.StatusCode)
		}
		all = append(all, keys(cell, page)...)
		urls = append(urls, u)
		between()
		if u = link(olderLink, page); u == "" {
			return all, urls
		}
	}
	t.Fatal("more than 100 pages")
	return nil, nil
}

// descendingOnce says whether keys fall strictly, each once.
func descendingOnce(keys []int64) bool {
	for i := 1; i < len(keys); i++ {
		if keys[i] >= keys[i-1] {
			return false
		}
	}
	return true
}

// SPEC 9, issue 15 item 3: the lists page by keyset, so paging back while
// events arrive neither repeats nor skips a row, with filters or without.
func TestListsHoldStillWhileEventsArrive(t *testing.T) {
	b := newTailBench(t)
	cad, _ := receiver(t, http.StatusNoContent)
	in := b.integrator(t, "CAD Polícia", cad.URL, []string{"jornada:iniciada"}, nil)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	var rh []int64
	var all []int64
	for i := range 14 {
		origem := "rh"
		if i%3 == 0 {
			origem = "folha"
		}
		ev := b.publish(t, iniciada(origem))
		all = append(all, ev.Sequence)
		if origem == "rh" {
			rh = append(rh, ev.Sequence)
		}
	}
	arrive := func() {
		for range 2 {
			ev := b.publish(t, iniciada("rh"))
			all, rh = append(all, ev.Sequence), append(rh, ev.Sequence)
		}
	}
	newestFirst := func(keys []int64) []int64 {
		out := slices.Clone(keys)
		slices.Reverse(out)
		return out
	}

	for _, c := range []struct {
		name, first string
		of          *[]int64
	}{
		{"unfiltered", "/eventos?limite=4", &all},
		{"filtered", "/eventos?origem=rh&limite=3", &rh},
	} {
		t.Run("events "+c.name, func(t *testing.T) {
			want := newestFirst(*c.of)
			got, urls := pageBack(t, admin, b.srv.URL, c.first, seqCell, arrive)
			// The first page was read before anything arrived: what came
			// later is above it, never in the pages below.
			if !slices.Equal(got, want) {
				t.Fatalf("paging back: %v, want %v", got, want)
			}
			// And forward again: "Mais recentes" from the third page is the
			// second one.
			_, third := get(t, admin, b.srv.URL+urls[2])
			_, second := get(t, admin, b.srv.URL+urls[1])
			_, back := get(t, admin, b.srv.URL+link(newerLink, third))
			if k := keys(seqCell, back); !slices.Equal(k, keys(seqCell, second)) || len(k) == 0 {
				t.Fatalf("Mais recentes from the third page: %v, want %v", k, keys(seqCell, second))
			}
			if strings.Contains(third, "data-tail=") || !strings.Contains(third, "Página fixa") {
				t.Fatal("an older page holds still: no tail, and it says so")
			}
		})
	}

	b.waitRecorded(t, "the deliveries", func() bool {
		p, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID, Status: app.EntregaEntregue})
		q, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
		return p.Total == q.Total
	})
	t.Run("deliveries", func(t *testing.T) {
		q, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID, Desc: true, Limite: app.MaxLimite})
		var want []int64
		for _, d := range q.Linhas {
			want = append(want, d.ID)
		}
		got, urls := pageBack(t, admin, b.srv.URL, "/entregas?limite=5&integrador="+in.ID, idCell, arrive)
		if !slices.Equal(got, want) || !descendingOnce(got) {
			t.Fatalf("paging back: %v, want %v", got, want)
		}
		_, second := get(t, admin, b.srv.URL+urls[1])
		if !strings.Contains(second, "Mais antigas") || !strings.Contains(second, "Mais recentes") {
			t.Fatal("an older page of deliveries links both ways")
		}
	})
}

// SPEC 9: filters by time range and by event id.
func TestEventFiltersByTimeAndID(t *testing.T) {
	b := newTailBench(t)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	at := func(ts string) app.Event {
		req := iniciada("rh")
		req.Timestamp = ts
		return b.publish(t, req)
	}
	morning, noon, evening := at("2026-11-30T11:00:00Z"), at("2026-11-30T15:00:00Z"), at("2026-11-30T21:00:00Z")
	// Brasília is UTC-3: 10:00 to 13:00 there is 13:00 to 16:00 UTC.
	_, page := get(t, admin, b.srv.URL+"/eventos?timestamp_inicio=2026-11-30T10:00&timestamp_fim=2026-11-30T13:00")
	if got := keys(seqCell, page); !slices.Equal(got, []int64{noon.Sequence}) {
		t.Fatalf("time range: %v, want only %d", got, noon.Sequence)
	}
	_, page = get(t, admin, b.srv.URL+"/eventos?event_id="+evening.EventID)
	if got := keys(seqCell, page); !slices.Equal(got, []int64{evening.Sequence}) || strings.Contains(page, "data-tail=") {
		t.Fatalf("event id: %v, want only %d, no tail", got, evening.Sequence)
	}
	_, page = get(t, admin, b.srv.URL+"/eventos?event_id="+morning.EventID+"&timestamp_inicio=2026-11-30T10:00")
	if got := keys(seqCell, page); len(got) != 0 || !strings.Contains(page, "Nenhum evento com este ID") {
		t.Fatalf("event id outside the range: %v", got)
	}
	if res, page := get(t, admin, b.srv.URL+"/eventos?timestamp_inicio=2026-11-30T13:00&timestamp_fim=2026-11-30T10:00"); res.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(page, "deve ser depois do início") {
		t.Fatalf("an end before the start: %d", res.StatusCode)
	}
	if res, _ := get(t, admin, b.srv.URL+"/entregas?event_id=xyz"); res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a bad event id on /entregas: %d", res.StatusCode)
	}
}

// SPEC 9: the overview's window is selectable and every figure says what
// it counts.
func TestOverviewWindows(t *testing.T) {
	b := newTailBench(t)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	req := iniciada("rh")
	req.Timestamp = time.Now().Add(-5 * time.Hour).UTC().Format(time.RFC3339)
	b.publish(t, req)
	b.publish(t, iniciada("rh"))
	for _, c := range []struct {
		janela string
		events string // the window's count: the event of five hours ago is in a day, not in an hour
		want   []string
	}{
		{"", "1", []string{"evento na última hora", "Eventos por minuto", `data-atualizar="/visao-geral?janela=1h"`}},
		{"1h", "1", []string{"evento na última hora"}}, // one event: singular
		{"24h", "2", []string{"eventos nas últimas 24 h", "Eventos por hora", "últimas 24 h", "Só a última hora", `data-intervalo="60000"`}},
		{"7d", "2", []string{"eventos nos últimos 7 dias", "Eventos por período de 6 h", `data-atualizar="/visao-geral?janela=7d"`}},
	} {
		_, page := get(t, admin, b.srv.URL+"/?janela="+c.janela)
		for _, w := range append(c.want, `<span class="valor">`+c.events+`</span>`, "entregas na fila agora",
			"entregas com falha, desde o início", "falhas internas pendentes agora", `Entregas por situação <span class="janela">· desde o início`) {
			if !strings.Contains(page, w) {
				t.Errorf("janela %q: the overview lacks %q", c.janela, w)
			}
		}
		_, part := get(t, admin, b.srv.URL+"/visao-geral?janela="+c.janela)
		if strings.Contains(part, "<html") || !strings.Contains(part, `<span class="valor">`+c.events+`</span>`) {
			t.Errorf("janela %q: the refresh is the same figures alone", c.janela)
		}
	}
}

// SPEC 9: an unknown URL gets a styled page in pt-BR, inside the layout.
func TestUnknownURLsGetAStyledPage(t *testing.T) {
	b := newTailBench(t)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	res, page := get(t, admin, b.srv.URL+"/nao-existe/mesmo")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(page, "Página não encontrada") || !strings.Contains(page, `<nav class="menu"`) ||
		strings.Contains(page, "404 page not found") || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("%d %s", res.StatusCode, page)
	}
	// Without a session: the same page, no menu, and no trip to /login.
	res, page = get(t, client(t), b.srv.URL+"/integradores/x/y/z")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(page, "Página não encontrada") || strings.Contains(page, `<nav class="menu"`) {
		t.Fatalf("signed out: %d", res.StatusCode)
	}
	res, page = get(t, admin, b.srv.URL+"/sair")
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") == "" || !strings.Contains(page, "Ação não disponível") {
		t.Fatalf("GET of a form's route: %d %q", res.StatusCode, res.Header.Get("Allow"))
	}
}

// SPEC 9's wording: anonimização, descontinuar, one verb for replacing a
// credential.
func TestConsoleWording(t *testing.T) {
	b := newTailBench(t)
	cad, _ := receiver(t, http.StatusNoContent)
	in := b.integrator(t, "CAD Samu", cad.URL, nil, nil)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	for _, u := range []string{"/registro", "/registro/jornada:iniciada", "/integradores/" + in.ID} {
		_, page := get(t, admin, b.srv.URL+u)
		text := strings.ToLower(html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(page, " ")))
		for _, bad := range []string{"redação", "deprec", "rotacion", "familia"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s says %q", u, bad)
			}
		}
	}
	_, page := get(t, admin, b.srv.URL+"/registro/jornada:iniciada")
	if !strings.Contains(page, "Anonimização (LGPD)") || !strings.Contains(page, "Descontinuar versão") {
		t.Error("the registry says Anonimização and Descontinuar")
	}
	_, page = get(t, admin, b.srv.URL+"/integradores/"+in.ID)
	if !strings.Contains(page, "Trocar segredo") || !strings.Contains(page, "Trocar chave de API") {
		t.Error("both credentials are replaced with Trocar")
	}
}

// rowOf is the table row of an integrator.
func rowOf(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `data-integrador="`+id+`"`)
	if i < 0 {
		t.Fatalf("no row for %s", id)
	}
	j := strings.Index(page[i:], "</tr>")
	return page[i : i+j]
}

// One event its receiver refuses (a poison event) while the endpoint
// answers is not an incident: the header's badge stays off, and the
// integrator page's card says one delivery is refused, not that the CAD is
// failing. Two events refused are.
func TestOnePoisonEventIsNotAnIncident(t *testing.T) {
	b := newTailBench(t)
	var poison sync.Map   // the aggregates it refuses
	var armed atomic.Bool // the next new aggregate is refused
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agregado := r.Header.Get("X-Geohub-Agregado")
		if armed.CompareAndSwap(true, false) {
			poison.Store(agregado, true)
		}
		if _, refused := poison.Load(agregado); refused {
			http.Error(w, "campo servidor.cpf inválido", http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(cad.Close)
	in := b.integrator(t, "CAD Guarda", cad.URL, []string{"jornada:iniciada"}, []string{"1h"})
	leitora, _ := b.operator(t, "leitora", app.PapelLeitor)
	refuse := func() {
		armed.Store(true)
		b.publish(t, iniciada("rh"))
	}
	failed := func(n int) func() bool {
		return func() bool {
			p, _ := b.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
			k := 0
			for _, d := range p.Linhas {
				if d.UltimoStatus == http.StatusUnprocessableEntity {
					k++
				}
			}
			return k == n
		}
	}

	refuse()
	b.waitRecorded(t, "the poison event refused", failed(1))
	if incs := b.integrators.Incidents(); len(incs) != 0 {
		t.Fatalf("one poison event is an incident: %+v", incs)
	}
	_, page := get(t, leitora, b.srv.URL+"/integradores/"+in.ID)
	card := regexp.MustCompile(`(?s)<section class="cartao falha"[^>]*>.*?</section>`).FindString(page)
	if !strings.Contains(card, "Uma entrega está sendo recusada") || !strings.Contains(card, "HTTP 422") ||
		strings.Contains(card, `role="alert"`) || strings.Contains(card, "Por que está falhando") {
		t.Fatalf("one poison event's card: %s", card)
	}

	refuse()
	b.waitRecorded(t, "a second event refused", failed(2))
	if incs := b.integrators.Incidents(); len(incs) != 1 {
		t.Fatalf("two refused events are no incident: %+v", incs)
	}
	_, page = get(t, leitora, b.srv.URL+"/integradores/"+in.ID)
	if card := regexp.MustCompile(`(?s)<section class="cartao falha"[^>]*>.*?</section>`).FindString(page); !strings.Contains(card, "Por que está falhando") {
		t.Fatalf("a failing CAD's card: %s", card)
	}
}
