// Package stores defines what acemq-flow keeps in a database: the
// idempotency store (claims and confirmations, keyed by message), the
// transactional outbox (messages written in a caller's transaction and
// published later by a relay), the schedule ticks (which tick of which
// schedule fired, written with the firing's outbox record) and the saga
// instances (each instance's state and steps, written with a version
// check). It knows keys, payload bytes, claims and states; it does not
// know what flows, steps or consumers are, and it never
// imports spec or runtime. It holds the interfaces and their types only: the
// backends import stores, never the reverse, and stores/storeurl, which
// imports them all, opens the one a store URL names.
//
// # Backends
//
// A store URL picks the backend:
//
//	postgres://user@host:5432/db?sslmode=verify-full  production, pgx pool (stores/postgres)
//	sqlite:/var/lib/acemq/flow.db                     embedded default, pure Go (stores/sqlite)
//	memory:                                           tests only (stores/memory)
//
// Every backend passes the same conformance suite, stores/storetest.
//
// # Entry points, in the order a caller uses them
//
//  1. storeurl.Open(ctx, url, Options) returns a Set (or a backend's own
//     Open its concrete store). It connects and creates nothing.
//  2. Set.Migrate (development, `run --create-schema`, `acemq-flow
//     migrate`) applies the embedded SQL; Set.CheckSchema (production)
//     checks an operator applied it. storeurl.WriteMigrations prints that
//     SQL for `migrate --print`.
//  3. The consumer side uses the Idempotency methods of the Set: TryClaim
//     (or TryClaimBatch) before a handler, Confirm (or ConfirmBatch) after
//     it, Release when it fails.
//  4. Application code writes outbox records with the backend's write side,
//     an Outbox[Tx] for its own transaction type: (*postgres.Store).Outbox
//     takes a pgx.Tx, (*sqlite.Store).Outbox a *sql.Tx,
//     (*memory.Store).Outbox a *memory.Tx. Never a pool.
//  5. The relay uses the OutboxRelay methods of the Set: ClaimBatch,
//     MarkPublished, MarkFailed — or, on a Set that is also an
//     OutboxLocker (PostgreSQL), ClaimLocked and the batch's Finish;
//     `outbox list [--stuck]` uses ListPending and ListStuck.
//  6. The schedule loop of every runtime replica calls ClaimTick for each
//     tick, and LastTick at start (ScheduleTicks).
//  7. The saga wrapper around a saga step's call uses the Sagas methods:
//     CreateSaga for the message that starts an instance, GetSaga and
//     AdvanceSaga (presenting the version read) for every other; with
//     the claims in the same store, SagaClaims' ClaimSagaBatch claims a
//     delivery and reads its instance in one round trip;
//     `acemq-flow sagas` uses GetSaga, ListSagas and CountSagas, and the
//     saga metrics CountSagas.
//  8. The schema registry (Schemas): RegisterSchema and the lookups, for
//     the admin listener's Confluent-compatible REST API and `acemq-flow
//     schemas`; package stores/schemacompat holds its canonical forms and
//     compatibility rules. Nothing purges it.
//  9. On a schedule (hourly): Set.Purge deletes expired claims, old
//     confirmations, records published more than
//     Options.PublishedRetention ago and ticks claimed before that but each
//     schedule's latest, and saga instances that ended before that;
//     nothing else deletes them.
//  10. Close.
//
// The protocols — who calls what when, and what each error means — are
// stated on Idempotency, OutboxRelay, ScheduleTicks and Sagas. In short: a
// duplicate claim is an answer (AlreadyConfirmed or InProgress), never an
// error; every error that is not a *StaleClaimError, *LeaseLostError or
// *StaleSagaError is a failure of the store and decides nothing;
// InProgress is never a duplicate.
//
// # Concurrency
//
// Every Set is safe for concurrent use. Correctness across replicas comes
// from the database: exactly one concurrent claimant of a key gets Claimed,
// and no two relays hold the same outbox row at once. Leases are computed
// from Options.Now, so replicas' clocks must agree to well within the
// claim timeout and the relay lease.
//
// # What the stores do not promise
//
// A claim is a lease: a handler that outlives it can be run again by
// another claimant, so handlers must be safe to run twice. The relay
// publishes at least once. Together, the outbox and the idempotency store
// give effectively-once processing, not exactly-once execution.
package stores
