package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

// needsStore reports whether the flows use the idempotency store.
func needsStore(plan *plan.Plan) bool {
	for _, c := range plan.Consumers {
		if c.Idempotent {
			return true
		}
	}
	return false
}

// openStore opens the store and checks its tables exist (creating them
// only when asked: a runtime that creates tables at start-up is a runtime
// deciding when your database changes).
func openStore(ctx context.Context, raw string, claimTimeout time.Duration, create bool) (stores.Set, error) {
	return openStoreWith(ctx, raw, stores.Options{ClaimTimeout: claimTimeout}, create)
}

// openStoreWith is openStore with every store option.
func openStoreWith(ctx context.Context, raw string, opts stores.Options, create bool) (stores.Set, error) {
	if backend, _ := storeurl.Backend(raw); backend == "sqlite" && !create {
		// Opening a SQLite file creates it: a command that fails for want
		// of tables would leave an empty acemq.db behind.
		path := storeurl.SQLitePath(raw)
		if _, err := os.Stat(path); path != "" && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the sqlite store %s does not exist; %s to create it with its tables (or `run --create-schema` in development)", redactStore(raw), migrateHint)
		}
	}
	set, err := storeurl.Open(ctx, raw, opts)
	if err != nil {
		return nil, fmt.Errorf("open the store %s: %w", redactStore(raw), err)
	}
	if create {
		if err := set.Migrate(ctx); err != nil {
			set.Close()
			return nil, fmt.Errorf("create the store's tables in %s: %w", redactStore(raw), err)
		}
		return set, nil
	}
	if err := set.CheckSchema(ctx); err != nil {
		set.Close()
		var se *stores.SchemaError
		if errors.As(err, &se) {
			return nil, schemaError(raw, se)
		}
		return nil, fmt.Errorf("check the store %s: %w", redactStore(raw), err)
	}
	return set, nil
}

// migrateHint is the remedy for missing or old tables. The store is named
// by the flag or variable the command read it from, not by its URL, whose
// password is shown as xxxxx and could not be copied.
const migrateHint = "run `acemq-flow migrate` with the same --store or ACEMQ_STORE_URL"

// schemaError says once what is wrong with the store's tables and how to fix
// it: se's own text gives the remedy without the store it is about.
func schemaError(raw string, se *stores.SchemaError) error {
	if se.Have < 0 {
		return fmt.Errorf("the %s store %s has no tables yet; %s (or `run --create-schema` in development)", se.Backend, redactStore(raw), migrateHint)
	}
	return fmt.Errorf("the %s store %s has schema version %d and this acemq-flow needs %d; %s", se.Backend, redactStore(raw), se.Have, se.Want, migrateHint)
}

// redactStore hides the password of a store URL (stores.Redact).
func redactStore(raw string) string { return stores.Redact(raw) }
