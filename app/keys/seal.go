package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
)

// Sealer encrypts what must not be readable from the database file or a
// backup without the master key, with AES-256-GCM: integrators' signing
// secrets, and outbox bodies (the full, unredacted envelope). Each gets its
// own key derived from the master key, so a flaw in how one is used cannot
// open the other. The first bytes of receivers' answers are sealed too: a
// CAD that refuses an event may echo its fields (a name, a CPF) back.
type Sealer struct{ aead, bodies, responses cipher.AEAD }

// NewSealer derives the encryption keys from the 32-byte master key (see
// keys.go).
func NewSealer(master []byte) (*Sealer, error) {
	aead, err := newAEAD(master, labelSecrets)
	if err != nil {
		return nil, err
	}
	bodies, err := newAEAD(master, labelBodies)
	if err != nil {
		return nil, err
	}
	responses, err := newAEAD(master, labelResponses)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead, bodies: bodies, responses: responses}, nil
}

func newAEAD(master []byte, label string) (cipher.AEAD, error) {
	key, err := derive(master, label)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal returns nonce || ciphertext. label binds the ciphertext to its owner
// (an integrator id), so a sealed secret cannot be moved to another row.
func (s *Sealer) Seal(plain []byte, label string) []byte {
	return seal(s.aead, nil, plain, label)
}

// Open reverses Seal.
func (s *Sealer) Open(sealed []byte, label string) ([]byte, error) {
	return open(s.aead, sealed, label)
}

// bodyFormat starts every sealed outbox body. An envelope an earlier
// version stored in clear starts with '{', so the upgrade tells the two
// apart without a column of its own, and a later format can take 2.
const bodyFormat = 0x01

// SealBody encrypts an outbox body, bound through the additional data to
// its event: a sealed body copied onto another event's row does not open.
// Every recipient of an event gets the same body (SPEC 6.3), so the event
// is its identity; moving it between an event's own rows changes nothing.
// Nonces are random (96 bits): GCM's bound of 2^32 messages per key is far
// above what one municipality's outbox seals in the master key's life.
func (s *Sealer) SealBody(body []byte, eventID string) []byte {
	return seal(s.bodies, []byte{bodyFormat}, body, eventID)
}

// ErrBodyUnopenable says a stored body cannot be decrypted: another master
// key sealed it, it was moved from another event, or it was altered.
var ErrBodyUnopenable = errors.New("o corpo da entrega não abre com a chave mestra deste servidor")

// OpenBody reverses SealBody; it never returns a body it did not
// authenticate.
func (s *Sealer) OpenBody(sealed []byte, eventID string) ([]byte, error) {
	if len(sealed) == 0 || sealed[0] != bodyFormat {
		return nil, ErrBodyUnopenable
	}
	body, err := open(s.bodies, sealed[1:], eventID)
	if err != nil {
		return nil, ErrBodyUnopenable
	}
	return body, nil
}

// BodySealed says whether a stored body is in the sealed format (the
// upgrade's test; it proves nothing about who sealed it).
func BodySealed(stored []byte) bool { return len(stored) > 0 && stored[0] == bodyFormat }

// SealResponse encrypts the first bytes of a receiver's answer to one
// attempt, bound to that attempt's entrega id; nil for an empty answer.
func (s *Sealer) SealResponse(snippet, entregaID string) []byte {
	if snippet == "" {
		return nil
	}
	return seal(s.responses, []byte{bodyFormat}, []byte(snippet), entregaID)
}

// ResponseUnopenable stands for a stored answer that does not open: the
// attempt's other fields are still worth showing.
const ResponseUnopenable = "(a resposta gravada não abre com a chave mestra deste servidor)"

// OpenResponse reverses SealResponse.
func (s *Sealer) OpenResponse(sealed []byte, entregaID string) (string, error) {
	if len(sealed) == 0 || sealed[0] != bodyFormat {
		return "", ErrBodyUnopenable
	}
	plain, err := open(s.responses, sealed[1:], entregaID)
	if err != nil {
		return "", ErrBodyUnopenable
	}
	return string(plain), nil
}

func seal(aead cipher.AEAD, prefix, plain []byte, label string) []byte {
	n := aead.NonceSize()
	out := make([]byte, len(prefix)+n, len(prefix)+n+len(plain)+aead.Overhead())
	copy(out, prefix)
	nonce := out[len(prefix):]
	rand.Read(nonce)
	return aead.Seal(out, nonce, plain, []byte(label))
}

func open(aead cipher.AEAD, sealed []byte, label string) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed secret too short")
	}
	return aead.Open(nil, sealed[:n], sealed[n:], []byte(label))
}
