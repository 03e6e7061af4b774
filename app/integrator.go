package app

import (
	"context"
	"errors"
	"fmt"
	"geohub/app/callback"
	"geohub/app/keys"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// APIKeyPrefix starts every integrator API key, which tells it from an
// operator token (gh_) at a glance.
const APIKeyPrefix = "gk_"

// Integrator is a CAD system's record (the cadastro, SPEC 6.1). Its signing
// secret and API key never appear here: they are shown once, at creation
// and rotation.
type Integrator struct {
	ID   string `json:"id"`
	Nome string `json:"nome"`
	// Entrega is how it receives: EntregaCallback or EntregaSessao.
	Entrega         string   `json:"entrega"`
	CallbackURL     string   `json:"callback_url"`
	HostsPermitidos []string `json:"hosts_permitidos"`
	Eventos         []string `json:"eventos"`
	Ativo           bool     `json:"ativo"`
	Backoff         []string `json:"backoff,omitempty"`
	MotivoInativo   string   `json:"motivo_inativo,omitempty"`
	// FalhandoDesde is the first failed attempt since the last success.
	FalhandoDesde *time.Time `json:"falhando_desde,omitempty"`
	// UltimoSucesso is the end of the last delivered attempt.
	UltimoSucesso *time.Time `json:"ultimo_sucesso,omitempty"`
	CriadoEm      time.Time  `json:"criado_em"`
	AtualizadoEm  time.Time  `json:"atualizado_em"`
	// Circuito is its circuit breaker now, as every replica shares it
	// (breaker.go), filled in by Get and List.
	Circuito *Circuit `json:"circuito,omitempty"`
	// Saude is the last hour of its deliveries and its backlog, filled in
	// by Get and List.
	Saude *Health `json:"saude,omitempty"`
	// CallbackRecusado says why this server refuses the stored callback
	// (see callback.Policy.Refusal): its deliveries fail until an admin
	// fixes the URL. Filled in by Get and List.
	CallbackRecusado string `json:"callback_recusado,omitempty"`
	// Sessao is a session integrator's last session (SPEC 8d), as every
	// replica sees it; nil before its first. Filled in by Get and List.
	Sessao *CADSessionStatus `json:"sessao,omitempty"`
}

// How an integrator receives its deliveries (SPEC 8d): posted to its
// callback URL, or over the websocket session it dials (GET /api/sessao).
const (
	EntregaCallback = "callback"
	EntregaSessao   = "sessao"
)

// NewIntegrator is the body of POST /api/integradores.
type NewIntegrator struct {
	Nome            string   `json:"nome"`
	Entrega         string   `json:"entrega"` // default EntregaCallback
	CallbackURL     string   `json:"callback_url"`
	HostsPermitidos []string `json:"hosts_permitidos"`
	Eventos         []string `json:"eventos"`
	Backoff         []string `json:"backoff"`
}

// IntegratorPatch is the body of PATCH /api/integradores/{id}; nil leaves a
// field as it is.
type IntegratorPatch struct {
	Ativo           *bool     `json:"ativo"`
	CallbackURL     *string   `json:"callback_url"`
	HostsPermitidos *[]string `json:"hosts_permitidos"`
	Eventos         *[]string `json:"eventos"`
	Backoff         *[]string `json:"backoff"`
	// Motivo says why Ativo false deactivates it, where not by a person
	// (the demo paused while serve runs without --demo); never read from
	// a request.
	Motivo string `json:"-"`
}

// CreatedIntegrator is the one answer that carries the secrets.
type CreatedIntegrator struct {
	Integrator
	Segredo string `json:"segredo"`
	APIKey  string `json:"api_key"`
}

// RotatedSecret answers a rotation: the new secret, once, and until when
// deliveries also carry the previous one's signature.
type RotatedSecret struct {
	Segredo           string    `json:"segredo"`
	AnteriorValidoAte time.Time `json:"anterior_valido_ate"`
}

// RotatedAPIKey answers an API key rotation: the new key, shown only this
// once. The previous key stops working at once.
type RotatedAPIKey struct {
	APIKey string `json:"api_key"`
}

// IntegratorSecrets are an integrator's sealed signing secrets.
type IntegratorSecrets struct {
	Atual, Anterior []byte
	AnteriorAte     time.Time
}

// IntegratorStore keeps integrators.
// Each change writes its audit entry (nil: none) in its own transaction.
type IntegratorStore interface {
	AuditLog
	CircuitStore
	CADSessionStore
	CadastroVersioner
	InsertIntegrator(ctx context.Context, in Integrator, sealedSecret []byte, apiKeyHash string, audit *AuditEntry) error
	Integrators(ctx context.Context) ([]Integrator, error)
	UpdateIntegrator(ctx context.Context, in Integrator, audit *AuditEntry) error
	SetIntegratorSecret(ctx context.Context, id string, s IntegratorSecrets, audit *AuditEntry) error
	// SetIntegratorAPIKey replaces the hash of the integrator's API key.
	SetIntegratorAPIKey(ctx context.Context, id, hash string, audit *AuditEntry) error
	IntegratorSecrets(ctx context.Context, id string) (IntegratorSecrets, error)
	IntegratorByAPIKey(ctx context.Context, hash string) (Integrator, error)
	Integrator(ctx context.Context, id string) (Integrator, error)
	// Backlogs counts the deliveries pending or in flight per integrator:
	// of the ids given, or of every integrator without ids.
	Backlogs(ctx context.Context, ids ...string) (map[string]int, error)
}

// SecretGrace is how long a rotated-out secret still signs deliveries.
const SecretGrace = 24 * time.Hour

// Backoff limits for an integrator's override (SPEC 6.4).
const (
	MaxBackoffSteps = 12
	MaxBackoffStep  = 10 * time.Hour
)

var eventPattern = regexp.MustCompile(`^(\*|[a-z][a-z0-9-]*:(\*|[a-z][a-z0-9-]*))$`)

// Integrators manages the cadastro and keeps a snapshot in memory: routing
// reads it on every publish, and delivery opens each integrator's secrets
// once. A change made by another replica (an integrator deactivated or
// edited, a secret rotated) reaches the snapshot when Follow next sees the
// store's cadastro version move: within SharedRefresh. An API key replaced
// anywhere stops at once everywhere: Authenticate reads the store.
type Integrators struct {
	Store IntegratorStore
	// CADSessions are the sessions attached to this process, whose
	// unanswered deliveries Get and List count live; Janela the window
	// they are shown against (the dispatcher's PerIntegrator).
	CADSessions *CADSessions
	Janela      int
	Sealer      *keys.Sealer
	Policy      callback.Policy
	Now         func() time.Time

	writeMu  sync.Mutex // serialises read-modify-write changes of the cadastro
	circuits circuits   // each integrator's breaker, fed by the dispatcher
	healths  healths    // each integrator's last hour, fed by the dispatcher
	mu       sync.RWMutex
	all      []Integrator
	byID     map[string]Integrator  // all by id: the dispatcher looks one up per integrator, per loop
	secrets  map[string]openSecrets // opened secrets, per integrator
	// rotations counts secret rotations, so that secrets read before one
	// are not cached after it.
	rotations uint64
	version   int64 // the store's cadastro version the snapshot was read at
	// circuitChanged is told of circuits opened or closed here because
	// another process changed them (the dispatcher's, set by Follow).
	circuitChanged func(CircuitChange)
}

type openSecrets struct {
	current, previous []byte
	previousUntil     time.Time
}

// Load reads every integrator into the snapshot.
func (s *Integrators) Load(ctx context.Context) error {
	// The version first: a change committed between the two reads makes
	// the next check read everything again, rather than be missed.
	v, err := s.Store.CadastroVersion(ctx)
	if err != nil {
		return err
	}
	all, err := s.Store.Integrators(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	// Two loads at once (Follow's and a change's) may end in either
	// order: the one that read an older version must not put its older
	// snapshot back. One of the same version may hold less than the other,
	// but then a later change moved the version, and the next check loads
	// again.
	if v > s.version {
		// A secret rotated elsewhere: sign with the new one from now on,
		// whichever read of the moved version comes first (a publish's
		// reroute, a notification, the poll).
		clear(s.secrets)
		s.rotations++
	}
	if v >= s.version {
		s.all, s.version = all, v
		s.byID = make(map[string]Integrator, len(all))
		for _, in := range all {
			s.byID[in.ID] = in
		}
	}
	s.mu.Unlock()
	s.healths.mu.Lock()
	if s.healths.started.IsZero() {
		s.healths.started = s.Now()
	}
	s.healths.mu.Unlock()
	return nil
}

// Follow keeps this process in step with what other replicas change, every
// interval until ctx ends: the snapshot and the opened secrets are read
// again when the cadastro's version moved, and the circuits other
// processes opened or closed are adopted, each told to changed. A failed
// read is told to failed and tried again at the next tick.
func (s *Integrators) Follow(ctx context.Context, interval time.Duration, changed func(CircuitChange), failed func(error)) {
	s.mu.Lock()
	s.circuitChanged = changed
	s.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh is one step of Follow.
func (s *Integrators) refresh(ctx context.Context) error {
	v, err := s.Store.CadastroVersion(ctx)
	if err != nil {
		return err
	}
	s.mu.RLock()
	stale := v > s.version
	s.mu.RUnlock()
	if stale {
		if err := s.Load(ctx); err != nil {
			return err
		}
	}
	return s.syncCircuits(ctx)
}

// syncCircuits adopts the circuits other processes wrote.
func (s *Integrators) syncCircuits(ctx context.Context) error {
	rows, err := s.Store.Circuits(ctx)
	if err != nil {
		return err
	}
	changes := s.circuits.adopt(rows, s.Now())
	s.mu.RLock()
	changed := s.circuitChanged
	s.mu.RUnlock()
	if changed != nil {
		for _, c := range changes {
			changed(c)
		}
	}
	return nil
}

// saveCircuits writes circuits that opened or closed here (circuits.take);
// on failure they wait for the next write.
func (s *Integrators) saveCircuits(ctx context.Context, cs []StoredCircuit) error {
	if err := s.Store.SaveCircuits(ctx, cs); err != nil {
		s.circuits.putBack(cs)
		return err
	}
	return nil
}

// List returns every integrator, ordered by name, as stored now (the
// snapshot may lag on the failing period the dispatcher records), with the
// circuit every replica shares.
func (s *Integrators) List(ctx context.Context) ([]Integrator, error) {
	if err := s.syncCircuits(ctx); err != nil {
		return nil, err
	}
	all, err := s.Store.Integrators(ctx)
	if err != nil {
		return nil, err
	}
	if all == nil {
		all = []Integrator{}
	}
	backlogs, err := s.Store.Backlogs(ctx)
	if err != nil {
		return nil, err
	}
	records, err := s.Store.CADSessionRecords(ctx)
	if err != nil {
		return nil, err
	}
	sessions := make(map[string]CADSessionRecord, len(records))
	for _, r := range records {
		sessions[r.Integrador] = r
	}
	for i := range all {
		s.fillState(&all[i], backlogs[all[i].ID])
		if r, ok := sessions[all[i].ID]; ok && all[i].Entrega == EntregaSessao {
			all[i].Sessao = s.sessionStatus(r)
		}
	}
	return all, nil
}

func (s *Integrators) sessionStatus(r CADSessionRecord) *CADSessionStatus {
	var here *CADSession
	if s.CADSessions != nil {
		here = s.CADSessions.Get(r.Integrador)
	}
	return sessionStatus(r, here, s.Now(), s.Janela)
}

// fillState adds what is not stored: the circuit and the last hour.
func (s *Integrators) fillState(in *Integrator, backlog int) {
	now := s.Now()
	c := s.circuits.circuit(in.ID, now)
	h := s.healths.health(in.ID, now)
	h.Pendentes = backlog
	in.Circuito, in.Saude = &c, &h
	in.CallbackRecusado = s.refusal(*in)
}

// refusal is why this server refuses in's stored callback now; a session
// integrator has none to refuse.
func (s *Integrators) refusal(in Integrator) string {
	if in.Entrega == EntregaSessao {
		return ""
	}
	return s.Policy.Refusal(in.CallbackURL, in.HostsPermitidos)
}

// RefusedCallbacks lists the active integrators whose stored callback this
// server refuses, for the start log: a callback accepted under
// --insecure-callbacks, or before the address table grew.
func (s *Integrators) RefusedCallbacks() []Integrator {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Integrator
	for _, in := range s.all {
		if why := s.refusal(in); in.Ativo && why != "" {
			in.CallbackRecusado = why
			out = append(out, in)
		}
	}
	return out
}

// Get returns one integrator as stored now, or ENotFound.
func (s *Integrators) Get(ctx context.Context, id string) (Integrator, error) {
	if err := s.syncCircuits(ctx); err != nil {
		return Integrator{}, err
	}
	in, err := s.Store.Integrator(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Integrator{}, Errorf(ENotFound, "integrador não encontrado")
	}
	if err != nil {
		return Integrator{}, err
	}
	backlogs, err := s.Store.Backlogs(ctx, id)
	if err != nil {
		return Integrator{}, err
	}
	s.fillState(&in, backlogs[id])
	if in.Entrega == EntregaSessao {
		r, ok, err := s.Store.CADSessionRecord(ctx, id)
		if err != nil {
			return Integrator{}, err
		}
		if ok {
			in.Sessao = s.sessionStatus(r)
		}
	}
	return in, nil
}

// activeIDs lists the active integrators of the snapshot, in a stable order.
func (s *Integrators) activeIDs() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]string, 0, len(s.all))
	for _, in := range s.all {
		if in.Ativo {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

// sessionIntegrators lists the active session integrators of the
// snapshot.
func (s *Integrators) sessionIntegrators() []Integrator {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Integrator
	for _, in := range s.all {
		if in.Ativo && in.Entrega == EntregaSessao {
			out = append(out, in)
		}
	}
	return out
}

// cached returns one integrator from the snapshot that routing and delivery
// read on their hot paths.
func (s *Integrators) cached(id string) (Integrator, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if in, ok := s.byID[id]; ok {
		return in, nil
	}
	return Integrator{}, Errorf(ENotFound, "integrador não encontrado")
}

// Create validates and stores a new integrator; its secret and API key are
// in the answer and nowhere else in clear.
func (s *Integrators) Create(ctx context.Context, req NewIntegrator) (_ CreatedIntegrator, err error) {
	audit := NewAudit(ctx, AcaoIntegradorCriar, AuditTarget{Tipo: "integrador", Nome: strings.TrimSpace(req.Nome)})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	if req.Eventos == nil {
		req.Eventos = []string{"*"}
	}
	now := s.Now().UTC()
	if req.Entrega == "" {
		req.Entrega = EntregaCallback
	}
	in := Integrator{ID: uuid.Must(uuid.NewV7()).String(), Nome: strings.TrimSpace(req.Nome), Entrega: req.Entrega, CallbackURL: req.CallbackURL,
		HostsPermitidos: req.HostsPermitidos, Eventos: req.Eventos, Backoff: req.Backoff, Ativo: true,
		CriadoEm: now, AtualizadoEm: now}
	if err := s.validate(ctx, in, true); err != nil {
		return CreatedIntegrator{}, err
	}
	secret := NewSecret()
	apiKey := APIKeyPrefix + randomString(32)
	audit.Alvo.ID = in.ID
	// The cadastro as created; the secret and the API key are not fields
	// of it, and appear nowhere in the trail.
	audit.Campos = []AuditField{Set("nome", in.Nome), Set("entrega", in.Entrega), Set("callback_url", in.CallbackURL),
		Set("hosts_permitidos", in.HostsPermitidos), Set("eventos", in.Eventos), Set("ativo", in.Ativo)}
	if len(in.Backoff) > 0 {
		audit.Campos = append(audit.Campos, Set("backoff", in.Backoff))
	}
	if err := s.Store.InsertIntegrator(ctx, in, s.Sealer.Seal([]byte(secret), in.ID), hashToken(apiKey), audit); err != nil {
		return CreatedIntegrator{}, err
	}
	s.fillState(&in, 0)
	return CreatedIntegrator{Integrator: in, Segredo: secret, APIKey: apiKey}, s.Load(ctx)
}

// Update applies a patch; a changed callback URL or allowlist is checked again.
func (s *Integrators) Update(ctx context.Context, id string, p IntegratorPatch) (_ Integrator, err error) {
	audit := NewAudit(ctx, AcaoIntegradorEditar, AuditTarget{Tipo: "integrador", ID: id})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	in, err := s.Get(ctx, id)
	if err != nil {
		return Integrator{}, err
	}
	old := in
	audit.Alvo.Nome = in.Nome
	if p.Ativo != nil {
		if *p.Ativo && !in.Ativo {
			// Reactivating is a fresh start: the failing period that may
			// have disabled it must not disable it again at once.
			in.FalhandoDesde = nil
		}
		in.Ativo = *p.Ativo
		switch {
		case in.Ativo:
			in.MotivoInativo = ""
		case p.Motivo != "":
			in.MotivoInativo = p.Motivo
		case in.MotivoInativo == "":
			in.MotivoInativo = "desativado por um operador"
		}
	}
	recheck := p.CallbackURL != nil || p.HostsPermitidos != nil
	if p.CallbackURL != nil {
		in.CallbackURL = *p.CallbackURL
	}
	if p.HostsPermitidos != nil {
		in.HostsPermitidos = *p.HostsPermitidos
	}
	if p.Eventos != nil {
		in.Eventos = *p.Eventos
	}
	if p.Backoff != nil {
		in.Backoff = *p.Backoff
	}
	in.AtualizadoEm = s.Now().UTC()
	// The callback is resolved again only when it changed: an operator must
	// be able to disable an integrator whose host stopped resolving.
	audit.Acao, audit.Campos = integratorChanges(old, in)
	if err := s.validate(ctx, in, recheck); err != nil {
		return Integrator{}, err
	}
	if err := s.Store.UpdateIntegrator(ctx, in, audit); err != nil {
		return Integrator{}, err
	}
	c := s.circuits.circuit(id, s.Now())
	in.Circuito = &c
	return in, s.Load(ctx)
}

// RotateSecret issues a new signing secret; the current one keeps signing
// (in X-Geohub-Assinatura-Anterior) for SecretGrace.
func (s *Integrators) RotateSecret(ctx context.Context, id string) (_ RotatedSecret, err error) {
	audit := NewAudit(ctx, AcaoIntegradorSegredoRotacionar, AuditTarget{Tipo: "integrador", ID: id})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	// Read-modify-write: two rotations at once would both keep the same
	// previous secret, and one of the new ones would sign nothing.
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	in, err := s.Get(ctx, id)
	if err != nil {
		return RotatedSecret{}, err
	}
	audit.Alvo.Nome = in.Nome
	cur, err := s.Store.IntegratorSecrets(ctx, id)
	if err != nil {
		return RotatedSecret{}, err
	}
	secret := NewSecret()
	until := s.Now().UTC().Add(SecretGrace)
	next := IntegratorSecrets{Atual: s.Sealer.Seal([]byte(secret), id), Anterior: cur.Atual, AnteriorAte: until}
	// That it rotated, and until when the previous one signs: never either secret.
	audit.Campos = []AuditField{Set("anterior_valido_ate", until.Truncate(time.Millisecond))}
	if err := s.Store.SetIntegratorSecret(ctx, id, next, audit); err != nil {
		return RotatedSecret{}, err
	}
	s.mu.Lock()
	delete(s.secrets, id)
	s.rotations++
	s.mu.Unlock()
	return RotatedSecret{Segredo: secret, AnteriorValidoAte: until}, nil
}

// RotateAPIKey gives the integrator a new API key. Unlike the signing
// secret it has no grace period: a key is rotated because it leaked or a
// person left, and then the old one must stop at once. Commands with it get
// 401 until the CAD uses the new one; deliveries are not affected.
func (s *Integrators) RotateAPIKey(ctx context.Context, id string) (_ RotatedAPIKey, err error) {
	audit := NewAudit(ctx, AcaoIntegradorAPIKeyRotacionar, AuditTarget{Tipo: "integrador", ID: id})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	// Serialised with the other cadastro changes: two rotations at once
	// run one after the other, and the key shown last is the one that works.
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	in, err := s.Get(ctx, id)
	if err != nil {
		return RotatedAPIKey{}, err
	}
	audit.Alvo.Nome = in.Nome
	key := APIKeyPrefix + randomString(32)
	err = s.Store.SetIntegratorAPIKey(ctx, id, hashToken(key), audit)
	if errors.Is(err, ErrNotFound) {
		return RotatedAPIKey{}, Errorf(ENotFound, "integrador não encontrado")
	}
	if err != nil {
		return RotatedAPIKey{}, err
	}
	return RotatedAPIKey{APIKey: key}, nil
}

// SecretLibraryReady says whether the integrator's current secret is one
// Standard Webhooks libraries accept (LibraryReady).
func (s *Integrators) SecretLibraryReady(ctx context.Context, id string) (bool, error) {
	current, _, err := s.Secrets(ctx, id)
	return LibraryReady(current), err
}

// Secrets returns the secrets that sign a delivery now: the current one and,
// during a rotation's grace period, the previous one.
func (s *Integrators) Secrets(ctx context.Context, id string) (current, previous []byte, err error) {
	s.mu.RLock()
	o, ok := s.secrets[id]
	epoch := s.rotations
	s.mu.RUnlock()
	if !ok {
		// Opened once per process: a delivery would otherwise pay a read
		// and a decryption. Rotation replaces the entry, here at once, on
		// other replicas when Follow sees the cadastro change.
		sealed, err := s.Store.IntegratorSecrets(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if o.current, err = s.Sealer.Open(sealed.Atual, id); err != nil {
			return nil, nil, fmt.Errorf("open secret of integrator %s: %w", id, err)
		}
		if sealed.Anterior != nil {
			if o.previous, err = s.Sealer.Open(sealed.Anterior, id); err != nil {
				return nil, nil, fmt.Errorf("open previous secret of integrator %s: %w", id, err)
			}
			o.previousUntil = sealed.AnteriorAte
		}
		s.mu.Lock()
		if s.secrets == nil {
			s.secrets = map[string]openSecrets{}
		}
		// A rotation that committed while these were read may have cleared
		// the entry before it was written: caching what was read then would
		// sign with the old secret alone until the next restart.
		if s.rotations == epoch {
			s.secrets[id] = o
		}
		s.mu.Unlock()
	}
	if o.previous != nil && s.Now().Before(o.previousUntil) {
		return o.current, o.previous, nil
	}
	return o.current, nil, nil
}

// reactivate makes an integrator active after a successful verification,
// ending its failing period. audit is the verification's entry: it gets
// the fields the success changed and commits with them.
func (s *Integrators) reactivate(ctx context.Context, id string, audit *AuditEntry) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	in, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	old := in
	in.Ativo, in.MotivoInativo, in.FalhandoDesde, in.AtualizadoEm = true, "", nil, s.Now().UTC()
	_, audit.Campos = integratorChanges(old, in)
	audit.Alvo.Nome = in.Nome
	if err := s.Store.UpdateIntegrator(ctx, in, audit); err != nil {
		return err
	}
	return s.Load(ctx)
}

// Disable sets an integrator inactive with the reason (auto-disable: the
// server's own change, recorded as the system's unless ctx says otherwise).
func (s *Integrators) Disable(ctx context.Context, id, reason string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	in, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if !in.Ativo {
		// Another replica (or an operator) was first: any replica that
		// sees the failing period may disable it, and one does.
		return nil
	}
	old := in
	in.Ativo, in.MotivoInativo, in.AtualizadoEm = false, reason, s.Now().UTC()
	audit := NewAudit(ctx, AcaoIntegradorDesativar, AuditTarget{Tipo: "integrador", ID: id, Nome: in.Nome})
	_, audit.Campos = integratorChanges(old, in)
	audit.Detalhe = reason
	if err := s.Store.UpdateIntegrator(ctx, in, audit); err != nil {
		return err
	}
	return s.Load(ctx)
}

// integratorChanges names an update for the trail: the fields that differ
// between old and new, and the action, which is ativar or desativar when
// that is all that changed.
func integratorChanges(old, new Integrator) (string, []AuditField) {
	var out []AuditField
	if old.Ativo != new.Ativo {
		out = append(out, Changed("ativo", old.Ativo, new.Ativo))
	}
	if old.CallbackURL != new.CallbackURL {
		out = append(out, Changed("callback_url", old.CallbackURL, new.CallbackURL))
	}
	for _, f := range []struct {
		name     string
		old, new []string
	}{{"hosts_permitidos", old.HostsPermitidos, new.HostsPermitidos}, {"eventos", old.Eventos, new.Eventos},
		{"backoff", old.Backoff, new.Backoff}} {
		if !slices.Equal(f.old, f.new) {
			out = append(out, Changed(f.name, f.old, f.new))
		}
	}
	acao := AcaoIntegradorEditar
	if len(out) == 1 && out[0].Campo == "ativo" {
		acao = AcaoIntegradorDesativar
		if new.Ativo {
			acao = AcaoIntegradorAtivar
		}
	}
	return acao, out
}

// Authenticate resolves an integrator's API key (its Bearer for commands).
func (s *Integrators) Authenticate(ctx context.Context, apiKey string) (Integrator, error) {
	if !strings.HasPrefix(apiKey, APIKeyPrefix) {
		return Integrator{}, Errorf(EUnauthorized, "chave de API inválida")
	}
	in, err := s.Store.IntegratorByAPIKey(ctx, hashToken(apiKey))
	if errors.Is(err, ErrNotFound) {
		return Integrator{}, Errorf(EUnauthorized, "chave de API inválida")
	}
	return in, err
}

func (s *Integrators) validate(ctx context.Context, in Integrator, checkCallback bool) error {
	// Every finding at once: an operator fixing a form field by field
	// should not meet a new complaint after each fix.
	var bad []Detail
	if in.Nome == "" || len(in.Nome) > 100 {
		bad = append(bad, Detail{"/nome", "obrigatório, até 100 caracteres"})
	}
	switch in.Entrega {
	case EntregaCallback:
	case EntregaSessao:
		// The CAD dials in: nothing to post to, no host to allow.
		if in.CallbackURL != "" {
			bad = append(bad, Detail{"/callback_url", "uma integração por sessão não tem callback_url"})
		}
		if len(in.HostsPermitidos) > 0 {
			bad = append(bad, Detail{"/hosts_permitidos", "uma integração por sessão não tem hosts_permitidos"})
		}
		checkCallback = false
	default:
		// Whether a callback is due depends on the mode: judge it once
		// the mode is one.
		bad = append(bad, Detail{"/entrega", "deve ser callback ou sessao"})
		checkCallback = false
	}
	before := len(bad)
	if in.Entrega == EntregaCallback && len(in.HostsPermitidos) == 0 {
		bad = append(bad, Detail{"/hosts_permitidos", "informe ao menos um host"})
	}
	for i, h := range in.HostsPermitidos {
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			bad = append(bad, Detail{fmt.Sprintf("/hosts_permitidos/%d", i), "deve ser um nome de host (ex.: cad.exemplo.gov.br ou *.exemplo.gov.br)"})
		}
	}
	hostsOK := len(bad) == before
	if checkCallback {
		why := s.Policy.FormRefusal(in.CallbackURL)
		if why == "" && hostsOK {
			why = s.Policy.Check(ctx, in.CallbackURL, in.HostsPermitidos)
		}
		if why != "" {
			bad = append(bad, Detail{"/callback_url", why})
		}
	}
	for i, e := range in.Eventos {
		if !eventPattern.MatchString(e) {
			bad = append(bad, Detail{fmt.Sprintf("/eventos/%d", i), "padrão inválido: use *, família:* ou família:nome"})
		}
	}
	if _, err := ParseBackoff(in.Backoff); err != nil {
		bad = append(bad, err.(*Error).Details...)
	}
	if len(bad) > 0 {
		return &Error{Code: EInvalid, Message: "cadastro de integrador inválido", Details: bad}
	}
	return nil
}

// ParseBackoff reads an override: the waits between attempts, at most 12
// steps of at most 10 h each. Empty means the default schedule.
func ParseBackoff(steps []string) ([]time.Duration, error) {
	if len(steps) > MaxBackoffSteps {
		return nil, &Error{Code: EInvalid, Message: "backoff inválido",
			Details: []Detail{{"/backoff", fmt.Sprintf("no máximo %d passos", MaxBackoffSteps)}}}
	}
	out := make([]time.Duration, 0, len(steps))
	var bad []Detail
	for i, s := range steps {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second || d > MaxBackoffStep {
			bad = append(bad, Detail{fmt.Sprintf("/backoff/%d", i), "deve ser um intervalo entre 1 s e 10 h, escrito como 30s, 5m ou 1h30m"})
			continue
		}
		out = append(out, d)
	}
	if len(bad) > 0 {
		return nil, &Error{Code: EInvalid, Message: "backoff inválido", Details: bad}
	}
	return out, nil
}

// Wants reports whether the integrator's eventos patterns admit tipo.
func (in Integrator) Wants(tipo string) bool {
	family, _, _ := strings.Cut(tipo, ":")
	for _, p := range in.Eventos {
		if p == "*" || p == tipo || p == family+":*" {
			return true
		}
	}
	return false
}
