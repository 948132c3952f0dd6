package runtime

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-flow/runtime/decide"
)

// A group's step is a chain of small wrappers around the handler call,
// each in a file of its own: the claim check (step_claimcheck.go), the
// Avro codec (step_codec.go), the payload checks (step_check.go), the check
// that the exchanges a decision publishes to exist (step_destination.go),
// the delay ladder for what goes to a step with a delay (step_delay.go),
// the claim gate of an idempotent consumer (step_claim.go), and the call
// with its timeout (step_call.go), or, for a saga's consumer, the saga
// wrapper around it (step_saga.go). A wrapper does its part and either decides the
// delivery itself (a bad payload is dead-lettered, a duplicate
// acknowledged) or calls the next one. What a delivery needs later, once
// the decision is carried out, travels in its delivery value.

// delivery is one delivery on its way through the step.
type delivery struct {
	in       decide.Inbound
	received time.Time  // when the group took the delivery, for the handler's request
	ticket   *Ticket    // the claim the gate took, to confirm or release once settled
	span     trace.Span // the delivery's span, nil with tracing off (step_trace.go)
}

// stepFunc decides what happens to one delivery.
type stepFunc func(ctx context.Context, d *delivery) decide.Decision

// steps builds the group's step, outermost wrapper first.
func (g *group) steps() stepFunc {
	step := g.callStep()
	if g.saga != nil {
		step = g.sagaStep()
	}
	if g.gate != nil {
		step = g.claimStep(step)
	}
	// The claim check is outermost: the payload checks read the body it
	// fetched, and what every other wrapper publishes is what it stores.
	// The codec is next: it decodes the body the claim check fetched, so
	// that the payload checks read JSON, and encodes what is stored.
	return g.claimCheckStep(g.codecStep(g.checkStep(g.destinationStep(g.delayStep(step)))))
}
