package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"geohub/app"
)

// A dead letter whose body was purged after its retention says, on its
// page and in the list, that it can no longer be resent, and offers no
// Reenviar; a forged resend is refused, and the bulk resend says it left it.
func TestAPurgedDeadLetterSaysItCanNoLongerBeResent(t *testing.T) {
	b := newTailBench(t)
	ctx := context.Background()
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer cad.Close()
	created, err := b.integrators.Create(ctx, app.NewIntegrator{Nome: "CAD Defesa Civil",
		CallbackURL: cad.URL + "/eventos", HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	deadLetter := func() (app.Event, app.Delivery) {
		t.Helper()
		ev := b.publish(t, iniciada("rh"))
		var page app.Page[app.Delivery]
		b.waitRecorded(t, "the delivery to dead-letter", func() bool {
			var err error
			if page, err = b.deliveries.List(ctx, app.DeliveryFilter{EventID: ev.EventID, Status: app.EntregaFalhou}); err != nil {
				t.Fatal(err)
			}
			return len(page.Linhas) == 1
		})
		return ev, page.Linhas[0]
	}
	_, first := deadLetter()
	// Only the first one's retention ends: the purge takes the dead letters
	// that failed before cutoff, and the clock moves a second past it before
	// the second one fails.
	cutoff := time.Now().Add(500 * time.Millisecond)
	b.ahead.Add(int64(time.Second))
	_, second := deadLetter()
	if n, err := b.deliveries.Store.PurgeDeadLetters(ctx, cutoff); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	gone, alive := first.ID, second.ID

	_, page := get(t, admin, b.srv.URL+fmt.Sprintf("/entregas/%d", gone))
	if strings.Contains(page, fmt.Sprintf(`action="/entregas/%d/reenviar"`, gone)) ||
		!strings.Contains(page, "Não pode mais ser reenviada") || !strings.Contains(page, "esta entrega não pode mais ser reenviada") {
		t.Fatalf("the purged dead letter's page: %s", page)
	}
	_, page = get(t, admin, b.srv.URL+fmt.Sprintf("/entregas/%d", alive))
	if !strings.Contains(page, fmt.Sprintf(`action="/entregas/%d/reenviar"`, alive)) || strings.Contains(page, "Não pode mais") {
		t.Fatalf("a dead letter with its body keeps its Reenviar: %s", page)
	}
	_, page = get(t, admin, b.srv.URL+"/entregas?status=falhou")
	if strings.Contains(page, fmt.Sprintf(`action="/entregas/%d/reenviar"`, gone)) || !strings.Contains(page, "Não pode mais ser reenviada") ||
		!strings.Contains(page, fmt.Sprintf(`action="/entregas/%d/reenviar"`, alive)) {
		t.Fatalf("the list: %s", page)
	}
	res, body := post(t, admin, b.srv.URL+fmt.Sprintf("/entregas/%d/reenviar", gone), url.Values{"csrf": {csrf}})
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, "expurgado") {
		t.Fatalf("a resend of the purged dead letter: %d %s", res.StatusCode, body)
	}
	res, _ = post(t, admin, b.srv.URL+"/entregas/reenviar", url.Values{"csrf": {csrf}, "integrador": {created.ID}})
	msg := flashOf(t, admin, b.srv.URL, res)
	if !strings.Contains(msg, "1 entrega com falha para CAD Defesa Civil reenviada.") ||
		!strings.Contains(msg, "1 outra não pode mais ser reenviada: o corpo dela já foi expurgado") {
		t.Fatalf("bulk resend: %d %s", res.StatusCode, msg)
	}
}
