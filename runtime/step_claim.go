package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/stores"
)

// claimStep claims an idempotent delivery's message id before the work
// (patterns.txt, "Claim, then work, then confirm"): a duplicate is
// acknowledged without the call, a claim held elsewhere comes round through
// the 1s rung, and a store failure is never taken as an answer: an outage
// holds the delivery and pauses the group (infra.go), anything else is a
// retryable failure of the delivery. The claim taken rides on the delivery, to be
// confirmed once what the call produced is confirmed by the broker, or
// released when it failed.
func (g *group) claimStep(next stepFunc) stepFunc {
	if g.saga != nil && g.saga.claims != nil {
		return g.sagaClaimStep() // the claim reads the instance (step_saga_claim.go)
	}
	return func(ctx context.Context, d *delivery) decide.Decision {
		t, state, err := g.gate.Begin(ctx, d.in.Env.MessageID)
		switch {
		case errors.Is(err, ErrNoMessageID): // decide.Claimed dead-letters it
		case err != nil:
			return g.storeFailed(d.in, decide.StoreIdempotency, err)
		}
		if dec := decide.Claimed(g.c, d.in, claimAnswer(state), time.Now()); dec != nil {
			return *dec
		}
		d.ticket = &t
		return next(ctx, d)
	}
}

// claimAnswer is the store's answer to a claim as decide reads it.
func claimAnswer(s stores.ClaimState) decide.ClaimAnswer {
	switch s {
	case stores.AlreadyConfirmed:
		return decide.ClaimConfirmed
	case stores.InProgress:
		return decide.ClaimHeld
	}
	return decide.ClaimTaken
}
