// Package core holds the types every store backend and the stores package
// share. The stores package re-exports each of them under the same name; a
// caller outside stores never imports core. It exists so that the backends can
// use these types while stores.Open imports the backends.
package core

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ClaimState is the answer to a claim. See stores.ClaimState.
type ClaimState int

// The three answers to a claim.
const (
	Claimed ClaimState = iota + 1
	AlreadyConfirmed
	InProgress
)

// String returns the state as telemetry writes it.
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

// Token is a fencing value. See stores.Token.
type Token int64

// ClaimRequest asks for a claim. See stores.ClaimRequest.
type ClaimRequest struct {
	Key   string
	Owner string
	Lease time.Duration
}

// Claim is the answer to one ClaimRequest. See stores.Claim.
type Claim struct {
	State     ClaimState
	Token     Token
	Owner     string
	ExpiresAt time.Time
}

// Held names a claim its holder presents. See stores.Held.
type Held struct {
	Key   string
	Token Token
}

// ErrStaleClaim is matched by every StaleClaimError.
var ErrStaleClaim = errors.New("stale claim")

// StaleClaimError refuses a confirm or release. See stores.StaleClaimError.
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

// Stale builds the refusal for a presented token given what the store holds
// for the key now: current is 0 when no row exists.
func Stale(key string, presented, current Token, confirmed bool) *StaleClaimError {
	return &StaleClaimError{Key: key, Token: presented, Current: current, Confirmed: confirmed}
}

// ErrLeaseLost is matched by every LeaseLostError.
var ErrLeaseLost = errors.New("outbox lease lost")

// LeaseLostError refuses a relay's mark. See stores.LeaseLostError.
type LeaseLostError struct {
	Owner string
	IDs   []int64
}

// Error names the relay and the rows.
func (e *LeaseLostError) Error() string {
	ids := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		ids[i] = fmt.Sprint(id)
	}
	return fmt.Sprintf("outbox relay %q no longer holds the lease on rows %s (taken over by another relay, or unknown ids)", e.Owner, strings.Join(ids, ","))
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }
