package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Papel is a role. Each route names the roles it admits (least privilege).
type Papel string

const (
	PapelAdmin    Papel = "admin"    // everything
	PapelOperador Papel = "operador" // operate: read, reprocess, resend
	PapelLeitor   Papel = "leitor"   // read only
	PapelProdutor Papel = "produtor" // publish events, nothing else
)

// The role groups every route of both edges admits: least privilege is
// decided here once, not per edge.
var (
	// Readers may read everything operators see.
	Readers = []Papel{PapelAdmin, PapelOperador, PapelLeitor}
	// Operators also act on deliveries, dead letters and ocorrências.
	Operators = []Papel{PapelAdmin, PapelOperador}
	// Admins also manage integrators, the registry, tokens and operators.
	Admins = []Papel{PapelAdmin}
	// Producers publish events.
	Producers = []Papel{PapelAdmin, PapelProdutor}
	// AnyRole is every token role: the registry is readable by all of them.
	AnyRole = []Papel{PapelAdmin, PapelOperador, PapelLeitor, PapelProdutor}
)

// ValidPapel reports whether p is a token role.
func ValidPapel(p Papel) bool {
	switch p {
	case PapelAdmin, PapelOperador, PapelLeitor, PapelProdutor:
		return true
	}
	return false
}

// Token is an API token's public record; its secret is never stored.
type Token struct {
	ID       string    `json:"id"`
	Nome     string    `json:"nome"`
	Papel    Papel     `json:"papel"`
	CriadoEm time.Time `json:"criado_em"`
}

// Operator is a console account.
type Operator struct {
	ID       string    `json:"id"`
	Login    string    `json:"login"`
	Papel    Papel     `json:"papel"`
	CriadoEm time.Time `json:"criado_em"`
	Ativo    bool      `json:"ativo"`
}

// AuthStore keeps tokens and operators.
type AuthStore interface {
	AuditLog
	// The changes below write their audit entry (nil: none) in their own
	// transaction, and only when they change something.
	InsertToken(ctx context.Context, t Token, hash string, audit *AuditEntry) error
	TokenByHash(ctx context.Context, hash string) (Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time, audit *AuditEntry) error
	// InsertOperator adds an account, false when the login exists. A
	// non-empty actorID must be an active admin when it commits (EForbidden
	// otherwise); "" is the server's own operator (first start).
	InsertOperator(ctx context.Context, actorID string, o Operator, senhaHash string, audit *AuditEntry) (bool, error)
	OperatorByLogin(ctx context.Context, login string) (Operator, string, error)
}

// Auth issues and checks credentials.
type Auth struct {
	Store AuthStore
	Now   func() time.Time
	// PasswordCost is bcrypt's cost for the admin's password (0: the default).
	PasswordCost int

	// cache maps a token hash to its record for tokenCacheTTL: every API
	// request authenticates, and the lookup costs more than the publish.
	cache sync.Map // string -> cachedToken
}

// tokenCacheTTL bounds how long a token stays accepted from memory: a token
// revoked in the database, on any replica, stops working within this time
// (SPEC 12, issue 27: it was 30 s). One read a second per active token.
const tokenCacheTTL = SharedRefresh

// forget drops every cached token: one was revoked or changed elsewhere,
// and the next request of each reads the store.
func (a *Auth) forget() { a.cache.Clear() }

type cachedToken struct {
	t       Token
	expires time.Time
}

const tokenPrefix = "gh_"

