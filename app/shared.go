package app

import (
	"context"
	"time"
)

// SharedStore is the state that one process used to hold in memory and
// that several replicas on one database must share (SPEC 12): the login
// limits, the reprocess rate limit, the breakers and the
// version of the integrators' cadastro. Sessions were in the database
// already. On SQLite one process owns the file, so the same contracts hold
// within it; on PostgreSQL they hold across every replica.
type SharedStore interface {
	LoginLimitStore
	ReprocessLimitStore
	CircuitStore
	CadastroVersioner
}

// DatabaseClock is a store shared by replicas that tells the time by its
// database's clock (issue 27): every service of every replica then reads
// one clock, for when a retry comes due, the login window, the DLQ
// reprocess minute and the audit trail's times. app.New takes it as the
// services' clock when Deps.Now is unset.
type DatabaseClock interface {
	Clock() time.Time
}

// LoginLimitStore counts console login attempts per key ("ip:…",
// "login:…") in a sliding window.
type LoginLimitStore interface {
	// ReserveLoginAttempt counts one attempt at `at` for every key, in one
	// step no other attempt on those keys interleaves with, unless one key
	// already holds max attempts later than at-window: then it counts
	// nothing and says how long until the oldest of them leaves the window.
	// The id names the attempt for ReleaseLoginAttempt.
	ReserveLoginAttempt(ctx context.Context, keys []string, at time.Time, window time.Duration, max int) (id string, wait time.Duration, err error)
	// ReleaseLoginAttempt takes back the attempt id from every key and
	// forgets every attempt counted against the keys in forgive.
	ReleaseLoginAttempt(ctx context.Context, id string, forgive []string) error
}

// ReprocessLimitStore keeps once-per-interval slots by key: a colônia's
// DLQ reprocess, an integrator's "Tentar agora" ("tentar-agora:<id>").
type ReprocessLimitStore interface {
	// ClaimReprocess records a use of the key colonia at `at` if the last
	// one was at least interval before; otherwise it records nothing and
	// says how long to wait.
	ClaimReprocess(ctx context.Context, colonia string, at time.Time, interval time.Duration) (wait time.Duration, err error)
}

// StoredCircuit is one integrator's circuit as the replicas share it: what
// a breaker last opened or closed, and which process said so.
type StoredCircuit struct {
	Integrador string
	Aberto     bool
	Desde, Ate time.Time // while open: when it opened, when a probe may go
	Cooldown   time.Duration
	Falhas     int
	Origem     string // the process that wrote it (Integrators' process id)
	// Versao grows with every write of the integrator's row; the store
	// sets it.
	Versao int64
}

// CircuitStore keeps the breakers' shared state.
type CircuitStore interface {
	// SaveCircuits writes each circuit over the integrator's previous one,
	// one more Versao each, in one transaction.
	SaveCircuits(ctx context.Context, cs []StoredCircuit) error
	// Circuits reads every stored circuit.
	Circuits(ctx context.Context) ([]StoredCircuit, error)
}

// CadastroVersioner tells whether the integrators' cadastro changed: the
// store's version grows with every insert or change of an integrator's
// record, secrets and API key included, whichever process made it (the
// failing period the dispatcher records does not count).
type CadastroVersioner interface {
	CadastroVersion(ctx context.Context) (int64, error)
}

// SharedRefresh is how often a process reads what other replicas may have
// changed: the integrators' cadastro (routing, callbacks, secrets) and
// their circuits. A change on one replica is in force on every other within
// about this long (plus one read).
const SharedRefresh = time.Second
