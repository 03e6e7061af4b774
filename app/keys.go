package app

import (
	"crypto/hkdf"
	"crypto/sha256"
)

// Every key Geohub uses is derived here from the 32-byte master key with
// HKDF-SHA256, one label per use, so that a flaw in how one key is used
// cannot open what another protects, and the master key itself never
// touches data. The labels are part of the data at rest: changing one makes
// sealed secrets and bodies unopenable, hashed fields unjoinable with new
// ones, and signed CSRF tokens and command digests stale. keys_test.go pins
// each output; a new use takes a new label.
const (
	labelSecrets   = "geohub secrets v1"           // integrators' signing secrets (Sealer)
	labelBodies    = "geohub outbox bodies v1"     // outbox bodies (Sealer)
	labelResponses = "geohub attempt responses v1" // receivers' answers to attempts (Sealer)
	labelRedaction = "geohub redaction v1"         // the HMAC of redaction's hash rules
	labelCSRF      = "geohub csrf v1"              // the console's CSRF tokens
	labelCommand   = "geohub command digest v1"    // command body digests
	labelKeyCheck  = "geohub key check v1"         // the database's check of the master key (keycheck.go)
)

func deriveKey(master []byte, label string) ([]byte, error) {
	return hkdf.Key(sha256.New, master, nil, label, 32)
}

// mustDerive is deriveKey for the keys that have no error path to report
// through. HKDF refuses a master key only in FIPS-only mode with a short
// key: a startup misconfiguration, so a panic.
func mustDerive(master []byte, label, what string) []byte {
	k, err := deriveKey(master, label)
	if err != nil {
		panic("derive " + what + " key: " + err.Error())
	}
	return k
}

// DeriveRedactionKey derives the HMAC key of redaction's hash rules
// (redact.Policy.Apply).
func DeriveRedactionKey(master []byte) []byte { return mustDerive(master, labelRedaction, "redaction") }

// DeriveCSRFKey derives the key that signs each session's CSRF token.
func DeriveCSRFKey(master []byte) []byte { return mustDerive(master, labelCSRF, "csrf") }

// DeriveCommandKey derives the key of command body digests.
func DeriveCommandKey(master []byte) []byte { return mustDerive(master, labelCommand, "command") }
