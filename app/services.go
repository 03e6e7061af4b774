package app

import (
	"context"
	"errors"
	"geohub/app/callback"
	"geohub/app/keys"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Store is everything the services keep in a database: the interfaces app
// owns, which package store implements (and asserts it does). A second
// backend is one more implementation of this one interface.
type Store interface {
	EventLog
	PageLog
	RegistryStore
	AuthStore
	SessionStore
	PortalStore
	IntegratorStore
	OutboxStore
	ConsumerStore
	StatsStore
	AuditStore
	AttemptLog
	SharedStore
	LeaderStore
	KeyCheckStore
	Wakeups
	// OnCommit sets the one function called after each committed batch of
	// appended events, outside the transaction; it must not block.
	OnCommit(fn func([]Appended))
	// Writable says whether a write would succeed now (/readyz).
	Writable(ctx context.Context) error
}

// Deps is what the service graph is built from: the store, the master key,
// and the settings `geohub serve` takes from its flags. Zero values are the
// defaults noted; tests set only what they vary.
type Deps struct {
	Store     Store
	MasterKey []byte           // 32 bytes; every key is derived from it (keys.go)
	Now       func() time.Time // default the store's DatabaseClock, else time.Now
	Logger    *slog.Logger     // default discards
	// Registerer takes the services' metrics and the gauges of the outbox
	// backlog and the open DLQ entries; nil records no metrics.
	Registerer prometheus.Registerer
	// Policy is the callback policy of registration and of every delivery.
	Policy callback.Policy

	// The dispatcher's settings (see Dispatcher): Version goes in the
	// User-Agent; AutoDisable 0 turns auto-disable off; zero retentions are
	// the defaults.
	Version                        string
	AutoDisable                    time.Duration
	Retention, DeadLetterRetention time.Duration
	// SessionIdle ends a console session without a request for this long
	// (0: DefaultSessionIdle).
	SessionIdle time.Duration
	// PerIntegrator bounds one integrator's requests on the wire from this
	// process (0: DefaultPerIntegrator).
	PerIntegrator int
	ReapOnStart   bool
	// NoDispatch leaves the dispatcher stopped: Start runs only the
	// consumers and the stats loop, and Ready does not ask for it. For tests
	// that put deliveries where they want them and look at the rows.
	NoDispatch bool
	// PasswordCost is bcrypt's cost for operators' passwords (0: bcrypt's
	// default). The test kits lower it.
	PasswordCost int
}

// Services is the service graph, built once by New for `geohub serve` and
// the test kits alike. Its fields may be adjusted between New and Start
// (tests tune the dispatcher, plugins subscribe consumers); not after.
type Services struct {
	Store       Store
	Now         func() time.Time // the clock every service reads
	Logger      *slog.Logger
	Metrics     *Metrics
	Registry    *Registry
	Auth        *Auth
	Sessions    *Sessions
	Portal      *Portal
	Integrators *Integrators
	Publisher   *Publisher
	Commands    *Commands
	Consumers   *Consumers
	Dispatcher  *Dispatcher
	Queries     *Queries
	Deliveries  *Deliveries
	AuditTrail  *AuditTrail
	Stats       *Stats
	// Refusals bounds each credential's refused requests, at the edges
	// (web and console) that know the credential.
	Refusals *Refusals
	// Leader elects the replica that runs the periodic duties (SPEC 12):
	// the dispatcher's purges and the in-process consumers. On SQLite the
	// store always grants it. The stats loop is no such duty: it samples
	// into memory, for this replica's console, so every replica runs it.
	Leader *Leader
	// The console's live tails read the database themselves; these only
	// wake them, without ever blocking a commit.
	EventsChanged, AttemptsChanged *Notifier
	// ConsumedChanged wakes the pages that show a read model the consumers
	// keep (the ocorrências list): notified by the consumers here, or by
	// the leader's through a wake-up when this replica does not lead.
	ConsumedChanged *Notifier

	dispatch bool
	// Set by Start, used by Stop.
	stop         context.CancelFunc
	dispatched   chan struct{}
	led          <-chan struct{}
	started      atomic.Bool // Remote wakes the services from then on
	remoteSeen   atomic.Bool // a first resync wake-up came (see Remote)
	statsDone    chan struct{}
	registryDone chan struct{}
	stopOnce     sync.Once
	// sharedChanged asks for the shared state to be read again now
	// (Wakeup.Shared): the registry, the cadastro and circuits, the tokens.
	sharedChanged chan struct{}
	sharedDone    chan struct{}
}

// New builds the services on d.Store and loads what they cache (the
// registry, the cadastro of integrators). It starts nothing: subscribe the
// consumers, then call Start. New also makes the store call Committed after
// every commit.
func New(ctx context.Context, d Deps) (*Services, error) {
	// Leases are kept by the process's monotonic clock, or by the tests'
	// own when they give one; every date by the database's when the store
	// has one (replicas), else by the process's.
	leaseClock := d.Now
	if d.Now == nil {
		leaseClock, d.Now = time.Now, time.Now
		if c, ok := d.Store.(DatabaseClock); ok {
			d.Now = c.Clock
		}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	db := d.Store
	var metrics *Metrics
	cadSessions := &CADSessions{}
	if d.Registerer != nil {
		metrics = NewMetrics(d.Registerer)
		registerGauges(d.Registerer, db, cadSessions)
	}
	sealer, err := keys.NewSealer(d.MasterKey)
	if err != nil {
		return nil, err
	}
	registry, err := NewRegistry(ctx, db, d.Now)
	if err != nil {
		return nil, err
	}
	perIntegrator := d.PerIntegrator
	if perIntegrator == 0 {
		perIntegrator = DefaultPerIntegrator
	}
	integrators := &Integrators{Store: db, Sealer: sealer, Now: d.Now, Policy: d.Policy, CADSessions: cadSessions, Janela: perIntegrator}
	if err := integrators.Load(ctx); err != nil {
		return nil, err
	}
	for _, in := range integrators.RefusedCallbacks() {
		d.Logger.Warn("callback refused by this server: its deliveries fail until an admin fixes the URL",
			"integrador", in.ID, "nome", in.Nome, "motivo", in.CallbackRecusado)
	}
	publisher := &Publisher{Log: db, Registry: registry, Integrators: integrators,
		RedactionKey: keys.Redaction(d.MasterKey), Now: d.Now, Metrics: metrics}
	s := &Services{
		Store:       db,
		Now:         d.Now,
		Logger:      d.Logger,
		Metrics:     metrics,
		Registry:    registry,
		Auth:        &Auth{Store: db, Now: d.Now, PasswordCost: d.PasswordCost},
		Sessions:    &Sessions{Store: db, Now: d.Now, CSRFKey: keys.CSRF(d.MasterKey), PasswordCost: d.PasswordCost, Idle: d.SessionIdle, Logger: d.Logger},
		Portal:      &Portal{Store: db, Integrators: integrators, Now: d.Now, CSRFKey: keys.CSRF(d.MasterKey)},
		Integrators: integrators,
		Publisher:   publisher,
		Commands:    &Commands{Publisher: publisher, Log: db, Audit: db, Key: keys.Command(d.MasterKey), Now: d.Now},
		Refusals:    &Refusals{Now: d.Now},
		Consumers:   &Consumers{Log: db, Store: db, Now: d.Now, Logger: d.Logger, Metrics: metrics},
		Queries:     &Queries{Log: db, Store: db},
		AuditTrail:  &AuditTrail{Store: db, Now: d.Now},
		Stats:       &Stats{Store: db, Now: d.Now},

		EventsChanged:   &Notifier{},
		AttemptsChanged: &Notifier{},
		ConsumedChanged: &Notifier{},
		dispatch:        !d.NoDispatch,
		sharedChanged:   make(chan struct{}, 1),
		Leader:          &Leader{Store: db, Logger: d.Logger},
	}
	s.Consumers.Leader = s.Leader
	if a, ok := db.(ConsumedAnnouncer); ok {
		s.Consumers.Announcer = a
	}
	s.Dispatcher = &Dispatcher{Store: db, Integrators: integrators, Policy: d.Policy,
		Now: d.Now, Monotonic: leaseClock, Logger: d.Logger, Metrics: metrics, Version: d.Version, AutoDisable: d.AutoDisable,
		ReapOnStart: d.ReapOnStart, Retention: d.Retention, DeadLetterRetention: d.DeadLetterRetention,
		PerIntegrator: d.PerIntegrator, OnRecorded: s.AttemptsChanged.Notify, Leader: s.Leader, CADSessions: cadSessions, SessionRecords: db}
	s.Deliveries = &Deliveries{Store: db, Slots: db, Dispatcher: s.Dispatcher, Sealer: sealer, Now: d.Now,
		Tester: NewTester(d.Policy, DeliveryTimeout, d.Now, d.Version), Publisher: publisher}
	db.OnCommit(s.Committed)
	db.OnRemote(s.Remote)
	return s, nil
}

// registerGauges exports the numbers the console's overview also shows,
// read from the store when scraped (-1 when the read fails).
func registerGauges(reg prometheus.Registerer, st StatsStore, sessions *CADSessions) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "geohub_sessions_connected", Help: "CAD sessions (SPEC 8d) attached to this process.",
	}, func() float64 { return float64(sessions.Len()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "geohub_dlq_pending", Help: "Open (pendente or retrying) DLQ entries.",
	}, func() float64 {
		s, err := st.DLQStats(context.Background(), 0)
		if err != nil {
			return -1
		}
		return float64(s.TotalPendentes)
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "geohub_outbox_backlog", Help: "Deliveries pending or in flight.",
	}, func() float64 {
		n, err := st.OutboxBacklog(context.Background())
		if err != nil {
			return -1
		}
		return float64(n)
	}))
}

