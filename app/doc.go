// Package app is Geohub's domain: events, the registry, publishing,
// in-process consumers and their dead-letter queue, delivery to the CADs,
// tokens, operators and roles. It owns the interfaces the store implements
// and imports neither store nor web; New builds the whole service graph for
// serve and for every test kit.
//
// Where each thing is decided, by the path it is on:
//
//   - The graph: services.go (Deps, New, Start, Stop and the commit fan-out
//     Committed); error.go (Error, its Codes and Public, the one reading of
//     an error for both edges); signal.go (test hooks).
//   - A publish: publish.go (validate, redact, route, hand to the writer),
//     registry.go with schemabounds.go (types and their schemas),
//     namespace.go (reserved origens), envelope.go and eventjson.go (the
//     wire record), decode.go (strict JSON in), command.go and
//     outcomebounds.go (commands and their recorded outcomes), builtin.go
//     (the plugins' types).
//   - A delivery: outbox.go (rows, statuses, the store's interface),
//     dispatch.go (claim, send, record), attempt.go (decide: the outcome of
//     one attempt), sender.go (sign and post; the 2xx rule), breaker.go and
//     health.go (per integrator), deliveries.go (resend, "tentar agora",
//     "verificar", gap repair and the test event, for an operator or the
//     integrator itself), tester.go (the receiver tester), portal.go (the
//     integrators' portal: links and sessions), integrator.go (the cadastro),
//     neterror.go (transport errors in Portuguese), leader.go, shared.go
//     and wakeup.go (replicas); the SSRF policy of callbacks is package
//     callback.
//   - In-process consumers: consumer.go (subscribe, start, the live
//     stream), colonia.go (one colonia's goroutine and cursors), guard.go
//     (a handler's error, panic or timeout), dlq.go (dead letters and
//     reprocessing); queries.go and stats.go read for the edges; notify.go
//     wakes the live tails.
//   - People: auth.go (tokens, roles and the role groups), session.go and
//     passwords.go (console sessions, operators), audittrail.go with
//     auditbounds.go (who changed what).
//   - Data at rest: package keys (every key derived from the master key,
//     and sealing), keycheck.go (the database's check of the master key),
//     sealbodies.go (the upgrade to sealed bodies), migrate.go
//     (migrate-data's checks).
package app
