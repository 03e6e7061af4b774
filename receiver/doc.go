// Package receiver is the Geohub integrator SDK: an http.Handler that
// receives Geohub's signed webhooks and keeps the five obligations of a
// receiver (SPEC section 8, integrator guide "O CAD recebe o que
// aconteceu"). It imports only the standard library, so a CAD vendor can
// copy this directory or import it alone.
//
// # What Geohub sends
//
// Every event is POSTed to the integrator's callback_url. The body is the
// envelope ([Envelope]), compact JSON, byte for byte the same on every
// attempt. Delivery metadata goes in headers, which are NOT signed:
//
//	X-Geohub-Evento-Id:           the envelope id
//	X-Geohub-Timestamp:           epoch seconds at this attempt
//	X-Geohub-Assinatura:          sha256=hex(HMAC-SHA256(segredo, "<timestamp>.<raw body>"))
//	X-Geohub-Assinatura-Anterior: the same with the previous secret, during a rotation
//	X-Geohub-Agregado:            ocorrencia:<id>, guarnicao:<id>, jornada:<id>, solicitacao:<id>
//	X-Geohub-Sequencia:           1, 2, 3… without gaps per (integrator, aggregate)
//	X-Geohub-Entrega-Id:          new for every attempt
//	X-Geohub-Tentativa:           attempt number, from 1
//
// # The five obligations, and the status each answers
//
//  1. Verify the signature over the raw body before any parse, in constant
//     time, with the timestamp inside ±[Config.Tolerance] (default 5 min,
//     both sides: a clock ahead is as common as one behind). Any configured
//     secret matching either signature header passes, so a rotation needs no
//     coordination. Failure answers 401 and the [Handler] is never called;
//     Geohub does not retry a 401. A body over [Config.MaxBody] answers 413.
//  2. A verified body that is not an envelope (not JSON, or without id,
//     tipo or payload) answers 400; retrying would not fix it.
//  3. Deduplicate by envelope id ([Config.Seen]): a repeat answers 204 and is
//     not applied again. Delivery is at least once, so repeats are normal.
//  4. Discard the integrator's own echo — an envelope whose origem.autoria is
//     {tipo: "integrador", id: [Config.Self]} — with 204. Never an
//     integracao:* envelope: it carries the same autoria, but it is the
//     answer to the command (the second path, for a client that lost the
//     HTTP response), not its echo.
//  5. Apply in X-Geohub-Sequencia order within each X-Geohub-Agregado. Geohub
//     does not let a failing event hold the ones behind it, so a gap on
//     arrival is an event still being retried: an early arrival is held
//     (204: accepted, it will be applied) until the gap fills, and then the
//     held ones are applied in order. The next expected sequence of each
//     aggregate starts at 1 ([Config.Sequences]). A delivery whose sequence
//     is missing or unreadable (or that has no aggregate) is applied at once:
//     the headers are not signed, and blocking the projection on unproven
//     metadata would hand control to whoever is on the path.
//
// Besides the five, a test delivery (integracao:teste: the receiver
// tester, an evento-teste) and an admin's verification
// (integracao:verificacao) carry no fact: recognised by exact type after
// obligations 1 and 2, they are answered 204 and not applied
// ([MotivoTeste]), taking their turn in their aggregate as the echo does
// (integrator guide 12.6).
//
// Answering 204 to a repeat and to an echo is deliberate: they were
// delivered; answering an error would make Geohub resend them forever.
//
// # Decisions
//
//   - The echo still consumes its sequence number: it is skipped in its turn,
//     so the deliveries behind it are not held forever.
//   - A delivery whose sequence is below the aggregate's next expected one was
//     already applied (Geohub resends a dead letter with the same sequence
//     and body): it is a repeat, 204, even if the id fell out of Seen.
//   - If [Handler.Apply] returns an error the answer is 500: the envelope is
//     not marked as seen and the sequence does not advance, so Geohub retries
//     it (backoff, then dead letter that an operator can resend) and the
//     deliveries behind it wait, held, for it.
//   - A held delivery was answered 204, so Geohub will not resend it. If its
//     Apply fails when the gap fills, it stays held, at the head; the next
//     delivery to the aggregate (a repeat included) tries again, and so does
//     [Receiver.Drain], which a CAD may call on a timer.
//   - At most [Config.MaxHeld] deliveries are held per aggregate; beyond that
//     the answer is 503 (not seen, so Geohub retries it later).
//   - Requests may arrive concurrently (Geohub keeps several in flight per
//     integrator). Apply is called for one aggregate at a time, in order;
//     different aggregates run in parallel. A repeat in the same aggregate
//     waits for its turn; the same envelope id in flight at once under
//     another aggregate header or none (only with tampered headers) answers
//     503, so its 204 cannot hide a failure of the first.
//   - Apply runs inside the request, and Geohub times out at 5 s: keep it
//     short (write the projection; do slow work elsewhere).
//
// # State, and keeping the projection per despacho
//
// Seen, the next sequence per aggregate and the held deliveries live in
// memory by default. A CAD that must survive a restart implements
// [SeenStore] and [SequenceStore] on its own database, ideally updated in
// the same transaction as its projection inside Apply; otherwise, after a
// restart, an aggregate already at sequence n would wait forever for 1…n-1.
//
// The projection is the CAD's business, done in Apply. Keep the state per
// despacho, never per ocorrência: there is no "vehicle arrived" event.
// ocorrencia:despachada creates a despacho (payload.despacho: id,
// ocorrenciaId, recurso.identificador, status); ocorrencia:despacho-mudou-status
// ({id, ocorrenciaId, de, para}) moves ONE despacho (arrival is para
// "no_local"); ocorrencia:mudou-status moves the ocorrência (em_atendimento
// follows the FIRST arrival and says nothing about the other despachos).
// Because deliveries of an aggregate arrive in order and exactly once,
// Apply can simply overwrite: see the example of [New].
package receiver
