package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/google/uuid"
)

// The integrators' portal (SPEC 8c): a CAD vendor's own corner of the
// console. An admin or operador makes a sign-in link for one integrator;
// the vendor signs in with it, or with the integrator's API key, and the
// session then reaches that integrator and nothing else.

// PortalStore keeps the portal's sign-in links and sessions. Each change
// writes its audit entry (nil: none) in its own transaction.
type PortalStore interface {
	InsertPortalLink(ctx context.Context, l PortalLink, hash string, audit *AuditEntry) error
	// PortalLinks returns the integrator's links still usable at now.
	PortalLinks(ctx context.Context, integrador string, now time.Time) ([]PortalLink, error)
	// PortalLinkByHash returns a link whatever its state.
	PortalLinkByHash(ctx context.Context, hash string) (PortalLink, error)
	// RevokePortalLink ends an unused link of the integrator (ErrNotFound
	// for none).
	RevokePortalLink(ctx context.Context, integrador, id string, now time.Time, audit *AuditEntry) error
	// UsePortalLink spends a link still usable at criado and opens a
	// session for its integrator, in one transaction (ErrNotFound when the
	// link was used, revoked or expired meanwhile).
	UsePortalLink(ctx context.Context, id, sessionHash string, criado, expira time.Time, audit *AuditEntry) error
	InsertPortalSession(ctx context.Context, hash, integrador string, criado, expira time.Time, audit *AuditEntry) error
	// PortalSessionIntegrator returns the integrator of a live session.
	PortalSessionIntegrator(ctx context.Context, hash string, now time.Time) (string, error)
	DeletePortalSession(ctx context.Context, hash string, audit *AuditEntry) error
	// EndPortalSessions ends every portal session of the integrator. A
	// replaced API key ends them too (SetIntegratorAPIKey).
	EndPortalSessions(ctx context.Context, integrador string, audit *AuditEntry) (int, error)
}

// PortalLink is a sign-in link, as the console lists it (never its token).
type PortalLink struct {
	ID         string     `json:"id"`
	Integrador string     `json:"integrador"`
	CriadoEm   time.Time  `json:"criado_em"`
	ExpiraEm   time.Time  `json:"expira_em"`
	UsadoEm    *time.Time `json:"usado_em,omitempty"`
	RevogadoEm *time.Time `json:"revogado_em,omitempty"`
}

// usable says whether the link still signs someone in at now.
func (l PortalLink) usable(now time.Time) bool {
	return l.UsadoEm == nil && l.RevogadoEm == nil && now.Before(l.ExpiraEm)
}

// IssuedPortalLink is a new link: its token is shown once, in the URL.
type IssuedPortalLink struct {
	PortalLink
	Token string `json:"token"`
}

const (
	// PortalLinkTTL is how long a sign-in link may be used: a working day
	// to pass it on and open it.
	PortalLinkTTL    = 24 * time.Hour
	portalLinkPrefix = "gpl_"
	portalPrefix     = "gps_"
)

// Portal signs integrators in to their portal.
type Portal struct {
	Store interface {
		PortalStore
		AuditLog
	}
	Integrators *Integrators
	Now         func() time.Time
	// CSRFKey signs the CSRF token of each portal session.
	CSRFKey []byte
}

// IssueLink makes a single-use sign-in link for an integrator.
func (p *Portal) IssueLink(ctx context.Context, integrador string) (_ IssuedPortalLink, err error) {
	audit := NewAudit(ctx, AcaoPortalLinkCriar, AuditTarget{Tipo: "integrador", ID: integrador})
	defer func() { recordRefusal(ctx, p.Store, audit, err) }()
	in, err := p.Integrators.Get(ctx, integrador)
	if err != nil {
		return IssuedPortalLink{}, err
	}
	audit.Alvo.Nome = in.Nome
	now := p.Now().UTC().Truncate(time.Millisecond)
	l := PortalLink{ID: uuid.Must(uuid.NewV7()).String(), Integrador: in.ID, CriadoEm: now, ExpiraEm: now.Add(PortalLinkTTL)}
	token := portalLinkPrefix + randomString(32)
	audit.Campos = []AuditField{Set("link", l.ID), Set("expira_em", l.ExpiraEm)}
	if err := p.Store.InsertPortalLink(ctx, l, hashToken(token), audit); err != nil {
		return IssuedPortalLink{}, err
	}
	return IssuedPortalLink{PortalLink: l, Token: token}, nil
}

// Links returns the integrator's links still usable.
func (p *Portal) Links(ctx context.Context, integrador string) ([]PortalLink, error) {
	return p.Store.PortalLinks(ctx, integrador, p.Now())
}

