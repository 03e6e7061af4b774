package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// SessionStore keeps console sessions and operator accounts.
// Each change writes its audit entry (nil: none) in its own transaction.
type SessionStore interface {
	InsertSession(ctx context.Context, hash, operadorID string, criado, expira time.Time, audit *AuditEntry) error
	// SessionOperator returns the operator of a session that has not expired.
	SessionOperator(ctx context.Context, hash string, now time.Time) (Operator, error)
	// ExtendSession moves a live session's expiry to now+idle, never past
	// its creation plus ttl, and only when that moves it by more than a
	// minute: one write a minute at most, however busy the session.
	ExtendSession(ctx context.Context, hash string, now time.Time, idle, ttl time.Duration) error
	DeleteSession(ctx context.Context, hash string, audit *AuditEntry) error
	// SetOperatorPassword changes a password and ends every other session
	// of the operator but keepSession.
	SetOperatorPassword(ctx context.Context, operadorID, senhaHash, keepSession string, audit *AuditEntry) error
	// ResetOperatorPassword sets someone's password and ends all their
	// sessions, under the same condition on actorID as InsertOperator.
	ResetOperatorPassword(ctx context.Context, actorID, operadorID, senhaHash string, audit *AuditEntry) error
	Operators(ctx context.Context) ([]Operator, error)
	// SetOperatorActive enables or disables an account and ends its
	// sessions, if actorID is an active admin when it commits (EForbidden
	// otherwise, and for ""). ErrNotFound for an unknown id.
	SetOperatorActive(ctx context.Context, actorID, operadorID string, ativo bool, audit *AuditEntry) error
	// SetOperatorRole changes an account's role, under the same condition
	// on actorID as SetOperatorActive. The entry's papel field gets the
	// role it replaced, read in the same transaction.
	SetOperatorRole(ctx context.Context, actorID, operadorID string, papel Papel, audit *AuditEntry) error
}

// Console login limits: after loginMaxFailures failed attempts within
// loginWindow, from one client address or for one login, further attempts
// are refused until the window passes.
const (
	loginMaxFailures = 5
	loginWindow      = 15 * time.Minute
	// LoginsPerWindow bounds the successful logins of one account within
	// loginWindow: each is a live session and an audit row, and a script
	// with the password could otherwise make thousands (issue 26, L8). A
	// person signs in a few times a shift.
	LoginsPerWindow = 20
	// DefaultSessionTTL is a working shift: a session ends this long after
	// its login.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultSessionIdle ends a session that made no request for this
	// long (issue 26, I7): a console left open on an unattended desk.
	DefaultSessionIdle = 30 * time.Minute
	// MinPasswordLen is the shortest password an operator may choose.
	MinPasswordLen = 10
)

const sessionPrefix = "gs_"

// Sessions is the console's operator authentication: login with a
// rate limit, sessions stored as hashes, CSRF tokens bound to the session,
// password changes and operator accounts.
type Sessions struct {
	Store interface {
		AuthStore
		SessionStore
		LoginLimitStore
	}
	Now func() time.Time
	// CSRFKey signs the CSRF token of each session (see keys.CSRF).
	CSRFKey []byte
	// TTL is how long a session lasts; default DefaultSessionTTL.
	TTL time.Duration
	// Idle is how long a session lasts without a request (Resolve);
	// default DefaultSessionIdle.
	Idle time.Duration
	// PasswordCost is bcrypt's cost for new passwords (0: the default).
	PasswordCost int
	Logger       *slog.Logger // what could not be written (a session's expiry)

	extended  sync.Map // session hash → when Resolve last extended it
	extendedN atomic.Int64
}

// errBadLogin is the one answer to a wrong login or password: no user
// enumeration.
var errBadLogin = Errorf(EUnauthorized, "usuário ou senha incorretos")

