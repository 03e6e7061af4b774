package app_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"geohub/app"
)

// Every delivery verifies with the Standard Webhooks library for Go, given
// the secret exactly as the cadastro showed it; during a rotation's grace
// period, with either secret. (The kit's clock is not the wall clock, so
// the library's own ±5 min window is not what is checked here.)
func TestDeliveriesVerifyWithAStandardWebhooksLibrary(t *testing.T) {
	k := newOutboxKit(t)
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	key, ok := strings.CutPrefix(in.Segredo, app.SecretPrefix)
	if raw, err := base64.StdEncoding.DecodeString(key); !ok || err != nil || len(raw) != 32 {
		t.Fatalf("the secret %q is not whsec_ and the standard base64 of 32 bytes: %v", in.Segredo, err)
	}
	verify := func(secret string, got received) error {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatalf("the library refuses the secret: %v", err)
		}
		return wh.VerifyIgnoringTimestamp(got.body, got.header)
	}
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	got := rc.requests()[0]
	if err := verify(in.Segredo, got); err != nil {
		t.Fatalf("a delivery does not verify: %v (%v)", err, got.header)
	}
	if got.header.Get("webhook-id") != ev.EventID || got.header.Get("webhook-timestamp") != got.header.Get("X-Geohub-Timestamp") {
		t.Errorf("webhook-id %q, webhook-timestamp %q; want %s and X-Geohub-Timestamp's %q", got.header.Get("webhook-id"),
			got.header.Get("webhook-timestamp"), ev.EventID, got.header.Get("X-Geohub-Timestamp"))
	}
	if err := verify(app.NewSecret(), got); err == nil {
		t.Fatal("a delivery verifies with a secret that did not sign it")
	}

	rot, err := k.integrators.RotateSecret(context.Background(), in.ID)
	if err != nil {
		t.Fatal(err)
	}
	k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	got = rc.requests()[1]
	if n := len(strings.Fields(got.header.Get("webhook-signature"))); n != 2 {
		t.Errorf("%d signatures during the grace period, want 2: %q", n, got.header.Get("webhook-signature"))
	}
	for name, secret := range map[string]string{"previous": in.Segredo, "new": rot.Segredo} {
		if err := verify(secret, got); err != nil {
			t.Errorf("during the grace period, a delivery does not verify with the %s secret: %v", name, err)
		}
	}
}

// A secret issued before Standard Webhooks (unpadded URL-safe base64) still
// signs X-Geohub-Assinatura with the whole string, and webhook-signature
// with the bytes it encodes.
func TestStandardKeyOfAnOlderSecret(t *testing.T) {
	raw := make([]byte, 32)
	raw[0], raw[1] = 0xfb, 0xff // '-' and '_' in the URL-safe alphabet
	old := app.SecretPrefix + base64.RawURLEncoding.EncodeToString(raw)
	if got := app.StandardKey([]byte(old)); string(got) != string(raw) {
		t.Errorf("StandardKey(%s) = %x", old, got)
	}
	if app.LibraryReady([]byte(old)) || !app.LibraryReady([]byte(app.NewSecret())) {
		t.Error("LibraryReady: an old secret is ready, or a new one is not")
	}
	if got := app.StandardKey([]byte("whsec-exemplo-0001")); string(got) != "whsec-exemplo-0001" {
		t.Errorf("a secret without the prefix is its own key: %q", got)
	}
}
