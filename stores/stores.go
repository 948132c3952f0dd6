package stores

import (
	"context"
	"fmt"
)

// Migration is one embedded schema file of a backend: Version orders them,
// Name is the file name (0001_idempotency.sql) and SQL its text, exactly what
// Migrate runs.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// SchemaError is returned by CheckSchema when a store's tables are missing
// (Have < 0) or behind the embedded migrations (Have < Want). Its message
// tells the operator to run `acemq-flow migrate`.
type SchemaError struct {
	Backend string
	Have    int
	Want    int
}

// Error tells the operator what to run.
func (e *SchemaError) Error() string {
	if e.Have < 0 {
		return fmt.Sprintf("%s store: tables not created; run `acemq-flow migrate` (or `run --create-schema` in development)", e.Backend)
	}
	return fmt.Sprintf("%s store: schema at version %d, want %d; run `acemq-flow migrate`", e.Backend, e.Have, e.Want)
}

// Set is what every backend provides behind one store URL: the idempotency
// store, the relay side of the outbox, the schedule ticks, the saga
// instances and the schema registry (which Purge never touches), plus
// schema management. The outbox write side depends on the backend's transaction type; get it from
// the concrete store (postgres.Store.Outbox, sqlite.Store.Outbox,
// memory.Store.Outbox). Package stores/storeurl opens a Set from a store
// URL.
//
// Lifecycle: Open; at start-up either Migrate (development, `run
// --create-schema`, `acemq-flow migrate`) or CheckSchema (production, where
// the operator applies the migrations); use; Close. Nothing creates tables
// unless Migrate is called. A Set is safe for concurrent use; Close is
// idempotent and must not race with other calls.
type Set interface {
	Idempotency
	OutboxRelay
	ScheduleTicks
	Sagas
	Schemas

	// Migrate applies the backend's embedded migrations that are not yet
	// recorded in acemq_migrations. Concurrent Migrate calls are safe.
	Migrate(ctx context.Context) error

	// CheckSchema returns a *SchemaError when the tables are missing or
	// older than this build expects, and nil when they are current.
	CheckSchema(ctx context.Context) error

	// Purge deletes, once, what the store no longer has to keep: expired
	// claims and confirmations older than Options.Retention (PurgeExpired),
	// then outbox records published more than Options.PublishedRetention
	// ago (PurgePublished), then schedule ticks claimed before that same
	// cut-off but each schedule's latest (PurgeTicks), then saga instances
	// that ended before it (PurgeSagas); pending and stuck records, and
	// instances not ended, stay. Nothing else calls those three: without a Purge on a
	// schedule (hourly is plenty: `acemq-flow purge`, or runtime.RunPurges
	// beside the consumers) the tables grow for ever. It deletes in
	// batches, each a short transaction of its own (stores/README.md). Each
	// purge runs even when the one before fails; the counts are of the rows
	// deleted, up to a failure, and the error joins the failures. An error
	// decides nothing: the next Purge deletes what this one left.
	Purge(ctx context.Context) (Purged, error)

	// Close releases the connections (memory: discards the data).
	Close() error
}
