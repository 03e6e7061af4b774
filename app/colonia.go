// One colonia's consumer: the goroutine that catches up from the log,
// then applies the live stream, and saves its cursors.

package app

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type consumer struct {
	parent    *Consumers
	colonia   string
	handlers  map[string]subscription
	live      chan Appended
	overflow  atomic.Bool
	queued    atomic.Int64 // payload bytes waiting in live
	reprocess chan reprocessReq
	inline    sync.Mutex // reprocessHere, one at a time

	held    *Appended        // first live event met during catch-up
	pos     int64            // highest sequence seen (handled or skipped)
	cursors map[string]int64 // per type, as loaded, to skip what is done
	done    map[string]int64 // per type, handled since the last save
	blocked map[string]bool  // per type, after a failure the DLQ could not record
	unsaved int              // live events handled since the last save
	open    map[string]bool  // event ids with an open DLQ entry
}

// run closes ready after its first catch-up. When ctx ends (the term or
// the process), it saves what it handled since the last save, so that the
// next leader does not handle it again.
func (k *consumer) run(ctx context.Context, ready chan struct{}) {
	c := k.parent
	log := c.Logger.With("colonia", k.colonia)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := k.save(sctx); err != nil {
			log.Error("save consumer cursor on stopping: the next run handles those events again", "err", err)
		}
	}()
	for {
		if err := k.catchUp(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("consumer catch-up failed; retrying", "err", err)
			select {
			case <-time.After(time.Second):
				continue
			case <-ctx.Done():
				return
			}
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
		if !k.follow(ctx) {
			return
		}
	}
}

// catchUp loads cursors and open failures, then replays the log from the
// lowest cursor until it reaches the head or the first event already waiting
// in the live queue: from there on the live queue carries the full payload.
func (k *consumer) catchUp(ctx context.Context) error {
	c := k.parent
	// Record what the live phase handled, so the reload below does not
	// replay it.
	if err := k.save(ctx); err != nil {
		return err
	}
	// Clear the flag before draining: a drop after this sets it again, and
	// anything dropped before is already in the log read below.
	k.overflow.Store(false)
	for len(k.live) > 0 {
		k.dequeued(<-k.live)
	}
	k.held = nil
	cursors, err := c.Store.Cursors(ctx, k.colonia)
	if err != nil {
		return err
	}
	k.cursors, k.done, k.blocked = cursors, map[string]int64{}, map[string]bool{}
	open, err := c.Store.DLQOpen(ctx, k.colonia, 10000)
	if err != nil {
		return err
	}
	k.open = map[string]bool{}
	for _, e := range open {
		k.open[e.EventID] = true
	}
	tipos := make([]string, 0, len(k.handlers))
	k.pos = -1
	for tipo := range k.handlers {
		tipos = append(tipos, tipo)
		if cur := cursors[tipo]; k.pos < 0 || cur < k.pos {
			k.pos = cur
		}
	}
	sort.Strings(tipos)
	for {
		if k.held == nil {
			select {
			case a := <-k.live:
				k.dequeued(a)
				k.held = &a
			default:
			}
		}
		batch, cut, err := c.Log.EventsAfter(ctx, k.pos, tipos, replayPage, ChunkBytes)
		if err != nil {
			return err
		}
		reachedLive := false
		for _, ev := range batch {
			if k.held != nil && ev.Sequence >= k.held.Event.Sequence {
				reachedLive = true
				break
			}
			k.handle(ctx, ev)
			k.pos = ev.Sequence
		}
		if err := k.save(ctx); err != nil {
			return err
		}
		if reachedLive || (len(batch) < replayPage && !cut) {
			return nil
		}
	}
}

// follow applies live commits until the queue overflows (true: catch up
// again) or ctx ends (false).
func (k *consumer) follow(ctx context.Context) bool {
	if a := k.held; a != nil {
		k.held = nil
		if !k.apply(ctx, *a) {
			return true
		}
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case req := <-k.reprocess:
			// The consumer's own context: a client that hangs up must not
			// leave entries half-processed.
			res, err := k.reprocessDLQ(ctx)
			req.done <- reprocessRes{res, err}
		case a := <-k.live:
			k.dequeued(a)
			if !k.apply(ctx, a) {
				return true
			}
		}
	}
}

