package app_test

import (
	"strings"
	"testing"

	"geohub/app"
)

// SPEC 10: a http:// callback accepted under --insecure-callbacks is never
// used by a server running without it; the delivery says why.
func TestAnHTTPCallbackIsRefusedWithoutInsecureCallbacks(t *testing.T) {
	t.Parallel()
	k := newOutboxKitWith(t, func(d *app.Dispatcher) { d.Policy = app.CallbackPolicy{} })
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil) // registered while insecure callbacks were allowed
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Status != app.EntregaFalhou || !strings.Contains(d.UltimoErro, "--insecure-callbacks") || len(rc.requests()) != 0 {
		t.Fatalf("a http:// callback without --insecure-callbacks: %+v, %d requests", d, len(rc.requests()))
	}
}
