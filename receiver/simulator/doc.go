// Package simulator is a small CAD (computer-aided dispatch) system built on
// the integrator SDK [geohub/receiver]. It backs `geohub serve --demo` (a
// demo integrator that keeps ocorrências flowing) and the end-to-end tests.
// Like the SDK it imports only the standard library and geohub/receiver:
// it talks to Geohub over HTTP, as any CAD vendor's system would.
//
// # Pieces
//
//   - [CAD] sends commands with the integrator's API key ([CAD.Register],
//     [CAD.Dispatch], [CAD.SetDispatchStatus], [CAD.SetStatus], and the
//     lower-level [CAD.Do]). Every command gets a new x-solicitacao-id
//     ([NewSolicitacaoID]); transport errors, 429 (honouring Retry-After)
//     and 5xx are retried with the SAME id and the same body, which Geohub
//     turns into the first outcome again instead of a second command. Other
//     4xx are final and come back as [*APIError].
//   - [CAD.Handler] is the webhook receiver (receiver.New with Config.Self
//     set to the integrator's id) to mount at the callback_url. It feeds the
//     [Projection].
//   - [Projection] is what the CAD's screen would show: each ocorrência with
//     the state of EACH despacho, the jornadas, and the outcome of each
//     command by x-solicitacao-id.
//   - [CAD.Run] is the demo trickle: realistic scenarios (register, dispatch
//     one or two recursos, en route, on site, released or cancelled, close)
//     at a configurable pace. [CAD.RunScenario] plays one.
//
// # Three paths into the projection
//
// The domain events a command causes carry origem.autoria = {tipo:
// "integrador", id: <this integrator>}: they are the CAD's echo, and the
// receiver discards them (obligation 4). So the CAD learns the result of
// its own commands elsewhere:
//
//  1. the HTTP response: the ocorrência after the command (a full
//     snapshot with its versao), merged at once;
//  2. integracao:comando-concluido / -recusado, the command's outcome
//     published to its sender (aggregate solicitacao:<id>), never an echo:
//     the second path, for a client whose response was lost. A concluded
//     outcome's resultado is the same snapshot and is merged the same way;
//  3. the ocorrencia:* events that someone else caused (an operator on the
//     console), applied one by one, per despacho and per ocorrência, in
//     order within their aggregate.
//
// These arrive in no mutual order (each solicitacao is its own aggregate),
// so the projection merges rather than overwrites: statuses only move
// forward, versao only grows, a snapshot with a higher versao supersedes
// the older ones (see [Projection]). Any interleaving, with repeats,
// converges to the same state, which a test can compare with Geohub's GET
// /api/ocorrencias/{id} ([CAD.Get], [DecodeOcorrencia]).
package simulator