// RevokeLink ends an unused link before it expires.
func (p *Portal) RevokeLink(ctx context.Context, integrador, id string) (err error) {
	audit := NewAudit(ctx, AcaoPortalLinkRevogar, AuditTarget{Tipo: "integrador", ID: integrador}, Set("link", id))
	defer func() { recordRefusal(ctx, p.Store, audit, err) }()
	in, err := p.Integrators.Get(ctx, integrador)
	if err != nil {
		return err
	}
	audit.Alvo.Nome = in.Nome
	err = p.Store.RevokePortalLink(ctx, integrador, id, p.Now().UTC(), audit)
	if errors.Is(err, ErrNotFound) {
		return Errorf(ENotFound, "link não encontrado, ou já usado, revogado ou vencido")
	}
	return err
}

// errPortalLink is the one answer to a link that cannot sign in: a
// guesser learns nothing of which links exist.
var errPortalLink = Errorf(EUnauthorized, "link de acesso inválido, já usado, revogado ou vencido: peça um novo à prefeitura")

// SignInWithLink spends a link and opens a portal session, returning the
// cookie's secret and the integrator.
func (p *Portal) SignInWithLink(ctx context.Context, token, client string) (string, Integrator, error) {
	now := p.Now().UTC()
	l, err := p.Store.PortalLinkByHash(ctx, hashToken(token))
	if errors.Is(err, ErrNotFound) || (err == nil && !l.usable(now)) {
		return "", Integrator{}, errPortalLink
	}
	if err != nil {
		return "", Integrator{}, err
	}
	in, err := p.Integrators.Get(ctx, l.Integrador)
	if err != nil {
		return "", Integrator{}, err
	}
	secret := portalPrefix + randomString(32)
	who := Actor{Tipo: ActorIntegrador, ID: in.ID, Nome: in.Nome, Endereco: client}
	audit := NewAudit(WithActor(ctx, who), AcaoPortalEntrar, AuditTarget{Tipo: "integrador", ID: in.ID, Nome: in.Nome},
		Set("link", l.ID))
	err = p.Store.UsePortalLink(ctx, l.ID, hashToken(secret), now, now.Add(DefaultSessionTTL), audit)
	if errors.Is(err, ErrNotFound) {
		return "", Integrator{}, errPortalLink // spent by a racing request
	}
	if err != nil {
		return "", Integrator{}, err
	}
	return secret, in, nil
}

// SignInWithKey opens a portal session with the integrator's API key.
func (p *Portal) SignInWithKey(ctx context.Context, apiKey, client string) (string, Integrator, error) {
	in, err := p.Integrators.Authenticate(ctx, apiKey)
	if err != nil {
		return "", Integrator{}, err
	}
	now := p.Now().UTC()
	secret := portalPrefix + randomString(32)
	who := Actor{Tipo: ActorIntegrador, ID: in.ID, Nome: in.Nome, Endereco: client}
	audit := NewAudit(WithActor(ctx, who), AcaoPortalEntrar, AuditTarget{Tipo: "integrador", ID: in.ID, Nome: in.Nome},
		Set("com", "chave de API"))
	if err := p.Store.InsertPortalSession(ctx, hashToken(secret), in.ID, now, now.Add(DefaultSessionTTL), audit); err != nil {
		return "", Integrator{}, err
	}
	return secret, in, nil
}

// Session returns the integrator of a live portal session (ErrNotFound
// for none).
func (p *Portal) Session(ctx context.Context, secret string) (Integrator, error) {
	id, err := p.Store.PortalSessionIntegrator(ctx, hashToken(secret), p.Now())
	if err != nil {
		return Integrator{}, err
	}
	return p.Integrators.Get(ctx, id)
}

// SignOut ends a portal session.
func (p *Portal) SignOut(ctx context.Context, secret string, in Integrator) error {
	audit := NewAudit(ctx, AcaoPortalSair, AuditTarget{Tipo: "integrador", ID: in.ID, Nome: in.Nome})
	return p.Store.DeletePortalSession(ctx, hashToken(secret), audit)
}

// EndSessions signs everyone out of the integrator's portal: for a link
// sent to the wrong person, or a vendor that changed hands.
func (p *Portal) EndSessions(ctx context.Context, integrador string) (_ int, err error) {
	audit := NewAudit(ctx, AcaoPortalSessoesEncerrar, AuditTarget{Tipo: "integrador", ID: integrador})
	audit.CountAs = "sessoes"
	defer func() { recordRefusal(ctx, p.Store, audit, err) }()
	in, err := p.Integrators.Get(ctx, integrador)
	if err != nil {
		return 0, err
	}
	audit.Alvo.Nome = in.Nome
	return p.Store.EndPortalSessions(ctx, integrador, audit)
}

// CSRF is the CSRF token of a portal session: bound to it, and apart from
// the operators' (another label under the same key).
func (p *Portal) CSRF(secret string) string {
	m := hmac.New(sha256.New, p.CSRFKey)
	m.Write([]byte("portal\x00" + secret))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckCSRF compares a form's token with the session's in constant time.
func (p *Portal) CheckCSRF(secret, token string) bool {
	return hmac.Equal([]byte(p.CSRF(secret)), []byte(token))
}
