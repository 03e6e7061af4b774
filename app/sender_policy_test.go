package app_test

import (
	"strings"
	"testing"

	"geohub/app"
	"geohub/app/callback"
)

// SPEC 10: a http:// callback accepted under --insecure-callbacks is never
// used by a server running without it; the delivery says why.
func TestAnHTTPCallbackIsRefusedWithoutInsecureCallbacks(t *testing.T) {
	t.Parallel()
	k := newOutboxKitWith(t, func(d *app.Dispatcher) { d.Policy = callback.Policy{} })
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil) // registered while insecure callbacks were allowed
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Status != app.EntregaFalhou || !strings.Contains(d.UltimoErro, "--insecure-callbacks") || len(rc.requests()) != 0 {
		t.Fatalf("a http:// callback without --insecure-callbacks: %+v, %d requests", d, len(rc.requests()))
	}
}

// SPEC 10: a https callback to a loopback address, accepted under
// --insecure-callbacks, is refused before any dial on a server without it,
// and dead-letters with the reason instead of retrying a refused dial.
func TestALoopbackCallbackIsRefusedBeforeAnyDialWithoutInsecureCallbacks(t *testing.T) {
	t.Parallel()
	k := newOutboxKitWith(t, func(d *app.Dispatcher) { d.Policy = callback.Policy{} })
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, func(n *app.NewIntegrator) {
		n.CallbackURL = strings.Replace(n.CallbackURL, "http://", "https://", 1)
	})
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Status != app.EntregaFalhou || !strings.Contains(d.UltimoErro, "loopback") ||
		!strings.Contains(d.UltimoErro, "corrija a URL") || len(rc.requests()) != 0 {
		t.Fatalf("a https loopback callback without --insecure-callbacks: %+v, %d requests", d, len(rc.requests()))
	}
}

func TestRefusalNeedsNoDNSAndNamesTheReason(t *testing.T) {
	t.Parallel()
	strict, insecure := callback.Policy{}, callback.Policy{Insecure: true}
	for _, c := range []struct {
		policy  callback.Policy
		url     string
		allowed []string
		want    string // "" for accepted
	}{
		{strict, "https://cad.exemplo.gov.br/geohub", []string{"cad.exemplo.gov.br"}, ""},
		{strict, "https://cad.exemplo.gov.br:8443/geohub", []string{"*.exemplo.gov.br"}, ""},
		{strict, "http://cad.exemplo.gov.br/geohub", []string{"cad.exemplo.gov.br"}, "https"},
		{strict, "https://127.0.0.1:9000/", []string{"127.0.0.1"}, "loopback"},
		{strict, "https://[::1]:9000/", []string{"::1"}, "loopback"},
		{strict, "https://[::ffff:127.0.0.1]:9000/", []string{"::ffff:127.0.0.1"}, "loopback"},
		{strict, "https://localhost:9000/", []string{"localhost"}, "loopback"},
		{strict, "https://cad.localhost/", []string{"*.localhost"}, "loopback"},
		{strict, "https://192.0.2.10/", []string{"192.0.2.10"}, "uso especial"},
		{strict, "https://10.1.2.3/", []string{"10.1.2.3"}, "uso especial"},
		{strict, "https://outro.exemplo.gov.br/", []string{"cad.exemplo.gov.br"}, "hosts_permitidos"},
		{strict, "https://user:pw@cad.exemplo.gov.br/", []string{"cad.exemplo.gov.br"}, "usuário"},
		{insecure, "http://127.0.0.1:9000/", []string{"127.0.0.1"}, ""},
		{insecure, "http://localhost:9000/", []string{"localhost"}, ""},
		{insecure, "https://10.1.2.3/", []string{"10.1.2.3"}, "uso especial"},
	} {
		got := c.policy.Refusal(c.url, c.allowed)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Refusal(%q, insecure=%v) = %q, want one naming %q", c.url, c.policy.Insecure, got, c.want)
		}
	}
}
