package stores

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ClaimState is the answer to a claim: Claimed, AlreadyConfirmed or
// InProgress. Its String form ("claimed", "already_confirmed",
// "in_progress") is what telemetry records.
type ClaimState int

// The three answers to a claim.
//
//   - Claimed: the caller holds the key until its lease ends; it runs the
//     handler, then calls Confirm (success) or Release (failure) with the
//     Token it was given.
//   - AlreadyConfirmed: a previous delivery was handled and confirmed; the
//     caller acknowledges without running the handler (a duplicate).
//   - InProgress: another claimant holds an unexpired lease. This is not a
//     duplicate: the holder may still fail or die. The caller must not
//     acknowledge the delivery as done; it brings it round again later,
//     until the claim is confirmed or its lease expires and is taken over.
const (
	Claimed ClaimState = iota + 1
	AlreadyConfirmed
	InProgress
)

// String returns the state as telemetry records it.
func (s ClaimState) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case AlreadyConfirmed:
		return "already_confirmed"
	case InProgress:
		return "in_progress"
	}
	return fmt.Sprintf("ClaimState(%d)", int(s))
}

// Token is a fencing value handed out with every Claimed answer. Tokens are
// unique within a store and increase with every claim, so a later claim of a
// key always carries a larger token than an earlier one. A Confirm or Release
// is accepted only with the token that holds the key now.
type Token int64

// ClaimRequest asks for a claim on Key.
//
// Owner is recorded with the claim for operators (a replica and consumer
// name, say); it decides nothing. Lease is how long the claim holds before
// another claimant may take it over; zero means Options.ClaimTimeout, and a
// lease longer than Options.Retention is refused.
type ClaimRequest struct {
	Key   string
	Owner string
	Lease time.Duration
}

// Claim is the answer to one ClaimRequest. Token is set only when State is
// Claimed. Owner and ExpiresAt describe the current holder: for Claimed the
// caller's own lease, for InProgress the other claimant's (when its lease
// ends), for AlreadyConfirmed when the confirmation may be purged.
type Claim struct {
	State     ClaimState
	Token     Token
	Owner     string
	ExpiresAt time.Time
}

// Held names a claim its holder presents to ConfirmBatch: the key and the
// token TryClaim returned.
type Held struct {
	Key   string
	Token Token
}

// ErrStaleClaim is matched (errors.Is) by every *StaleClaimError.
var ErrStaleClaim = errors.New("stale claim")

// StaleClaimError refuses a Confirm or Release whose token no longer holds
// the key: the lease expired and another claimant took it over (Current is
// its token), the claim was released or purged (Current is 0), or, for
// Release, the claim was already confirmed (Current == Token, Confirmed).
// The refused caller must not treat its work as recorded; the message will
// be, or already was, handled by the claimant that holds the key.
type StaleClaimError struct {
	Key       string
	Token     Token
	Current   Token
	Confirmed bool
}

// Error says which key and which token, and what holds the key now.
func (e *StaleClaimError) Error() string {
	switch {
	case e.Current == 0:
		return fmt.Sprintf("idempotency key %q: claim token %d is stale: no claim exists (released, expired and purged, or never made)", e.Key, e.Token)
	case e.Current == e.Token && e.Confirmed:
		return fmt.Sprintf("idempotency key %q: claim token %d is already confirmed", e.Key, e.Token)
	case e.Confirmed:
		return fmt.Sprintf("idempotency key %q: claim token %d is stale: the lease was taken over and confirmed by token %d", e.Key, e.Token, e.Current)
	}
	return fmt.Sprintf("idempotency key %q: claim token %d is stale: the lease was taken over by token %d", e.Key, e.Token, e.Current)
}

// Is reports whether target is ErrStaleClaim.
func (e *StaleClaimError) Is(target error) bool { return target == ErrStaleClaim }

// Idempotency is the idempotency store: it records, per key, that a message
// is being handled (a claim, which is a lease) and then that it was handled
// (a confirmation, kept for the retention).
//
// Protocol, for each delivery of a message with key K:
//
//  1. Before the handler: TryClaim(K). Claimed → run the handler.
//     AlreadyConfirmed → acknowledge without running it. InProgress → bring
//     the delivery round again later; never acknowledge it as handled.
//  2. Handler returned: Confirm(K, token). Handler failed: Release(K, token),
//     so that the retry can claim at once instead of waiting for the lease.
//  3. A *StaleClaimError from Confirm or Release means the lease was taken
//     over; the caller's work is not recorded.
//  4. On a schedule: PurgeExpired, which removes expired leases and
//     confirmations older than the retention (Set.Purge calls it, with the
//     outbox's purge).
//
// Any error other than a *StaleClaimError is a failure of the store (a lock
// timeout, a lost connection, a cancelled context): nothing was decided, and
// the caller must not read it as any ClaimState. A duplicate claim is never
// an error; every backend decides it by looking for the row.
//
// Exactly one of any number of concurrent claimants of a key — in one
// process or across replicas sharing the database — gets Claimed while a
// lease is live. The claim is taken before the work, so a handler that dies
// leaves a claim that blocks retries until its lease expires; set the claim
// timeout comfortably above the slowest handler. A handler still has to be
// safe to run twice: an expired lease is taken over and the work runs again.
//
// Implementations are safe for concurrent use.
type Idempotency interface {
	// TryClaim claims r.Key for r.Owner, or reports who has it.
	TryClaim(ctx context.Context, r ClaimRequest) (Claim, error)

	// TryClaimBatch claims many keys in one database round trip (or one
	// transaction), for concurrent deliveries. out[i] answers reqs[i], and
	// each answer keeps TryClaim's guarantee. When a key appears more than
	// once, the first request is answered as TryClaim would and the later
	// ones are never Claimed. An error means no answer for any request.
	TryClaimBatch(ctx context.Context, reqs []ClaimRequest) (out []Claim, err error)

	// Confirm records that the holder of token finished with key. Confirming
	// again with the same token succeeds. A confirm after the lease expired
	// succeeds if nobody took the key over. Otherwise it returns a
	// *StaleClaimError.
	Confirm(ctx context.Context, key string, token Token) error

	// ConfirmBatch confirms many claims in one round trip. refused[i] is nil
	// when held[i] was confirmed and a *StaleClaimError when it was refused;
	// err non-nil means the store failed and nothing is known.
	ConfirmBatch(ctx context.Context, held []Held) (refused []error, err error)

	// Release gives key up so that the next claim succeeds at once. It
	// returns a *StaleClaimError when token does not hold the key, including
	// when the claim was already confirmed (which stays confirmed).
	Release(ctx context.Context, key string, token Token) error

	// PurgeExpired deletes expired leases and confirmations older than the
	// retention, and returns how many rows it deleted.
	PurgeExpired(ctx context.Context) (int64, error)
}
