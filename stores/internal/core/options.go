package core

import (
	"fmt"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultClaimTimeout      = 5 * time.Minute
	DefaultRetention         = 7 * 24 * time.Hour
	DefaultOutboxMaxAttempts = 10
	DefaultOutboxRetryDelay  = 5 * time.Second
	DefaultLockTimeout       = 5 * time.Second
)

// Options tune a store. See stores.Options.
type Options struct {
	ClaimTimeout      time.Duration
	Retention         time.Duration
	OutboxMaxAttempts int
	OutboxRetryDelay  time.Duration
	LockTimeout       time.Duration
	Now               func() time.Time
}

// WithDefaults fills zero fields and checks the result.
func (o Options) WithDefaults() (Options, error) {
	if o.ClaimTimeout == 0 {
		o.ClaimTimeout = DefaultClaimTimeout
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
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
	case o.ClaimTimeout < 0 || o.Retention < 0 || o.OutboxRetryDelay < 0 || o.LockTimeout < 0:
		return o, fmt.Errorf("store options: durations must not be negative")
	case o.OutboxMaxAttempts < 0:
		return o, fmt.Errorf("store options: outbox max attempts %d must not be negative", o.OutboxMaxAttempts)
	case o.ClaimTimeout > o.Retention:
		return o, fmt.Errorf("store options: claim timeout %s is longer than retention %s; a claim must expire before its row may be purged", o.ClaimTimeout, o.Retention)
	}
	return o, nil
}

// Lease returns the lease a request asks for, or the default, refusing one
// longer than the retention or not positive.
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

// Leases returns the lease of each request (see Lease), or the first error.
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

// Dedupe returns the indexes of the first request for each key and, for every
// request, the index of the first one with its key.
func Dedupe(reqs []ClaimRequest) (firsts []int, firstOf []int) {
	seen := make(map[string]int, len(reqs))
	firstOf = make([]int, len(reqs))
	for i, r := range reqs {
		if j, ok := seen[r.Key]; ok {
			firstOf[i] = j
			continue
		}
		seen[r.Key] = i
		firstOf[i] = i
		firsts = append(firsts, i)
	}
	return firsts, firstOf
}

// Spread copies the answers of the first request per key to its duplicates.
// A later duplicate of a key the batch claimed is IN_PROGRESS: the claim
// belongs to the first, and exactly one delivery may run the handler.
func Spread(out []Claim, firstOf []int) {
	for i, j := range firstOf {
		if i == j {
			continue
		}
		c := out[j]
		if c.State == Claimed {
			c.State = InProgress
			c.Token = 0
		}
		out[i] = c
	}
}

// Migration is one embedded schema change. See stores.Migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}