// Committed is who is woken after a commit: the consumers always (they
// track the sequence), the console's event tails when events were
// appended, and the dispatcher only when the batch has deliveries, since a
// commit without any gives it nothing new to claim. It never blocks.
func (s *Services) Committed(batch []Appended) {
	s.Consumers.Committed(batch)
	if len(batch) > 0 {
		s.EventsChanged.Notify()
	}
	for _, a := range batch {
		if a.Deliveries > 0 {
			s.Dispatcher.Wake()
			return
		}
	}
}

// Start runs the leader's elector (after its first try: a replica alone
// on its database leads once Start returns), the consumers (while this
// replica leads; when it leads now, after their catch-up from the log,
// which Start waits for), the dispatcher and the stats loop, until Stop or
// until ctx ends: a SIGTERM stops the workers at once, during the start-up
// replay too, and Start then returns ctx's error. Stop waits for them;
// call it once Start was called, whatever Start returned.
func (s *Services) Start(ctx context.Context) error {
	runCtx, stop := context.WithCancel(ctx)
	s.stop = stop
	s.started.Store(true)
	s.led = s.Leader.Start(runCtx)
	if err := s.Consumers.Start(runCtx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if s.dispatch {
		s.dispatched = make(chan struct{})
		go func() {
			defer close(s.dispatched)
			if err := s.Dispatcher.Run(runCtx); err != nil {
				s.Logger.Error("dispatcher stopped", "err", err)
			}
		}()
	}
	s.statsDone = make(chan struct{})
	go func() {
		defer close(s.statsDone)
		s.Stats.Run(runCtx)
	}()
	// What another replica registers or descontinues (on SQLite, another
	// process never does, and the read is of a small table). Each is read
	// again at once when another replica says it changed something shared
	// (followShared), and every SharedRefresh regardless: a notification
	// may be lost with the listening connection.
	s.registryDone = make(chan struct{})
	go func() {
		defer close(s.registryDone)
		s.Registry.Follow(runCtx, SharedRefresh, func(err error) { s.Logger.Warn("registry not refreshed", "err", err) })
	}()
	s.sharedDone = make(chan struct{})
	go func() {
		defer close(s.sharedDone)
		s.followShared(runCtx)
	}()
	return nil
}

// followShared reads the shared state again each time another process
// says it changed (Remote, Wakeup.Shared), one read at a time: changes
// told during a read are seen by the next.
func (s *Services) followShared(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.sharedChanged:
		}
		if err := s.Registry.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.Logger.Warn("registry not refreshed", "err", err)
		}
		if err := s.Integrators.refresh(ctx); err != nil && ctx.Err() == nil {
			s.Logger.Warn("integrators not refreshed", "err", err)
		}
		s.Auth.forget()
	}
}

// Stop stops what Start started and waits for it, in this order: the
// elector (it resigns, so another replica takes the duties over at once,
// once the consumers saved their cursors), the stats loop, the dispatcher
// (in-flight deliveries finish or release their leases), then the
// consumers. The store stays open: its owner closes it after Stop.
func (s *Services) Stop() {
	s.stopOnce.Do(func() {
		if s.stop == nil {
			return
		}
		s.stop()
		if s.led != nil {
			<-s.led
		}
		if s.statsDone != nil {
			<-s.statsDone
		}
		if s.registryDone != nil {
			<-s.registryDone
			<-s.sharedDone
		}
		if s.dispatched != nil {
			<-s.dispatched
		}
		s.Consumers.Wait()
	})
}

// Ready reports whether the server can do its work (/readyz): the
// dispatcher runs, unless New was told not to run it, and the store takes
// writes.
func (s *Services) Ready(ctx context.Context) error {
	if s.dispatch && !s.Dispatcher.Running() {
		return errors.New("dispatcher not running")
	}
	return s.Store.Writable(ctx)
}
