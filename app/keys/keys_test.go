package keys_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"geohub/app/keys"
)

// The derived keys are part of the data at rest and of what clients hold
// (hashed fields, sealed secrets and bodies, CSRF tokens, command digests):
// these outputs, computed before the derivations moved into keys.go, must
// never change for a given master key.
func TestKeysDerivedFromTheMasterKeyNeverChange(t *testing.T) {
	master := bytes.Repeat([]byte{0x5a}, 32)
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"redaction", keys.Redaction(master), "d27c4d33b42af3ee8b9cddf765fd95742b5472dc61fd5843ab9565227b088815"},
		{"csrf", keys.CSRF(master), "d5d70c6a353210d3d42a561c2180f555f8f63f50181d62e5d102801a46178f11"},
		{"command", keys.Command(master), "ee0a0fb7f8dfb7885d59d23cfdc2bee73725bd59efa5965017f3ae63dd7da1d4"},
		// Not a key but the value databases store to recognise theirs:
		// HMAC-SHA256 of keycheck.go's constant under its own label.
		{"key check", keys.Check(master), "f2fcdf176d4fcea419b25b329391c011559d2d9984ac96ad0ac9f00ea30c2b83"},
	} {
		if hex.EncodeToString(c.got) != c.want {
			t.Errorf("%s key = %x, want %s", c.name, c.got, c.want)
		}
	}
	if bytes.Equal(keys.Redaction(master), keys.Redaction(bytes.Repeat([]byte{0x5b}, 32))) {
		t.Error("the redaction key does not depend on the master key")
	}

	// The sealer's three keys are pinned through what they sealed then: a
	// secret, a body and an answer sealed by the earlier code still open.
	s, err := keys.NewSealer(master)
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := hex.DecodeString("6e3beabec0af40883992fbe7fd342a32756b00f29c4ba4a142a2bb69609459d13b1142")
	if got, err := s.Open(secret, "integrador-1"); err != nil || string(got) != "segredo" {
		t.Errorf("a secret sealed before opens as %q, %v", got, err)
	}
	body, _ := hex.DecodeString("01cc6ec7a1136835afae4163cddc2c6b81e9d4567e7fc4eb890885ae50ff4dd1ae299c06")
	if got, err := s.OpenBody(body, "evento-1"); err != nil || string(got) != `{"a":1}` {
		t.Errorf("a body sealed before opens as %q, %v", got, err)
	}
	answer, _ := hex.DecodeString("01d665ffbd86b67bae990855c4a381f9599a3b3c18ef59f9b6eb6b0357f0ecf0942880ac42")
	if got, err := s.OpenResponse(answer, "entrega-1"); err != nil || got != "recusado" {
		t.Errorf("an answer sealed before opens as %q, %v", got, err)
	}
	if _, err := s.OpenBody(answer, "entrega-1"); err == nil {
		t.Error("an answer opens with the bodies' key")
	}
}