// Login checks a login and password and opens a session, returning the
// cookie's secret. client identifies the caller (its address) for the rate
// limit.
func (s *Sessions) Login(ctx context.Context, login, senha, client string) (string, Operator, error) {
	now := s.Now()
	keys := []string{"ip:" + limitedClient(client)}
	// Only a login that could exist gets its own counter: arbitrary strings
	// would let anyone grow the table.
	if loginPattern.MatchString(login) {
		keys = append(keys, "login:"+login)
	}
	// The attempt counts before the slow bcrypt comparison, so concurrent
	// guesses cannot all slip in before the first failure is recorded; a
	// success gives the login's slot back.
	// A rate-limited attempt is not recorded: it checked no password, and
	// anyone could fill the trail with them. Every attempt that did is.
	attempt, wait, err := s.reserve(ctx, keys, now)
	if err != nil {
		return "", Operator{}, err
	}
	if wait > 0 {
		return "", Operator{}, &Error{Code: ERateLimited, RetryAfter: wait,
			Message: "muitas tentativas de entrada; tente de novo em " + minutesText(wait)}
	}
	o, hash, err := s.Store.OperatorByLogin(ctx, login)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "", Operator{}, err
	}
	if err != nil {
		spendPasswordCheck(senha, s.PasswordCost)
		// What was typed is not kept: a login that names no account may
		// well be a password typed in the wrong field.
		s.loginFailed(ctx, Actor{Tipo: ActorAnonimo, Endereco: client}, "usuário desconhecido")
		return "", Operator{}, errBadLogin
	}
	who := Actor{Tipo: ActorOperador, ID: o.ID, Nome: o.Login, Papel: o.Papel, Endereco: client}
	if !passwordMatches(hash, senha) {
		s.loginFailed(ctx, who, "senha incorreta")
		return "", Operator{}, errBadLogin
	}
	// The right password: no guess to count.
	if err := s.release(ctx, attempt, keys); err != nil {
		return "", Operator{}, err
	}
	if _, wait, err := s.Store.ReserveLoginAttempt(ctx, []string{"entrada:" + o.ID}, now, loginWindow, LoginsPerWindow); err != nil {
		return "", Operator{}, err
	} else if wait > 0 {
		return "", Operator{}, &Error{Code: ERateLimited, RetryAfter: wait,
			Message: "muitas entradas nesta conta em pouco tempo; tente de novo em " + minutesText(wait)}
	}
	if !o.Ativo {
		s.loginFailed(ctx, who, "conta desativada")
		// Said only to whoever knows the password: the owner, who should
		// know why the door is closed.
		return "", Operator{}, Errorf(EUnauthorized, "esta conta está desativada; fale com um administrador")
	}
	secret := sessionPrefix + randomString(32)
	idle, ttl := s.lifetimes()
	audit := NewAudit(WithActor(ctx, who), AcaoLogin, AuditTarget{Tipo: "operador", ID: o.ID, Nome: o.Login})
	if err := s.Store.InsertSession(ctx, hashToken(secret), o.ID, now.UTC(), now.Add(min(idle, ttl)).UTC(), audit); err != nil {
		return "", Operator{}, err
	}
	return secret, o, nil
}

