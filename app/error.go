package app

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code classifies an Error; the web layer maps each code to one HTTP status.
type Code string

const (
	EInvalid      Code = "invalido"             // 422: well-formed input that breaks a rule
	EMalformed    Code = "malformado"           // 400: input that cannot be parsed
	ENotFound     Code = "nao_encontrado"       // 404
	EConflict     Code = "conflito"             // 409
	EUnauthorized Code = "nao_autenticado"      // 401
	EForbidden    Code = "proibido"             // 403
	EMethod       Code = "metodo_nao_permitido" // 405
	ETooLarge     Code = "grande_demais"        // 413
	ERateLimited  Code = "limite_de_taxa"       // 429
	EUnavailable  Code = "indisponivel"         // 503
	EInternal     Code = "interno"              // 500
)

// HTTPStatus is the one status each code answers with, over the API and in
// a command's recorded outcome.
func (c Code) HTTPStatus() int {
	switch c {
	case EInvalid:
		return 422
	case EMalformed:
		return 400
	case ENotFound:
		return 404
	case EConflict:
		return 409
	case EUnauthorized:
		return 401
	case EForbidden:
		return 403
	case EMethod:
		return 405
	case ETooLarge:
		return 413
	case ERateLimited:
		return 429
	case EUnavailable:
		return 503
	}
	return 500
}

// Detail is one precise finding, located by a JSON pointer into the input.
type Detail struct {
	Caminho  string `json:"caminho"`
	Mensagem string `json:"mensagem"`
}

// Error is the one application error. Message and Details are public (they
// reach the client); the wrapped Err is internal and only logged.
type Error struct {
	Code    Code
	Message string
	Details []Detail
	Err     error
	// RetryAfter tells a rate-limited caller when to come back.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an Error with a public message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrNotFound is returned by stores when a row does not exist; services turn
// it into a coded Error with a message naming what was missing.
var ErrNotFound = errors.New("not found")

// ErrStaleCadastro is a store's refusal of a publish routed by a cadastro
// older than the one it holds (Pending.Cadastro): another replica created,
// changed or removed an integrator since. The publisher reads the
// cadastro again and routes once more; nothing of it was stored.
var ErrStaleCadastro = errors.New("routed by an older cadastro")

// The words both stores answer with, so that each dialect says them alike.
var (
	// ErrStoreClosed answers an operation that reached a store after Close.
	ErrStoreClosed = Errorf(EUnavailable, "banco de dados fechado")
	// ErrResendNotFailed refuses to resend a delivery that is not a dead
	// letter (falhou).
	ErrResendNotFailed = Errorf(EInvalid, "só entregas falhou podem ser reenviadas")
	// ErrNoActiveAdmin refuses a change to the accounts by someone who is
	// no longer an active admin when it commits, and deactivations and role
	// changes by the server's own operator, which has no account to keep
	// active.
	ErrNoActiveAdmin = Errorf(EForbidden, "sua conta não é mais de um administrador ativo")
)

// PoisonPrefix and PoisonSuffix surround the number of leases a delivery
// lost in its last error when the reaper dead-letters it as poison: the
// stores write the number between them in SQL.
const (
	PoisonPrefix = "envenenada: a entrega derrubou o worker "
	PoisonSuffix = " vezes"
)

// Public is err as a client sees it, the same on the API and in the
// console: an *Error keeps its code and words; a missing row is 404; a
// request that was cancelled or ran out of time is 503; anything else is
// 500 with a generic message, the cause kept in Err for the log only.
func Public(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, ErrNotFound):
		return &Error{Code: ENotFound, Message: "não encontrado", Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: EUnavailable, Message: "requisição cancelada ou expirada", Err: err}
	}
	return &Error{Code: EInternal, Message: "erro interno", Err: err}
}

// ErrorCode returns the code err answers with (see Public).
func ErrorCode(err error) Code { return Public(err).Code }
