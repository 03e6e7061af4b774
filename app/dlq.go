// The dead-letter queue of the in-process consumers (SPEC 4.5): what a
// failure records, and an operator's reprocessing of a colonia's entries.

package app

import (
	"context"
	"fmt"
	"time"
)

// DLQ statuses.
const (
	DLQPendente        = "pendente"
	DLQRetrying        = "retrying"
	DLQResolved        = "resolved"
	DLQFailedPermanent = "failed_permanent"
)

// DLQEntry is one consumer failure (SPEC 4.5).
type DLQEntry struct {
	ID              int64      `json:"id,string"`
	EventID         string     `json:"event_id"`
	Sequence        int64      `json:"sequence_number,string"`
	Tipo            string     `json:"tipo"`
	Colonia         string     `json:"colonia"`
	HandlerNome     string     `json:"handler_nome"`
	MensagemErro    string     `json:"mensagem_erro"`
	PilhaErro       string     `json:"pilha_erro"`
	Tentativas      int        `json:"tentativas"`
	UltimaTentativa time.Time  `json:"ultima_tentativa"`
	Status          string     `json:"status"`
	CriadoEm        time.Time  `json:"criado_em"`
	ResolvidoEm     *time.Time `json:"resolvido_em,omitempty"`
}

// DLQStats is the body of GET /api/events/dlq.
type DLQStats struct {
	PendentesPorColonia map[string]int `json:"pendentes_por_colonia"`
	TotalPendentes      int            `json:"total_pendentes"`
	Entradas            []DLQEntry     `json:"entradas"`
}

// MaxDLQAttempts is how many times a failed event is tried before its entry
// becomes failed_permanent.
const MaxDLQAttempts = 5

// ReprocessResult is the body of POST /api/events/dlq/reprocessar.
type ReprocessResult struct {
	Reprocessados int `json:"reprocessados"`
	Resolvidos    int `json:"resolvidos"`
	Falharam      int `json:"falharam"`
}

// ReprocessInterval is the least time between two DLQ reprocess requests.
const ReprocessInterval = time.Minute

// ReprocessDLQ retries a colonia's open DLQ entries with the redacted
// payload from the log. It runs on the colonia's own goroutine, so a handler
// never runs twice at once.
//
// Its audit entry is appended once the reprocess ends, with its counts: a
// reprocess is many transactions (each handler's outcome, each entry's
// status), and the DLQ rows themselves record each of them.
func (c *Consumers) ReprocessDLQ(ctx context.Context, colonia string) (res ReprocessResult, err error) {
	audit := NewAudit(ctx, AcaoDLQReprocessar, AuditTarget{Tipo: "colonia", ID: colonia})
	defer func() {
		if err != nil {
			recordRefusal(ctx, c.Store, audit, err)
			return
		}
		audit.Campos = []AuditField{Set("reprocessados", res.Reprocessados), Set("resolvidos", res.Resolvidos),
			Set("falharam", res.Falharam)}
		c.Store.AppendAudit(context.WithoutCancel(ctx), *audit)
	}()
	c.mu.Lock()
	k := c.colonias[colonia]
	if k == nil {
		c.mu.Unlock()
		return ReprocessResult{}, &Error{Code: ENotFound, Message: fmt.Sprintf("grupo de consumidores %s desconhecido: não tem consumidores", colonia),
			Details: []Detail{{"/colonia", "grupo de consumidores desconhecido"}}}
	}
	c.mu.Unlock()
	// The limit is per colonia: reprocessing one consumer's failures does not
	// hold back another's. It is kept in the database, so a request that
	// lands on another replica counts against the same minute.
	wait, err := c.Store.ClaimReprocess(ctx, colonia, c.Now(), ReprocessInterval)
	if err != nil {
		return ReprocessResult{}, err
	}
	if wait > 0 {
		return ReprocessResult{}, &Error{Code: ERateLimited, RetryAfter: wait,
			Message: "reprocessamento permitido uma vez por minuto por grupo de consumidores"}
	}
	c.runMu.Lock()
	run := c.current
	c.runMu.Unlock()
	if run != nil {
		req := reprocessReq{ctx: ctx, done: make(chan reprocessRes, 1)}
		select {
		case k.reprocess <- req:
			select {
			case res := <-req.done:
				return res.ReprocessResult, res.err
			case <-ctx.Done():
				return ReprocessResult{}, ctx.Err()
			}
		case <-run.stopped:
			// The lead was lost before the colonia's goroutine took it.
		case <-ctx.Done():
			return ReprocessResult{}, ctx.Err()
		}
	}
	return c.reprocessHere(ctx, k)
}

// reprocessHere retries the open entries on a replica whose consumers do
// not run (it does not lead): the request may land on any replica. It runs
// on the request's goroutine, one at a time per colonia on this replica
// (and the minute's limit, in the database, keeps replicas from running it
// at once), possibly beside the leader's live handling of the same
// colonia: handlers are idempotent, and the ocorrências' fold is
// order-free. It moves no cursor, since this replica does not know where
// the leader's are: the store stops clamping them before the entries
// resolved, and the leader's next save moves them past.
func (c *Consumers) reprocessHere(ctx context.Context, k *consumer) (ReprocessResult, error) {
	k.inline.Lock()
	defer k.inline.Unlock()
	// As on the goroutine: a client that hangs up must not leave entries
	// half-processed.
	ctx = context.WithoutCancel(ctx)
	res, err := c.retryOpen(ctx, k, func(string) {})
	if res.Resolvidos > 0 {
		c.announce(ctx)
	}
	return res, err
}

type reprocessReq struct {
	ctx  context.Context
	done chan reprocessRes
}

type reprocessRes struct {
	ReprocessResult
	err error
}

func (k *consumer) reprocessDLQ(ctx context.Context) (ReprocessResult, error) {
	res, err := k.parent.retryOpen(ctx, k, func(eventID string) { delete(k.open, eventID) })
	if err != nil {
		return res, err
	}
	// A resolved failure no longer holds the cursor back; the store clamps
	// the cursor to the failures still open.
	for tipo := range k.handlers {
		if !k.blocked[tipo] {
			k.done[tipo] = max(k.pos, k.done[tipo])
		}
	}
	return res, k.save(ctx)
}

// retryOpen runs the handlers again on k's open DLQ entries, with the
// redacted payload from the log; resolved is called for each that passed.
func (c *Consumers) retryOpen(ctx context.Context, k *consumer, resolved func(eventID string)) (ReprocessResult, error) {
	var res ReprocessResult
	entries, err := c.Store.DLQOpen(ctx, k.colonia, 1000)
	if err != nil {
		return res, err
	}
	for _, e := range entries {
		// retrying too: an entry left so by a crash mid-reprocess.
		sub, ok := k.handlers[e.Tipo]
		if !ok {
			continue
		}
		ev, err := c.Log.Event(ctx, e.EventID)
		if err != nil {
			return res, err
		}
		if err := c.Store.SetDLQStatus(ctx, e.EventID, k.colonia, DLQRetrying); err != nil {
			return res, err
		}
		res.Reprocessados++
		if err := c.guard(ctx, sub, ev); err != nil {
			res.Falharam++ // recorded again: one more attempt, failed_permanent at the limit
			continue
		}
		res.Resolvidos++
		resolved(e.EventID)
		if err := c.Store.SetDLQStatus(ctx, e.EventID, k.colonia, DLQResolved); err != nil {
			return res, err
		}
	}
	return res, nil
}
