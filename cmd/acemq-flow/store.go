package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/stores"
)

// needsStore reports whether the flows use the idempotency store.
func needsStore(plan *runtime.Plan) bool {
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
	opts := stores.Options{ClaimTimeout: claimTimeout}
	set, err := stores.Open(ctx, raw, opts)
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
			return nil, fmt.Errorf("%w; run `acemq-flow migrate --store %s` (or --create-schema in development)", err, redactStore(raw))
		}
		return nil, fmt.Errorf("check the store %s: %w", redactStore(raw), err)
	}
	return set, nil
}

// redactStore hides a password in a store URL.
func redactStore(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