func (k *consumer) dequeued(a Appended) {
	k.queued.Add(-int64(len(a.FullPayload) + len(a.Event.Payload)))
}

// apply handles one live event; false means the queue overflowed and the
// consumer must catch up from the log.
func (k *consumer) apply(ctx context.Context, a Appended) bool {
	if k.overflow.Load() {
		return false
	}
	if a.Event.Sequence <= k.pos {
		return true
	}
	if isMark(a) {
		return k.readTo(ctx, a.Event.Sequence)
	}
	ev := a.Event
	ev.Payload = a.FullPayload
	k.handle(ctx, ev)
	k.pos = ev.Sequence
	// Save once the burst is drained, or every 256 events under sustained
	// load: one write per burst, yet a crash replays little.
	if k.unsaved++; len(k.live) == 0 || k.unsaved >= 256 {
		k.unsaved = 0
		if err := k.save(ctx); err != nil {
			k.parent.Logger.Error("save consumer cursor", "colonia", k.colonia, "err", err)
			return false
		}
	}
	return true
}

// readTo handles, from the log, this consumer's events after its position
// and up to seq: those another replica committed (see Remote). False means
// the read failed and the consumer must catch up.
func (k *consumer) readTo(ctx context.Context, seq int64) bool {
	c := k.parent
	tipos := make([]string, 0, len(k.handlers))
	for tipo := range k.handlers {
		tipos = append(tipos, tipo)
	}
	sort.Strings(tipos)
	for k.pos < seq {
		batch, cut, err := c.Log.EventsAfter(ctx, k.pos, tipos, replayPage, ChunkBytes)
		if err != nil {
			if ctx.Err() == nil {
				c.Logger.Error("read other replicas' events", "colonia", k.colonia, "err", err)
			}
			return false
		}
		for _, ev := range batch {
			if ev.Sequence > seq {
				break
			}
			k.handle(ctx, ev)
			k.pos = ev.Sequence
		}
		if len(batch) < replayPage && !cut || len(batch) > 0 && batch[len(batch)-1].Sequence >= seq {
			break
		}
	}
	k.pos = max(k.pos, seq)
	if len(k.live) == 0 {
		k.unsaved = 0
		if err := k.save(ctx); err != nil {
			c.Logger.Error("save consumer cursor", "colonia", k.colonia, "err", err)
			return false
		}
	}
	return true
}

func (k *consumer) handle(ctx context.Context, ev Event) {
	sub, ok := k.handlers[ev.Tipo]
	if !ok || ev.Sequence <= k.cursors[ev.Tipo] {
		return
	}
	if k.blocked[ev.Tipo] {
		return // an unrecorded failure before it: the next catch-up retries from there
	}
	if err := k.parent.guard(ctx, sub, ev); err != nil {
		if errors.Is(err, errUnrecorded) {
			k.blocked[ev.Tipo] = true
		}
		return
	}
	k.done[ev.Tipo] = ev.Sequence
	if k.open[ev.EventID] {
		delete(k.open, ev.EventID)
		if err := k.parent.Store.SetDLQStatus(ctx, ev.EventID, k.colonia, DLQResolved); err != nil {
			k.parent.Logger.Error("resolve DLQ entry", "colonia", k.colonia, "event_id", ev.EventID, "err", err)
		}
	}
}

func (k *consumer) save(ctx context.Context) error {
	if len(k.done) == 0 {
		return nil
	}
	if err := k.parent.Store.AdvanceCursors(ctx, k.colonia, k.done); err != nil {
		return err
	}
	for tipo, seq := range k.done {
		k.cursors[tipo] = seq
		k.parent.Signals.Saved.raise(Consumed{Colonia: k.colonia, Tipo: tipo, Sequence: seq})
	}
	k.done = map[string]int64{}
	k.parent.announce(ctx)
	return nil
}

const replayPage = 1000
