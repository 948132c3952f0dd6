package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// A routing slip may send a message to any exchange, and a publish to one
// that does not exist makes the broker close the channel (404), failing
// every publish in flight on it: outputs of other runs are published again
// (duplicates) and their replies lost. So a message's bad destination stays
// that message's outcome alone: exchanges the runtime does not declare are
// asked about before a publish (step_destination.go), the answer kept
// briefly, and publishes to them go on a channel of their own, so that one
// missing in a race costs only the publishes to such exchanges, which are
// redone.

// How long an answer about an exchange the runtime does not declare is
// trusted: found, and missing. Variables for the tests.
var (
	trustExchangeFound   = 5 * time.Second
	trustExchangeMissing = time.Second
)

// ownedExchanges are the exchanges the runtime declares at start (and the
// default exchange): they exist while it runs.
func ownedExchanges(p *plan.Plan) map[string]bool {
	owned := map[string]bool{"": true}
	for _, e := range p.Exchanges {
		if e.Mode == plan.Declare && e.Apply != spec.ApplyDryRun {
			owned[e.Name] = true
		}
	}
	return owned
}

// publisher publishes with confirms: a *broker.Publisher.
type publisher interface {
	PublishFunc(ctx context.Context, msg broker.Message, done func(error)) error
}

// publisherFor is the publisher of a message to exchange: the runtime's
// own, or, for an exchange it does not declare, the one beside it.
func (r *Runtime) publisherFor(exchange string) *broker.Publisher {
	if r.owned[exchange] {
		return r.pub
	}
	return r.foreign
}

// lostExchange returns the exchange of a publish that failed because the
// exchange does not exist (the broker closed the channel, 404), or "": the
// broker is asked again, as the same close fails every other publish in
// flight on that channel, for no fault of theirs.
func (r *Runtime) lostExchange(ctx context.Context, err error) string {
	var ie *broker.IndeterminateError
	if !broker.ClosedNotFound(err) || !errors.As(err, &ie) || ie.Exchange == "" {
		return ""
	}
	r.exchanges.Forget()
	if exists, qerr := r.exchanges.Exists(ctx, ie.Exchange); qerr != nil || exists {
		return ""
	}
	return ie.Exchange
}
