package app

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// Sealer encrypts secrets at rest (integrators' signing secrets) with
// AES-256-GCM under a key derived from the master key; the database alone
// never reveals them.
type Sealer struct{ aead cipher.AEAD }

// NewSealer derives the encryption key from the 32-byte master key.
func NewSealer(master []byte) (*Sealer, error) {
	key, err := hkdf.Key(sha256.New, master, nil, "geohub secrets v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns nonce || ciphertext. label binds the ciphertext to its owner
// (an integrator id), so a sealed secret cannot be moved to another row.
func (s *Sealer) Seal(plain []byte, label string) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, []byte(label))
}

// Open reverses Seal.
func (s *Sealer) Open(sealed []byte, label string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed secret too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], []byte(label))
}
