// The guard every handler runs in: its error, panic or timeout is logged
// and recorded in the DLQ, never passed to the caller or other handlers.

package app

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// errTimeout is what a handler that overran its deadline is recorded with;
// errAbandoned, one that then ignored the cancellation as long again.
var (
	errTimeout   = errors.New("o consumidor excedeu o tempo limite")
	errAbandoned = errors.New("o consumidor excedeu o tempo limite e ignorou o cancelamento: abandonado, ainda em execução")
)

// errUnrecorded marks a failure the DLQ could not record: the consumer must
// then not move that type's cursor past it.
var errUnrecorded = errors.New("failure not recorded in the DLQ")

// guard runs a handler so that its error, panic or timeout never reaches the
// caller or other handlers: it is logged and recorded in the DLQ instead. A
// handler that overruns its timeout gets its context cancelled and is given
// as long again to return, so that the colonia's next event does not run
// beside it. One that still has not returned is abandoned: its timeout is
// recorded and the colonia moves on, because a handler that ignores
// cancellation must not stall its colonia, and shutdown, for ever. Its
// goroutine is left running, and whatever it does when it wakes up may land
// after later events.
func (c *Consumers) guard(ctx context.Context, sub subscription, ev Event) error {
	hctx, cancel := context.WithTimeout(ctx, c.HandlerTimeout)
	defer cancel()
	type outcome struct {
		err   error
		stack string
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- outcome{fmt.Errorf("falha inesperada (panic): %v", r), string(debug.Stack())}
			}
		}()
		err := sub.fn(hctx, ev)
		var detail string
		if err != nil {
			// An error carries no stack; %+v prints one for errors that
			// recorded it (and the full chain for the rest).
			detail = fmt.Sprintf("%+v", err)
		}
		done <- outcome{err, detail}
	}()
	var out outcome
	select {
	case out = <-done:
	case <-hctx.Done():
		grace := time.NewTimer(c.HandlerTimeout)
		defer grace.Stop()
		out = outcome{err: errTimeout}
		select {
		case <-done:
		case <-grace.C:
			out = outcome{err: errAbandoned}
		}
		if ctx.Err() != nil {
			// Shutting down: not the handler's fault, and not recorded.
			return ctx.Err()
		}
	}
	switch {
	case out.err == nil:
		c.Metrics.handled(sub.colonia, "ok")
		c.Signals.Handled.raise(consumed(sub, ev))
		return nil
	case out.err == errAbandoned:
		c.Metrics.handled(sub.colonia, "abandonado")
	default:
		c.Metrics.handled(sub.colonia, "erro")
	}
	c.Logger.Error("event handler failed", "colonia", sub.colonia, "handler", sub.nome,
		"tipo", ev.Tipo, "event_id", ev.EventID, "sequence_number", ev.Sequence, "err", out.err)
	now := c.Now().UTC()
	entry := DLQEntry{EventID: ev.EventID, Sequence: ev.Sequence, Tipo: ev.Tipo, Colonia: sub.colonia,
		HandlerNome: sub.nome, MensagemErro: out.err.Error(), PilhaErro: out.stack,
		Tentativas: 1, UltimaTentativa: now, Status: DLQPendente, CriadoEm: now}
	// The DLQ write must outlive a cancelled request: the failure happened.
	if err := c.Store.RecordFailure(context.WithoutCancel(ctx), entry); err != nil {
		c.Logger.Error("record DLQ entry failed", "colonia", sub.colonia, "event_id", ev.EventID, "err", err)
		return fmt.Errorf("%w: %w", errUnrecorded, out.err)
	}
	c.Signals.DeadLettered.raise(consumed(sub, ev))
	return out.err
}

func consumed(sub subscription, ev Event) Consumed {
	return Consumed{Colonia: sub.colonia, Tipo: ev.Tipo, EventID: ev.EventID, Sequence: ev.Sequence}
}
