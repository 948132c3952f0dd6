package stores

import (
	"fmt"
	"time"
)

// Options tune a store; the zero value gives the defaults.
//
//   - ClaimTimeout: the default lease of an idempotency claim (5m). Set it
//     comfortably above the slowest handler. It may not exceed Retention.
//   - Retention: how long a confirmation is kept (7 days, 168h). It must
//     outlast the longest retry ladder plus any manual replay, or a late
//     duplicate is handled again.
//   - PublishedRetention: how long an outbox record is kept after it was
//     published, before Set.Purge deletes it (7 days, 168h). Nothing reads
//     a published row again; keep them as long as an operator may want to
//     look up what was sent.
//   - OutboxMaxAttempts: failed publishes after which an outbox row is
//     stuck (10).
//   - OutboxRetryDelay: how long a failed outbox row waits before it is
//     handed out again (5s).
//   - LockTimeout: how long a statement waits for a lock held elsewhere
//     before failing with an error: SQLite's busy_timeout (default 5s) and
//     PostgreSQL's lock_timeout (default: the server's setting).
//   - Now: the clock leases and retention are computed from (time.Now).
//     Replicas sharing a database must have clocks that agree to well within
//     the claim timeout. Tests pass a fake clock.
type Options struct {
	ClaimTimeout       time.Duration
	Retention          time.Duration
	PublishedRetention time.Duration
	OutboxMaxAttempts  int
	OutboxRetryDelay   time.Duration
	LockTimeout        time.Duration
	Now                func() time.Time
}

// Defaults for Options fields left zero. DefaultLockTimeout is SQLite's;
// PostgreSQL keeps the server's lock_timeout unless LockTimeout is set.
const (
	DefaultClaimTimeout       = 5 * time.Minute
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultPublishedRetention = 7 * 24 * time.Hour
	DefaultOutboxMaxAttempts  = 10
	DefaultOutboxRetryDelay   = 5 * time.Second
	DefaultLockTimeout        = 5 * time.Second
)

// WithDefaults returns o with its zero fields (but LockTimeout, whose
// default depends on the backend) set to the defaults, or an error naming
// the first field that is out of range. Every backend's Open calls it.
func (o Options) WithDefaults() (Options, error) {
	if o.ClaimTimeout == 0 {
		o.ClaimTimeout = DefaultClaimTimeout
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.PublishedRetention == 0 {
		o.PublishedRetention = DefaultPublishedRetention
	}
	if o.OutboxMaxAttempts == 0 {
		o.OutboxMaxAttempts = DefaultOutboxMaxAttempts
	}
	if o.OutboxRetryDelay == 0 {
		o.OutboxRetryDelay = DefaultOutboxRetryDelay
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.ClaimTimeout < 0 || o.Retention < 0 || o.PublishedRetention < 0 || o.OutboxRetryDelay < 0 || o.LockTimeout < 0:
		return o, fmt.Errorf("store options: durations must not be negative")
	case o.OutboxMaxAttempts < 0:
		return o, fmt.Errorf("store options: outbox max attempts %d must not be negative", o.OutboxMaxAttempts)
	case o.ClaimTimeout > o.Retention:
		return o, fmt.Errorf("store options: claim timeout %s is longer than retention %s; a claim must expire before its row may be purged", o.ClaimTimeout, o.Retention)
	}
	return o, nil
}

// Lease returns the lease r asks for, or ClaimTimeout when r.Lease is
// zero. It refuses an empty key, a negative lease and one longer than
// Retention. Call it on Options that went through WithDefaults.
func (o Options) Lease(r ClaimRequest) (time.Duration, error) {
	if r.Key == "" {
		return 0, fmt.Errorf("claim: empty idempotency key")
	}
	switch {
	case r.Lease == 0:
		return o.ClaimTimeout, nil
	case r.Lease < 0:
		return 0, fmt.Errorf("idempotency key %q: claim lease %s must be positive", r.Key, r.Lease)
	case r.Lease > o.Retention:
		return 0, fmt.Errorf("idempotency key %q: claim lease %s is longer than retention %s", r.Key, r.Lease, o.Retention)
	}
	return r.Lease, nil
}

// Leases returns the lease of each request (see Lease), or the first
// refusal.
func (o Options) Leases(reqs []ClaimRequest) ([]time.Duration, error) {
	leases := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		l, err := o.Lease(r)
		if err != nil {
			return nil, err
		}
		leases[i] = l
	}
	return leases, nil
}
