package app

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"geohub/app/keys"
)

// KeyCheckStore keeps the master key's check value (CheckMasterKey): one
// value per database, written once.
type KeyCheckStore interface {
	// KeyCheck returns the stored check value; nil when none is stored yet.
	KeyCheck(ctx context.Context) ([]byte, error)
	// PinKeyCheck stores check unless a value is already stored, and
	// returns the stored value: check when this call wrote it, the
	// earlier one otherwise. Two replicas pinning at once both get the
	// one value that won.
	PinKeyCheck(ctx context.Context, check []byte) ([]byte, error)
	// SealedSamples returns what an earlier master key sealed, for a
	// database that predates the check: one integrator's current secret
	// and the newest stored outbox body. Either is zero when there is none.
	SealedSamples(ctx context.Context) (SealedSamples, error)
}

// SealedSamples are values sealed in a database, each with the label it
// was sealed to.
type SealedSamples struct {
	IntegratorID string // empty: no integrator
	Secret       []byte
	EventID      string // empty: no stored body
	Body         []byte // sealed, or in clear when an earlier version stored it so
}

// ErrMasterKeyMismatch is CheckMasterKey's refusal.
var ErrMasterKeyMismatch = errors.New("the master key does not match this database's: " +
	"either the key given (--master-key-file or GEOHUB_MASTER_KEY; on SQLite without either, DATA/master.key) is not the one " +
	"this installation uses (every replica must be given the same one), or the database (--db or --data) is another installation's; " +
	"nothing was sealed or sent")

// CheckMasterKey refuses a master key that is not the database's, before
// anything seals with it or sends what it opens: a replica with a
// mistyped key would otherwise seal bodies no other replica opens and
// dead-letter every delivery it cannot open, for good (resending from a
// good replica cannot open what it sealed either).
//
// The first open of a database stores keys.Check's value; every later
// one compares it. A database that predates the check (an upgraded
// appliance, a copy of one) takes its value at its first open, but only
// once the key opens what is already sealed in it (an integrator's secret,
// the newest sealed body), so an upgrade with the wrong key refuses
// instead of pinning that key. The write is conditional: replicas starting
// together on an empty database agree on the first one's value, and those
// given another key refuse.
func CheckMasterKey(ctx context.Context, st KeyCheckStore, master []byte) error {
	want := keys.Check(master)
	stored, err := st.KeyCheck(ctx)
	if err != nil {
		return fmt.Errorf("read the master key's check: %w", err)
	}
	if stored == nil {
		if err := opensSamples(ctx, st, master); err != nil {
			return err
		}
		if stored, err = st.PinKeyCheck(ctx, want); err != nil {
			return fmt.Errorf("store the master key's check: %w", err)
		}
	}
	if !hmac.Equal(stored, want) {
		return ErrMasterKeyMismatch
	}
	return nil
}

// opensSamples says whether master opens what the database holds sealed.
// A body in clear (an earlier version's, not sealed yet) proves nothing
// and is passed over.
func opensSamples(ctx context.Context, st KeyCheckStore, master []byte) error {
	s, err := st.SealedSamples(ctx)
	if err != nil {
		return fmt.Errorf("read what the database holds sealed: %w", err)
	}
	sealer, err := keys.NewSealer(master)
	if err != nil {
		return err
	}
	if s.IntegratorID != "" {
		if _, err := sealer.Open(s.Secret, s.IntegratorID); err != nil {
			return fmt.Errorf("%w (the secret of integrator %s does not open with it)", ErrMasterKeyMismatch, s.IntegratorID)
		}
	}
	if s.EventID != "" && keys.BodySealed(s.Body) {
		if _, err := sealer.OpenBody(s.Body, s.EventID); err != nil {
			return fmt.Errorf("%w (the stored body of event %s does not open with it)", ErrMasterKeyMismatch, s.EventID)
		}
	}
	return nil
}
