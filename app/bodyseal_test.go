package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/keys"
)

// The body reaches the store sealed, and the receiver gets the envelope as
// published: the seal is between the two, never on the wire.
func TestTheOutboxHoldsTheBodySealedAndTheReceiverGetsItClear(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	d := k.delivery(t, ev.EventID, in.ID)
	stored, err := k.deliveries.Get(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	verify(t, got[0], in.Segredo, k.clock.Now())
	if !bytes.Contains(got[0].body, []byte(`"cpf":"12345678901"`)) {
		t.Fatalf("the receiver did not get the full payload: %s", got[0].body)
	}
	if !keys.BodySealed(stored.Corpo) || bytes.Contains(stored.Corpo, []byte("12345678901")) {
		t.Fatalf("the outbox holds the body in clear: %q", stored.Corpo)
	}
	if open, err := k.integrators.Sealer.OpenBody(stored.Corpo, ev.EventID); err != nil || !bytes.Equal(open, got[0].body) {
		t.Fatalf("the stored body opens to %q (%v); the receiver got %q", open, err, got[0].body)
	}
}

// A body that does not open is never sent: sealed under another master key
// (the data directory's master.key was replaced), sealed for another event
// (copied from its row), altered, or in clear (the upgrade did not run). It
// dead-letters at its first attempt with the reason, as a purged body does,
// and says nothing of the receiver: no failing period, no breaker.
func TestABodyThatDoesNotOpenIsDeadLetteredUnsent(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	other, err := keys.NewSealer(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	envelope := []byte(`{"id":"x","payload":{"cpf":"12345678901"},"tipo":"teste:a"}`)
	own := k.integrators.Sealer
	cases := map[string]func(eventID string) []byte{
		"another master key": func(id string) []byte { return other.SealBody(envelope, id) },
		"another event":      func(string) []byte { return own.SealBody(envelope, uuid.NewString()) },
		"altered": func(id string) []byte {
			b := own.SealBody(envelope, id)
			b[len(b)-1] ^= 1
			return b
		},
		"in clear": func(string) []byte { return envelope },
	}
	ids := map[string]string{}
	i := 0
	for name, body := range cases {
		i++
		id := uuid.Must(uuid.NewV7()).String()
		ids[name] = id
		ev := app.Event{EventID: id, Tipo: "teste:a", VersaoSchema: "1.0.0", Timestamp: k.clock.Now(), Origem: "teste",
			CorrelacaoID: id, Agregado: "k:" + name, Payload: json.RawMessage(`{"n":1}`)}
		out := &app.Outbox{Body: body(id), Agregado: ev.Agregado, Recipients: func(string) []string { return []string{in.ID} }}
		if _, err := k.db.Append(context.Background(), []app.Pending{{Event: ev, Outbox: out}}); err != nil {
			t.Fatal(err)
		}
	}
	k.dispatcher.Wake()
	k.waitOutcomes(t, len(cases))
	for name, id := range ids {
		d := k.delivery(t, id, in.ID)
		if d.Status != app.EntregaFalhou || d.Tentativas != 1 || !strings.Contains(d.UltimoErro, "não abre com a chave mestra") {
			t.Errorf("%s: %+v", name, d)
		}
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("the receiver got %d requests; a body that does not open must never be sent", n)
	}
	if in, _ := k.integrators.Get(context.Background(), in.ID); in.FalhandoDesde != nil {
		t.Fatalf("an unsendable body started a failing period: %v", in.FalhandoDesde)
	}
	k.noCircuitChange(t)
}

// Dead letters keep their body for DeadLetterRetention counted from when
// they dead-lettered, not from when they were enqueued; then the purge
// drops it, the row says so, a resend is refused with 409 and a bulk
// resend leaves it and counts it.
func TestDeadLettersLoseTheirBodyAfterTheirRetention(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	var answer atomic.Int32
	answer.Store(http.StatusBadRequest)
	rc := newReceiver(t, func(int, *http.Request) int { return int(answer.Load()) })
	in := k.integrator(t, rc, func(r *app.NewIntegrator) { r.Backoff = []string{"10h"} })
	ctx := context.Background()
	start := k.clock.Now()

	// Dead-lettered at once (400).
	early := k.delivery(t, k.publish(t, "teste:a", "x:1", nil).EventID, in.ID)
	k.waitOutcomes(t, 1)
	// Enqueued at the same time, dead-lettered 10 h later: its first
	// attempt gets a 503 (retry in 10 h), its second a 400.
	answer.Store(http.StatusServiceUnavailable)
	late := k.delivery(t, k.publish(t, "teste:a", "x:2", nil).EventID, in.ID)
	k.waitOutcomes(t, 1)
	answer.Store(http.StatusBadRequest)
	k.clock.Add(10 * time.Hour)
	k.dispatcher.Wake()
	k.waitOutcomes(t, 1)
	for _, d := range []app.Delivery{early, late} {
		if got := k.delivery(t, d.EventID, in.ID); got.Status != app.EntregaFalhou || got.CorpoExpurgado {
			t.Fatalf("setup: %+v", got)
		}
	}
	answer.Store(http.StatusNoContent)

	// purgePass lets the dispatcher's housekeeping run at the clock's time:
	// it runs as a pass of the loop begins, and the first delivery's claim
	// may have begun its pass before the clock moved.
	n := 2
	purgePass := func() {
		t.Helper()
		k.dispatcher.Wake()
		for range 2 {
			n++
			k.publish(t, "teste:a", fmt.Sprintf("x:%d", n), nil)
			k.waitOutcomes(t, 1)
		}
	}
	kept := func(d app.Delivery) bool {
		t.Helper()
		got, err := k.deliveries.Get(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.CorpoExpurgado != (got.Corpo == nil) {
			t.Fatalf("corpo_expurgado %v with a body of %d bytes", got.CorpoExpurgado, len(got.Corpo))
		}
		return !got.CorpoExpurgado
	}

	k.clock.Add(start.Add(app.DefaultDeadLetterRetention - time.Minute).Sub(k.clock.Now()))
	purgePass()
	if !kept(early) || !kept(late) {
		t.Fatal("a dead letter lost its body before its retention ended")
	}
	k.clock.Add(2 * time.Minute)
	purgePass()
	if kept(early) {
		t.Fatal("the first dead letter kept its body past the retention")
	}
	if !kept(late) {
		t.Fatal("the retention counted from when the row was enqueued, not from when it dead-lettered")
	}

	err := k.deliveries.Resend(ctx, early.ID)
	if app.ErrorCode(err) != app.EConflict || !strings.Contains(err.Error(), "expurgado") {
		t.Fatalf("resend of a purged dead letter: %v", err)
	}
	if got := k.delivery(t, early.EventID, in.ID); got.Status != app.EntregaFalhou {
		t.Fatalf("a refused resend changed the row: %+v", got)
	}
	res, err := k.deliveries.ResendAll(ctx, in.ID, app.EntregaFalhou)
	if err != nil || res != (app.Resent{Reenviadas: 1, Expurgadas: 1}) {
		t.Fatalf("bulk resend: %+v %v; want the late one resent and the purged one counted", res, err)
	}
	k.waitOutcomes(t, 1)
	if got := k.delivery(t, late.EventID, in.ID); got.Status != app.EntregaEntregue {
		t.Fatalf("the resent dead letter: %+v", got)
	}
	if got := k.delivery(t, early.EventID, in.ID); got.Status != app.EntregaFalhou || !got.CorpoExpurgado {
		t.Fatalf("the purged dead letter after the bulk resend: %+v", got)
	}
}
