package decide

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// A failure of the runtime's own infrastructure is not the message's fault
// (issue 23): a store that cannot be reached says nothing about the
// delivery, and spending its attempts on the outage would dead-letter, once
// the outage outlasts the ladder, messages nothing was wrong with. Such a
// delivery is held instead (Hold: round the 1s rung, its attempt count as it
// arrived, never dead-lettered) and the consumers that use the store pause
// until a probe of it succeeds (PauseBackoff between probes).

// OutcomeHeld counts deliveries held back because a store of the runtime's
// own was unavailable: sent round the 1s rung unchanged, no attempt spent.
const OutcomeHeld = "held"

// The runtime's own stores, as logs, metrics and readiness name them.
const (
	StoreIdempotency = "idempotency" // the claims of idempotent consumers
	StoreSaga        = "saga"        // saga instances
	StoreBlobs       = "blob"        // the claim check's blob store
)

// StoreFailure is a failure of one of the runtime's own stores while a
// delivery was handled.
type StoreFailure struct {
	Store string // StoreIdempotency, StoreSaga or StoreBlobs
	Err   error
	// Unavailable is true when the store layer classified Err as an outage
	// of the store (stores.ErrUnavailable: unreachable, the connection
	// lost, the server restarting, a round trip out of time) rather than a
	// refusal of what was asked.
	Unavailable bool
}

// OnStoreFailure decides a delivery whose handling failed in a store of the
// runtime's own. An outage (f.Unavailable) holds it (Hold) and the caller
// pauses the consumers that use the store; any other failure of the store
// is a retryable failure of the delivery, through its ladder (Retry).
// jitter is a number in [0,1) drawn by the caller.
func OnStoreFailure(c *plan.Consumer, in Inbound, f StoreFailure, now time.Time, jitter float64) Decision {
	if f.Unavailable {
		return Hold(c, in, f)
	}
	return Retry(c, in, fmt.Errorf("%s store: %w", f.Store, f.Err), now, jitter)
}

// Hold sends the delivery round the 1s rung with its envelope unchanged, as
// InProgress does: x-acemq-attempt stays what it arrived with, and it is
// never dead-lettered. It is not a requeue: a quorum queue counts requeues
// against x-delivery-limit, which an outage would use up.
func Hold(c *plan.Consumer, in Inbound, f StoreFailure) Decision {
	d := InProgress(c, in)
	d.Outcome = OutcomeHeld
	d.Reason = fmt.Sprintf("%s store unavailable: %v", f.Store, f.Err)
	return d
}

// The pause's probe intervals: after the first probe (at once) fails, the
// next comes a second later, each next one twice as late, at most every
// 30 s.
const (
	PauseFirstProbe = time.Second
	PauseMaxProbe   = 30 * time.Second
)

// PauseBackoff is how long consumers paused by an outage of a store wait
// before probing it again after probe number failed (from 0) failed: 1s,
// 2s, 4s, … up to 30s.
func PauseBackoff(failed int) time.Duration {
	d := PauseFirstProbe
	for range min(max(failed, 0), 5) {
		d *= 2
	}
	return min(d, PauseMaxProbe)
}
