// Package keys derives every key Geohub uses from the 32-byte master key
// and seals with them what must not be readable at rest (integrators'
// secrets, outbox bodies, receivers' answers).
package keys

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// Every key Geohub uses is derived here from the 32-byte master key with
// HKDF-SHA256, one label per use, so that a flaw in how one key is used
// cannot open what another protects, and the master key itself never
// touches data. The labels are part of the data at rest: changing one makes
// sealed secrets and bodies unopenable, hashed fields unjoinable with new
// ones, and signed CSRF tokens and command digests stale. keys_test.go pins
// each output; a new use takes a new label.
const (
	labelSecrets   = "geohub secrets v1"             // integrators' signing secrets (Sealer)
	labelBodies    = "geohub outbox bodies v1"       // outbox bodies (Sealer)
	labelResponses = "geohub attempt responses v1"   // receivers' answers to attempts (Sealer)
	labelRedaction = "geohub redaction v1"           // the HMAC of redaction's hash rules
	labelCSRF      = "geohub csrf v1"                // the console's CSRF tokens
	labelCommand   = "geohub command digest v1"      // command body digests
	labelKeyCheck  = "geohub key check v1"           // the database's check of the master key (app.CheckMasterKey)
	labelMigration = "geohub migrate-data origin v1" // MigrationOrigin
)

func derive(master []byte, label string) ([]byte, error) {
	return hkdf.Key(sha256.New, master, nil, label, 32)
}

// mustDerive is derive for the keys that have no error path to report
// through. HKDF refuses a master key only in FIPS-only mode with a short
// key: a startup misconfiguration, so a panic.
func mustDerive(master []byte, label, what string) []byte {
	k, err := derive(master, label)
	if err != nil {
		panic("derive " + what + " key: " + err.Error())
	}
	return k
}

// Redaction is the HMAC key of redaction's hash rules (redact.Policy.Apply).
func Redaction(master []byte) []byte { return mustDerive(master, labelRedaction, "redaction") }

// CSRF is the key that signs each session's CSRF token.
func CSRF(master []byte) []byte { return mustDerive(master, labelCSRF, "csrf") }

// Command is the key of command body digests.
func Command(master []byte) []byte { return mustDerive(master, labelCommand, "command") }

// checkMessage is what the check value authenticates. Changing it, like
// changing labelKeyCheck, makes every database refuse its own key.
const checkMessage = "geohub: the master key of this installation"

// Check is the value a database keeps to recognise its master key
// (app.CheckMasterKey): an HMAC of a constant under a key derived for
// nothing else, so it says nothing about the keys that seal and sign, and
// is the same for every replica given the same master key.
func Check(master []byte) []byte {
	mac := hmac.New(sha256.New, mustDerive(master, labelKeyCheck, "key check"))
	mac.Write([]byte(checkMessage))
	return mac.Sum(nil)
}

// MigrationOrigin names a data directory's data by its master key, which
// every sealed secret and body depends on, without revealing it: a key
// derived for this use alone, cut to 16 bytes. A database migrated from
// one directory then refuses rows of another.
func MigrationOrigin(master []byte) (string, error) {
	k, err := derive(master, labelMigration)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(k[:16]), nil
}

// Weakness says why master cannot be a randomly drawn key, or "": all its
// bytes equal (the all-zero key included), printable text (a passphrase
// typed where 32 random bytes belong), or too few distinct bytes. A key
// drawn at random shows none of these but with negligible probability.
func Weakness(master []byte) string {
	seen := map[byte]bool{}
	text := true
	for _, b := range master {
		seen[b] = true
		text = text && b >= 0x20 && b < 0x7f
	}
	switch {
	case len(seen) == 1:
		return "all its bytes are equal"
	case text:
		return "it is printable text (a passphrase), not random bytes"
	case len(seen) < 16:
		return "it has too few distinct bytes to be random"
	}
	return ""
}
