package app

import (
	"context"
	"fmt"
	"geohub/app/keys"
	"log/slog"
	"time"
)

// sealBatch is how many bodies one upgrade transaction seals: large enough
// that commits are not the cost, small enough that the writer is never held
// long and a restart redoes little.
const sealBatch = 256

// SealStoredBodies finishes the upgrade to sealed outbox bodies (SPEC 6.4):
// the bodies, and then the receivers' answers, that an earlier version
// stored in clear are sealed in batches, each committed with how far it
// got, then the database file is rewritten and its WAL emptied, so the
// clear text survives in no free page. Interrupted, it
// resumes at the next start; finished, it costs one read. It runs before
// the dispatcher, which sends only sealed bodies.
func SealStoredBodies(ctx context.Context, st ClearBodies, s *keys.Sealer, logger *slog.Logger) error {
	pending, err := st.ClearBodiesPending(ctx)
	if err != nil || !pending {
		return err
	}
	start := time.Now()
	bodies, err := sealAll(func() (int, bool, error) {
		return st.SealClearBodies(ctx, sealBatch, func(eventID string, body []byte) []byte {
			if keys.BodySealed(body) {
				return nil
			}
			return s.SealBody(body, eventID)
		})
	})
	if err != nil {
		return fmt.Errorf("seal outbox bodies stored in clear: %w", err)
	}
	answers, err := sealAll(func() (int, bool, error) {
		return st.SealClearResponses(ctx, sealBatch, func(entregaID, resposta string) []byte {
			return s.SealResponse(resposta, entregaID)
		})
	})
	if err != nil {
		return fmt.Errorf("seal receivers' answers stored in clear: %w", err)
	}
	total := bodies + answers
	if total > 0 {
		logger.Warn("sealed the outbox bodies and receivers' answers an earlier version stored in clear; rewriting the database file so none survives in it",
			"corpos", bodies, "respostas", answers, "duracao", time.Since(start).Round(time.Millisecond))
	}
	if err := st.ScrubClearBodies(ctx); err != nil {
		// Every body is sealed; only free pages may still hold old clear
		// text. Not a reason to stay down: the next start tries again.
		logger.Error("could not rewrite the database file without the clear bodies; the next start tries again", "err", err)
		return nil
	}
	if total > 0 {
		logger.Info("the upgrade is done: outbox bodies are sealed at rest, and the file holds no clear copy",
			"duracao", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// sealAll runs one upgrade step's batches until it says it is done.
func sealAll(batch func() (int, bool, error)) (int, error) {
	total := 0
	for {
		n, done, err := batch()
		if err != nil {
			return total, err
		}
		total += n
		if done {
			return total, nil
		}
	}
}