// CreateToken returns a new token's secret (shown once) and its record.
func (a *Auth) CreateToken(ctx context.Context, papel Papel, nome string) (_ string, _ Token, err error) {
	audit := NewAudit(ctx, AcaoTokenCriar, AuditTarget{Tipo: "token"})
	defer func() { recordRefusal(ctx, a.Store, audit, err) }()
	if !ValidPapel(papel) {
		return "", Token{}, &Error{Code: EInvalid, Message: "papel inválido",
			Details: []Detail{{"/papel", "deve ser admin, operador, leitor ou produtor"}}}
	}
	secret := tokenPrefix + randomString(32)
	t := Token{ID: uuid.Must(uuid.NewV7()).String(), Nome: nome, Papel: papel, CriadoEm: a.Now().UTC()}
	if t.Nome == "" {
		t.Nome = string(papel)
	}
	audit.Alvo = AuditTarget{Tipo: "token", ID: t.ID, Nome: t.Nome}
	audit.Campos = []AuditField{Set("nome", t.Nome), Set("papel", t.Papel)}
	if err := a.Store.InsertToken(ctx, t, hashToken(secret), audit); err != nil {
		return "", Token{}, err
	}
	return secret, t, nil
}

// Authenticate resolves a bearer secret to its token.
func (a *Auth) Authenticate(ctx context.Context, secret string) (Token, error) {
	if !strings.HasPrefix(secret, tokenPrefix) {
		return Token{}, Errorf(EUnauthorized, "token inválido")
	}
	hash := hashToken(secret)
	now := a.Now()
	if c, ok := a.cache.Load(hash); ok && now.Before(c.(cachedToken).expires) {
		return c.(cachedToken).t, nil
	}
	// Only valid tokens are cached, so guessing cannot grow the cache.
	t, err := a.Store.TokenByHash(ctx, hash)
	if errors.Is(err, ErrNotFound) {
		return Token{}, Errorf(EUnauthorized, "token inválido")
	}
	if err != nil {
		return Token{}, err
	}
	a.cache.Store(hash, cachedToken{t, now.Add(tokenCacheTTL)})
	return t, nil
}

// RevokeToken ends a token. A server that validated it keeps accepting it
// from memory for at most tokenCacheTTL.
func (a *Auth) RevokeToken(ctx context.Context, id string) (err error) {
	audit := NewAudit(ctx, AcaoTokenRevogar, AuditTarget{Tipo: "token", ID: id})
	defer func() { recordRefusal(ctx, a.Store, audit, err) }()
	err = a.Store.RevokeToken(ctx, id, a.Now().UTC(), audit)
	if errors.Is(err, ErrNotFound) {
		return Errorf(ENotFound, "token %s não existe ou já foi revogado", id)
	}
	return err
}

// Allow returns EForbidden unless the token's role is one of roles.
func Allow(t Token, roles ...Papel) error {
	for _, r := range roles {
		if t.Papel == r {
			return nil
		}
	}
	return Errorf(EForbidden, "o papel %s não permite esta operação", t.Papel)
}

// EnsureAdmin creates the admin operator on first start. password may be
// empty, in which case one is generated; it is returned only when created.
func (a *Auth) EnsureAdmin(ctx context.Context, password string) (string, bool, error) {
	// bcrypt costs tens of milliseconds: spend it only on the first start.
	if _, _, err := a.Store.OperatorByLogin(ctx, "admin"); err == nil {
		return "", false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return "", false, err
	}
	if password == "" {
		password = randomString(18)
	}
	hash, err := hashPassword(password, a.PasswordCost)
	if err != nil {
		return "", false, err
	}
	o := Operator{ID: uuid.Must(uuid.NewV7()).String(), Login: "admin", Papel: PapelAdmin, CriadoEm: a.Now().UTC(), Ativo: true}
	created, err := a.Store.InsertOperator(ctx, "", o, string(hash), operatorCreated(WithActor(ctx, System), o))
	if err != nil || !created {
		return "", false, err
	}
	return password, true, nil
}

// operatorCreated is the entry of a new account: its login and role,
// never its password.
func operatorCreated(ctx context.Context, o Operator) *AuditEntry {
	return NewAudit(ctx, AcaoOperadorCriar, AuditTarget{Tipo: "operador", ID: o.ID, Nome: o.Login},
		Set("login", o.Login), Set("papel", o.Papel), Set("ativo", o.Ativo))
}

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand panics on failure)
	return base64.RawURLEncoding.EncodeToString(b)
}