// limitedClient is the unit the per-address login limit counts: an IPv4
// address (also written IPv4-mapped), or an IPv6 client's /64, since one
// subscriber usually gets a whole /64 and could otherwise take a fresh
// address, and a fresh counter, for every guess. Anything else (a Unix
// socket's peer) counts as written.
func limitedClient(client string) string {
	a, err := netip.ParseAddr(client)
	if err != nil {
		return client
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// loginFailed records a failed login on its own: there is no change to
// join. Best effort, as every refusal (see recordRefusal).
func (s *Sessions) loginFailed(ctx context.Context, who Actor, why string) {
	e := NewAudit(WithActor(ctx, who), AcaoLoginFalhou, AuditTarget{Tipo: "operador", ID: who.ID, Nome: who.Nome})
	e.Resultado, e.Codigo, e.Detalhe = AuditRecusado, EUnauthorized, why
	s.Store.AppendAudit(context.WithoutCancel(ctx), *e)
}

// reserve counts an attempt for every key, unless one of them already holds
// loginMaxFailures attempts within the window: then it says how long to
// wait. The counts are the database's, so every replica behind the load
// balancer counts the same attempts: failures spread over replicas lock
// the login as they would on one.
func (s *Sessions) reserve(ctx context.Context, keys []string, now time.Time) (string, time.Duration, error) {
	return s.Store.ReserveLoginAttempt(ctx, keys, now, loginWindow, loginMaxFailures)
}

// release gives back the attempt reserve counted for a login that
// succeeded: the address keeps its earlier failures, the login's are
// forgiven.
func (s *Sessions) release(ctx context.Context, id string, keys []string) error {
	var forgive []string
	for _, k := range keys {
		if strings.HasPrefix(k, "login:") {
			forgive = append(forgive, k)
		}
	}
	// Not the caller's context: a client that hangs up right after the
	// right password must not leave the guess counted.
	return s.Store.ReleaseLoginAttempt(context.WithoutCancel(ctx), id, forgive)
}

// Resolve returns the operator of a live session.
func (s *Sessions) Resolve(ctx context.Context, secret string) (Operator, error) {
	o, err := s.Check(ctx, secret)
	if err != nil {
		return o, err
	}
	// At most one write a minute per session from this process: the store
	// skips a move of less than a minute, this spares it the transaction.
	now, hash := s.Now().UTC(), hashToken(secret)
	if last, ok := s.extended.Load(hash); ok && now.Sub(last.(time.Time)) < time.Minute {
		return o, nil
	}
	if s.extendedN.Add(1)%1024 == 0 {
		s.extended.Range(func(k, v any) bool {
			if now.Sub(v.(time.Time)) >= time.Minute {
				s.extended.Delete(k)
			}
			return true
		})
	}
	idle, ttl := s.lifetimes()
	if err := s.Store.ExtendSession(ctx, hash, now, idle, ttl); err != nil {
		// The session is valid: a store that cannot write now (busy,
		// read-only during a failover) must not turn reads into errors.
		// The next request tries again.
		if s.Logger != nil {
			s.Logger.Warn("extend a console session", "err", err)
		}
		return o, nil
	}
	s.extended.Store(hash, now)
	return o, nil
}

// Check is Resolve without counting as activity: what a live page asks
// every few seconds, which a person away from the desk does not do.
func (s *Sessions) Check(ctx context.Context, secret string) (Operator, error) {
	if len(secret) < len(sessionPrefix) || secret[:len(sessionPrefix)] != sessionPrefix {
		return Operator{}, Errorf(EUnauthorized, "sessão inválida")
	}
	o, err := s.Store.SessionOperator(ctx, hashToken(secret), s.Now().UTC())
	if errors.Is(err, ErrNotFound) {
		return Operator{}, Errorf(EUnauthorized, "sessão expirada")
	}
	return o, err
}

func (s *Sessions) lifetimes() (idle, ttl time.Duration) {
	idle, ttl = s.Idle, s.TTL
	if idle <= 0 {
		idle = DefaultSessionIdle
	}
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return idle, ttl
}

// Logout ends a session. Its entry names the session's operator, who may
// not be ctx's actor: a new login ends the session the browser held before.
func (s *Sessions) Logout(ctx context.Context, secret string) error {
	hash := hashToken(secret)
	var audit *AuditEntry
	o, err := s.Store.SessionOperator(ctx, hash, s.Now().UTC())
	switch {
	case err == nil:
		who := Actor{Tipo: ActorOperador, ID: o.ID, Nome: o.Login, Papel: o.Papel, Endereco: ActorOf(ctx).Endereco}
		audit = NewAudit(WithActor(ctx, who), AcaoLogout, AuditTarget{Tipo: "operador", ID: o.ID, Nome: o.Login})
	case !errors.Is(err, ErrNotFound):
		return err
	}
	// A session already gone is deleted again (a no-op) and recorded by no one.
	return s.Store.DeleteSession(ctx, hash, audit)
}

// CSRF returns the session's CSRF token: an HMAC of its secret, so it needs
// no storage and dies with the session.
func (s *Sessions) CSRF(secret string) string {
	m := hmac.New(sha256.New, s.CSRFKey)
	m.Write([]byte(secret))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckCSRF compares a form's token with the session's in constant time.
func (s *Sessions) CheckCSRF(secret, token string) bool {
	return token != "" && hmac.Equal([]byte(s.CSRF(secret)), []byte(token))
}

// ChangePassword sets a new password after checking the current one, and
// ends the operator's other sessions.
func (s *Sessions) ChangePassword(ctx context.Context, o Operator, secret, atual, nova string) (err error) {
	audit := NewAudit(ctx, AcaoOperadorSenhaTrocar, AuditTarget{Tipo: "operador", ID: o.ID, Nome: o.Login})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	// The current password is the same secret a login guesses: a wrong one
	// counts against the same limit, so a session left open is no way
	// around it.
	now := s.Now()
	keys := []string{"login:" + o.Login}
	attempt, wait, err := s.reserve(ctx, keys, now)
	if err != nil {
		return err
	}
	if wait > 0 {
		return &Error{Code: ERateLimited, RetryAfter: wait,
			Message: "muitas tentativas com a senha atual errada; tente de novo em " + minutesText(wait)}
	}
	_, hash, err := s.Store.OperatorByLogin(ctx, o.Login)
	if err != nil {
		return err
	}
	weak := CheckPassword("/nova", nova)
	if !passwordMatches(hash, atual) {
		bad := []Detail{{"/atual", "senha atual incorreta"}}
		if weak != nil {
			bad = append(bad, weak.(*Error).Details...)
		}
		return &Error{Code: EInvalid, Message: "senha atual incorreta", Details: bad}
	}
	if err := s.release(ctx, attempt, keys); err != nil {
		return err
	}
	if weak != nil {
		return weak
	}
	newHash, err := hashPassword(nova, s.PasswordCost)
	if err != nil {
		return err
	}
	return s.Store.SetOperatorPassword(ctx, o.ID, string(newHash), hashToken(secret), audit)
}

// ResetPassword gives the account o a new random password, returned once,
// and ends all its sessions: the way back in for someone who forgot theirs,
// given by an admin on /operadores (actorID, who must still be an active
// admin when it commits) or by whoever runs the server (geohub operator
// reset-password, actorID ""). The person should change it at
// /conta/senha. Failed logins counted against the account are forgiven.
func (s *Sessions) ResetPassword(ctx context.Context, actorID string, o Operator) (_ string, err error) {
	audit := NewAudit(ctx, AcaoOperadorSenhaRedefinir, AuditTarget{Tipo: "operador", ID: o.ID, Nome: o.Login})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	senha := randomString(18)
	hash, err := hashPassword(senha, s.PasswordCost)
	if err != nil {
		return "", err
	}
	err = s.Store.ResetOperatorPassword(ctx, actorID, o.ID, string(hash), audit)
	if errors.Is(err, ErrNotFound) {
		return "", Errorf(ENotFound, "operador %s não existe", o.Login)
	}
	if err != nil {
		return "", err
	}
	// Forgiven on every replica: the counts are the database's.
	if err := s.Store.ReleaseLoginAttempt(context.WithoutCancel(ctx), "", []string{"login:" + o.Login}); err != nil {
		return "", err
	}
	return senha, nil
}

var loginPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{2,39}$`)

// CreateOperator adds a console account on behalf of actorID, who must still
// be an active admin when it commits ("" for the server's own operator).
func (s *Sessions) CreateOperator(ctx context.Context, actorID, login, senha string, papel Papel) (_ Operator, err error) {
	audit := NewAudit(ctx, AcaoOperadorCriar, AuditTarget{Tipo: "operador"})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	var bad []Detail
	if !loginPattern.MatchString(login) {
		bad = append(bad, Detail{"/login", "3 a 40 caracteres: letras minúsculas, números, ponto, hífen ou sublinhado"})
	}
	if !validOperatorRole(papel) {
		bad = append(bad, Detail{"/papel", "deve ser admin, operador ou leitor"})
	}
	if err := CheckPassword("/senha", senha); err != nil {
		bad = append(bad, err.(*Error).Details...)
	}
	if len(bad) > 0 {
		return Operator{}, &Error{Code: EInvalid, Message: "dados do operador inválidos", Details: bad}
	}
	hash, err := hashPassword(senha, s.PasswordCost)
	if err != nil {
		return Operator{}, err
	}
	o := Operator{ID: uuid.Must(uuid.NewV7()).String(), Login: login, Papel: papel, CriadoEm: s.Now().UTC(), Ativo: true}
	audit = operatorCreated(ctx, o)
	created, err := s.Store.InsertOperator(ctx, actorID, o, string(hash), audit)
	if err != nil {
		return Operator{}, err
	}
	if !created {
		return Operator{}, &Error{Code: EConflict, Message: "já existe um operador com este usuário",
			Details: []Detail{{"/login", "já existe"}}}
	}
	return o, nil
}

// SetActive enables or disables the account id on behalf of actor, who
// must be an active admin when the change commits. Nobody disables their
// own account: with that check, an active admin always remains.
func (s *Sessions) SetActive(ctx context.Context, actor Operator, id string, ativo bool) (err error) {
	acao := AcaoOperadorAtivar
	if !ativo {
		acao = AcaoOperadorDesativar
	}
	audit := NewAudit(ctx, acao, AuditTarget{Tipo: "operador", ID: id}, Set("ativo", ativo))
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	if !ativo && id == actor.ID {
		return Errorf(EConflict, "você não pode desativar a própria conta")
	}
	err = s.Store.SetOperatorActive(ctx, actor.ID, id, ativo, audit)
	if errors.Is(err, ErrNotFound) {
		return Errorf(ENotFound, "operador %s não existe", id)
	}
	return err
}

// SetRole changes the role of the account id on behalf of actor, who must
// be an active admin when the change commits. Nobody changes their own: an
// admin who demoted themselves could leave no admin at all.
func (s *Sessions) SetRole(ctx context.Context, actor Operator, id string, papel Papel) (err error) {
	audit := NewAudit(ctx, AcaoOperadorPapelAlterar, AuditTarget{Tipo: "operador", ID: id}, Set("papel", papel))
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	if !validOperatorRole(papel) {
		return &Error{Code: EInvalid, Message: "papel inválido",
			Details: []Detail{{"/papel", "deve ser admin, operador ou leitor"}}}
	}
	if id == actor.ID {
		return Errorf(EConflict, "você não pode mudar o próprio papel")
	}
	err = s.Store.SetOperatorRole(ctx, actor.ID, id, papel, audit)
	if errors.Is(err, ErrNotFound) {
		return Errorf(ENotFound, "operador %s não existe", id)
	}
	return err
}

// validOperatorRole: produtor is a role for API tokens only.
func validOperatorRole(p Papel) bool {
	return p == PapelAdmin || p == PapelOperador || p == PapelLeitor
}

// Operators lists the console accounts.
func (s *Sessions) Operators(ctx context.Context) ([]Operator, error) {
	return s.Store.Operators(ctx)
}

// CheckPassword says whether senha may be a password, naming the field at
// path: the console asks it too, to report a weak password beside a
// mismatched confirmation.
func CheckPassword(path, senha string) error {
	// bcrypt reads at most 72 bytes: a longer password would be silently cut.
	if n := utf8.RuneCountInString(senha); n < MinPasswordLen || len(senha) > 72 {
		return &Error{Code: EInvalid, Message: "senha inválida",
			Details: []Detail{{path, fmt.Sprintf("de %d a 72 caracteres", MinPasswordLen)}}}
	}
	return nil
}
