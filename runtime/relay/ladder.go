package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/stores"
)

// A record with a deliver_at still ahead is published into the delay
// ladder (FLOW-FORMAT §4, "Users of the ladder": outbox records with a
// deliver_at), addressed to its exchange and routing key in the ladder's
// headers exactly as `send --at` addresses a message, so that the `.due`
// consumer of any runtime delivers it when due; the publish is confirmed
// and mandatory like any other, and the record is marked published once
// the ladder has it. A deliver_at already passed, or none, publishes the
// record straight to its exchange.
//
// The relay declares the ladder itself, create-only, the first time a
// record needs it: a relay started beside a runtime (`run --relay`) may
// claim such a record before the runtime has declared anything, and a
// relay run alone (`acemq-flow relay`) serves services whose runtimes run
// elsewhere. A publish into a ladder nobody declared would close the
// relay's channel, failing every publish in flight on it, for ever. A relay
// whose records are all due now declares nothing.

// ladderDeclarer declares the delay ladder (*broker.Topology).
type ladderDeclarer interface {
	CheckDrift(ctx context.Context, exchanges []broker.Exchange, queues []broker.Queue) error
	Declare(ctx context.Context, exchanges []broker.Exchange, queues []broker.Queue, bindings []broker.Binding) error
}

// ladderDeclareTimeout bounds one declaration of the ladder: 30 entities
// and their bindings, one round trip each.
const ladderDeclareTimeout = 30 * time.Second

// ladderRefusalTTL is how long a refusal of the ladder is the answer for
// every record due later, before the broker is asked again: a backlog of
// such records should not cost a drift check each.
const ladderRefusalTTL = 10 * time.Second

// delay readdresses msg, rec's message, to the delay ladder when rec is
// due later than now. It returns an error when the record cannot go there:
// a delay beyond the ladder (the record fails with the reason), the ladder
// refused by the broker (declared otherwise: it fails too), or the broker
// not answering the declaration (the outcome is left to the lease).
func (r *Relay) delay(ctx context.Context, rec *stores.OutboxRecord, msg *broker.Message) error {
	now := time.Now()
	if rec.DeliverAt.IsZero() || !rec.DeliverAt.After(now) {
		return nil
	}
	m := decide.Message{Headers: decide.Table(msg.Publishing.Headers), Expiration: msg.Publishing.Expiration}
	exchange, key, err := r.ladder.Delay(&m, rec.Exchange, rec.RoutingKey, rec.DeliverAt, now)
	if err != nil {
		return fmt.Errorf("outbox record %d: deliver_at %s: %w", rec.ID, decide.FormatDueAt(rec.DeliverAt), err)
	}
	if err := r.declareLadder(ctx); err != nil {
		return err
	}
	msg.Exchange, msg.RoutingKey = exchange, key
	msg.Publishing.Headers, msg.Publishing.Expiration = map[string]any(m.Headers), m.Expiration
	return nil
}

// declareLadder declares the delay ladder once (each caller waits for the
// first). A declaration the broker did not answer is tried again by the
// next record; one it refused, after ladderRefusalTTL.
func (r *Relay) declareLadder(ctx context.Context) error {
	if r.opts.Ladder == nil {
		return nil
	}
	r.ladderMu.Lock()
	defer r.ladderMu.Unlock()
	if r.ladderDone {
		return nil
	}
	if r.ladderRefused != nil && time.Since(r.ladderRefusedAt) < ladderRefusalTTL {
		return r.ladderRefused
	}
	ctx, cancel := context.WithTimeout(ctx, ladderDeclareTimeout)
	defer cancel()
	xs, qs, bs := ladderTopology(r.ladder.Unit)
	err := r.opts.Ladder.CheckDrift(ctx, xs, qs)
	if err == nil {
		err = r.opts.Ladder.Declare(ctx, xs, qs, bs)
	}
	if err != nil {
		r.log.Warn("delay ladder not declared; records due later wait", "error", err)
		if refused(err) {
			r.ladderRefused = fmt.Errorf("the delay ladder this record is due through cannot be declared: %w", err)
			r.ladderRefusedAt = time.Now()
			return r.ladderRefused
		}
		return &broker.IndeterminateError{Exchange: plan.LadderExchange(0), Err: fmt.Errorf("declare the delay ladder: %w", err)}
	}
	r.ladderDone, r.ladderRefused = true, nil
	r.log.Info("delay ladder declared", "levels", plan.LadderLevels, "queue", plan.DueQueue)
	return nil
}

// refused reports whether the broker answered a declaration with a
// refusal (something exists with other settings, access refused), which
// declaring again will not change, rather than not answering.
func refused(err error) bool {
	return errors.Is(err, broker.ErrDrift) || broker.ReplyCode(err) != 0
}

// ladderTopology is plan.Ladder(unit) as the broker declares it.
func ladderTopology(unit time.Duration) ([]broker.Exchange, []broker.Queue, []broker.Binding) {
	xs, qs, bs := plan.Ladder(unit)
	bx := make([]broker.Exchange, 0, len(xs))
	for _, x := range xs {
		bx = append(bx, broker.Exchange{Name: x.Name, Kind: x.Type, Durable: true})
	}
	bq := make([]broker.Queue, 0, len(qs))
	for _, q := range qs {
		bq = append(bq, broker.Queue{Name: q.Name, Durable: true, Args: q.Arguments, Unconsumed: q.Holding()})
	}
	bb := make([]broker.Binding, 0, len(bs))
	for _, b := range bs {
		bb = append(bb, broker.Binding{Exchange: b.Exchange, Queue: b.Queue, ToExchange: b.ToExchange, RoutingKey: b.RoutingKey})
	}
	return bx, bq, bb
}
