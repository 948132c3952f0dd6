package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/stores"
)

// The saga wrapper takes the place of the plain call for a saga step's or
// compensation's consumer (FLOW-FORMAT §5): it reads the instance the
// delivery belongs to (creating it for the message that starts it), asks
// decide whether the delivery is the one the instance waits for, calls the
// handler, and writes what decide makes of the outcome with the version it
// read, before the decision's messages are published and the delivery
// acknowledged (write, then publish, with a version check). A crash after
// the write and before the publish is healed by the redelivery: decide
// sends again what the write sent, with the same id.
//
// In a group's chain it is the innermost step, inside the claim gate (saga
// consumers are idempotent: a copy of a message that arrives while the
// first is handled waits for it, then is a duplicate):
// checkStep(destinationStep(delayStep(claimStep(sagaStep)))). When the
// idempotency store keeps the instances too, the claim gate and the saga
// wrapper of a step's or compensation's consumer are one step, which reads
// the instance with the claim (step_saga_claim.go).
//
// A saga with a timeout: before the handler of an instance's first step to
// run is called (no step completed yet, on every delivery of that message,
// so that a crash before the publish is healed by the redelivery), the
// timeout's message goes into the delay ladder, due at the instance's start
// plus the timeout (decide.SagaTimeoutMessage; one id per instance). When it
// arrives for an instance still running, the step it is at is failed for
// good and the completed steps are compensated in reverse; for an instance
// compensating or ended it is a duplicate. A handler still running when
// the timeout is recorded finds, when it ends, an instance that moved on:
// its write is refused as stale, it reads the instance again, and its
// result is a duplicate, not recorded, so its step is not compensated; a
// successful one is logged as an error, since what it did is not undone
// (the plugin's call timeout bounds how long that window is; keep it well
// under the saga's timeout).

// sagaStore is what the saga wrapper needs of the store.
type sagaStore interface {
	CreateSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, bool, error)
	GetSaga(ctx context.Context, id string) (stores.SagaInstance, bool, error)
	AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, error)
}

// sagaCall is the saga wrapper of one consumer: c consumes a step's queue,
// its compensation's, or the timeout's queue of saga.
type sagaCall struct {
	saga  *plan.Saga
	c     *plan.Consumer
	store sagaStore
	call  func(ctx context.Context, req Request) (decide.Result, error)
	now   func() time.Time
	// publishTimeout puts an instance's timeout message in the delay
	// ladder, confirmed; nil for a saga without a timeout.
	publishTimeout func(ctx context.Context, m decide.Message, due time.Time) error
	log            *slog.Logger // nil discards
	// outage reports a failure of the store and says whether it was the
	// store's outage (outages.failed); nil: none is.
	outage func(store string, err error) bool
	// claims, when the claim gate's store keeps the instances too
	// (stores.SagaClaims; step_saga_claim.go), claims a delivery and reads
	// its instance in one round trip. nil: the gate claims on its own, and
	// the instance is read apart.
	claims *coalescer[stores.SagaClaimRequest, stores.SagaClaim]
}

// sagaStaleTries bounds how often one delivery reads the instance again
// after a write refused as stale; each read decides anew, and the second is
// almost always a duplicate.
const sagaStaleTries = 3

// step decides what one delivery to the saga consumer does.
func (sc *sagaCall) step(ctx context.Context, d *delivery) decide.Decision {
	if sc.c.Kind == plan.KindSagaTimeout {
		return sc.timedOut(ctx, d.in)
	}
	return sc.run(ctx, d, nil)
}

// run decides what one delivery to a step's or a compensation's consumer
// does. pre, when not nil, is the instance read with the delivery's claim
// (step_saga_claim.go), used in place of the first read.
func (sc *sagaCall) run(ctx context.Context, d *delivery, pre *stores.SagaClaim) decide.Decision {
	in := d.in
	id, _ := decide.SagaInstanceID(in)
	starts := decide.SagaStarts(sc.saga, sc.c, in)
	// ran: the handler ran on this delivery and its write was refused as
	// stale; succeeded: it returned no error.
	ran, succeeded := false, false
	for try := range sagaStaleTries {
		now := sc.now()
		var (
			rec  stores.SagaInstance
			inst *decide.SagaInstance
		)
		// The starting message goes straight to CreateSaga, which returns
		// the instance when it exists already (a redelivery): one round
		// trip to the store fewer per instance.
		switch {
		case try == 0 && pre != nil:
			if pre.Found {
				rec, inst = pre.Instance, sagaOf(pre.Instance)
			}
		case try > 0 || !starts:
			got, ok, err := sc.store.GetSaga(ctx, id)
			if err != nil {
				return sc.storeFailed(in, err, now)
			}
			if ok {
				rec, inst = got, sagaOf(got)
			}
		}
		b := decide.SagaBegin(sc.saga, sc.c, inst, in, now)
		if b.Create != nil {
			stored, created, err := sc.store.CreateSaga(ctx, sagaToStore(b.Create.Instance))
			if err != nil {
				return sc.storeFailed(in, err, now)
			}
			if created && !b.Create.Run {
				return b.Create.Decision()
			}
			// Created here to run on this delivery, or created by another
			// delivery of the same message: decide on what is stored.
			rec, inst = stored, sagaOf(stored)
			b = decide.SagaBegin(sc.saga, sc.c, inst, in, now)
		}
		if b.Done != nil {
			if ran && inst != nil {
				// Its instance moved on while the handler ran: the
				// saga's timeout, most likely. What the handler did is
				// not recorded, and not undone: a person has to look
				// when it succeeded.
				level := slog.LevelWarn
				if succeeded {
					level = slog.LevelError
				}
				sc.logger().Log(ctx, level, "saga handler's result not recorded: its instance moved on while it ran; what it did is not undone",
					"saga", sc.saga.Name, "step", sc.c.Step, "message_id", in.Env.MessageID, "outcome", inst.State)
			}
			return b.Done.Decision()
		}
		if !b.TimeoutDue.IsZero() && sc.publishTimeout != nil {
			if err := sc.publishTimeout(ctx, b.Timeout, b.TimeoutDue); err != nil {
				// Not run without its timeout: the delivery comes round
				// again, and publishes it then.
				return decide.Retry(sc.c, in, fmt.Errorf("saga %q instance %q: its timeout could not be put in the delay ladder: %w", sc.saga.Name, id, err), now, rand.Float64())
			}
		}
		res, callErr := sc.call(ctx, Request{Handler: sc.c.Handler, Envelope: in.Env, Payload: in.Body, Queue: sc.c.Queue,
			ReceivedAt: d.received, Compensate: b.Compensate, StepOutput: b.StepOutput})
		end := sc.now()
		t := decide.SagaAfter(sc.saga, sc.c, *inst, in, res, callErr, end, rand.Float64())
		if !t.Write {
			return t.Decision() // retried: nothing recorded
		}
		next := sagaToStore(t.Instance)
		next.Version = rec.Version
		if _, err := sc.store.AdvanceSaga(ctx, next); err != nil {
			if errors.Is(err, stores.ErrStaleSaga) {
				ran, succeeded = true, callErr == nil
				continue // another delivery moved the instance: decide anew
			}
			// The outcome is not recorded: the delivery comes round again
			// and the handler runs again (handlers are safe to run twice).
			return sc.storeFailed(in, err, end)
		}
		sc.ended(t.Instance)
		return t.Decision()
	}
	return sc.storeFailed(in, fmt.Errorf("saga %q instance %q: written by others %d times while this delivery was handled", sc.saga.Name, id, sagaStaleTries), sc.now())
}

// timedOut decides what the saga's timeout message does to its instance:
// a running one compensates, any other is left as it is (decide.SagaTimedOut).
func (sc *sagaCall) timedOut(ctx context.Context, in decide.Inbound) decide.Decision {
	id, _ := decide.SagaInstanceID(in)
	for range sagaStaleTries {
		now := sc.now()
		rec, ok, err := sc.store.GetSaga(ctx, id)
		if err != nil {
			return sc.storeFailed(in, err, now)
		}
		var inst *decide.SagaInstance
		if ok {
			inst = sagaOf(rec)
		}
		t := decide.SagaTimeoutArrived(sc.saga, sc.c, inst, in, now)
		if !t.Write {
			return t.Decision()
		}
		next := sagaToStore(t.Instance)
		next.Version = rec.Version
		if _, err := sc.store.AdvanceSaga(ctx, next); err != nil {
			if errors.Is(err, stores.ErrStaleSaga) {
				continue
			}
			return sc.storeFailed(in, err, now)
		}
		sc.ended(t.Instance)
		return t.Decision()
	}
	return sc.storeFailed(in, fmt.Errorf("saga %q instance %q: written by others %d times while its timeout was handled", sc.saga.Name, id, sagaStaleTries), sc.now())
}

// ended logs an instance that a write just ended (message_id: the
// instance's id, the message that started it): completed at Debug, as
// the happy path; compensated as a warning; unresolved as an error, since
// a person has to undo what was not (`acemq-flow sagas unresolved`).
func (sc *sagaCall) ended(inst decide.SagaInstance) {
	log := sc.logger()
	switch inst.State {
	case decide.SagaCompleted:
		log.Debug("saga instance completed", "saga", inst.Saga, "message_id", inst.ID, "correlation_id", inst.CorrelationID)
	case decide.SagaCompensated:
		log.Warn("saga instance compensated", "saga", inst.Saga, "message_id", inst.ID, "correlation_id", inst.CorrelationID)
	case decide.SagaUnresolved:
		log.Error("saga instance unresolved: effects not undone; see acemq-flow sagas show", "saga", inst.Saga, "message_id", inst.ID, "correlation_id", inst.CorrelationID,
			"not_undone", decide.NotUndone(inst))
	}
}

func (sc *sagaCall) logger() *slog.Logger {
	if sc.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return sc.log
}

// storeFailed decides a delivery whose instance could not be read or
// written: a failure of the store decides nothing about it. An outage holds
// it and pauses the consumers that use the store (infra.go); any other
// failure retries it through its ladder.
func (sc *sagaCall) storeFailed(in decide.Inbound, err error, now time.Time) decide.Decision {
	f := decide.StoreFailure{Store: decide.StoreSaga, Err: err}
	if sc.outage != nil {
		f.Unavailable = sc.outage(decide.StoreSaga, err)
	}
	return decide.OnStoreFailure(sc.c, in, f, now, rand.Float64())
}

// sagaToStore is inst as the store keeps it (version left 0: the caller
// sets the one it read).
func sagaToStore(inst decide.SagaInstance) stores.SagaInstance {
	out := stores.SagaInstance{Saga: inst.Saga, ID: inst.ID, State: stores.SagaState(inst.State), Step: inst.Step,
		Input: inst.Input, ReplyTo: inst.ReplyTo, CorrelationID: inst.CorrelationID, StartedAt: inst.StartedAt, EndedAt: inst.EndedAt}
	for _, st := range inst.Steps {
		out.Steps = append(out.Steps, stores.SagaStep{Name: st.Name, State: stores.SagaStepState(st.State), Attempts: st.Attempts,
			Output: st.Output, CompletedAt: st.CompletedAt, CompensatedAt: st.CompensatedAt, Error: st.Error})
	}
	return out
}

// sagaOf is SagaFromStore(rec), for a transition's *SagaInstance.
func sagaOf(rec stores.SagaInstance) *decide.SagaInstance {
	i := SagaFromStore(rec)
	return &i
}

// SagaFromStore is the stored instance rec as decide sees it (its version
// left out: the saga wrapper keeps the one it read), for the transitions and
// for decide.SummaryOf.
func SagaFromStore(rec stores.SagaInstance) decide.SagaInstance {
	out := decide.SagaInstance{Saga: rec.Saga, ID: rec.ID, State: string(rec.State), Step: rec.Step,
		Input: rec.Input, ReplyTo: rec.ReplyTo, CorrelationID: rec.CorrelationID, StartedAt: rec.StartedAt, EndedAt: rec.EndedAt}
	for _, st := range rec.Steps {
		out.Steps = append(out.Steps, decide.SagaStepRecord{Name: st.Name, State: string(st.State), Attempts: st.Attempts,
			Output: st.Output, CompletedAt: st.CompletedAt, CompensatedAt: st.CompensatedAt, Error: st.Error})
	}
	return out
}

// newSagaCall is the saga wrapper of group g, whose consumer serves a step,
// a compensation or the timeout of one of the plan's sagas.
// New has checked that the saga is in the plan (checkSagas).
func (g *group) newSagaCall() *sagaCall {
	r := g.r
	s := r.plan.Saga(g.c.Saga)
	sc := &sagaCall{saga: s, c: g.c, store: batchSagas(r.opts.Sagas), now: time.Now, call: g.timedCall, log: g.log, outage: r.outages.failed}
	if s.Timeout > 0 && r.ladder != nil {
		sc.publishTimeout = func(ctx context.Context, m decide.Message, due time.Time) error {
			now := time.Now()
			if _, _, err := r.ladder.Delay(&m, m.Exchange, m.RoutingKey, due, now); err != nil {
				return err
			}
			return g.publishNow(ctx, m)
		}
	}
	g.claimWithInstance(sc)
	return sc
}

// sagaStep is the group's step for a saga consumer: the saga wrapper.
func (g *group) sagaStep() stepFunc {
	return func(ctx context.Context, d *delivery) decide.Decision { return g.saga.step(ctx, d) }
}

// timedCall calls the handler under the group's timeout, when the caller
// applies none of its own, and times it, as callStep does.
func (g *group) timedCall(ctx context.Context, req Request) (decide.Result, error) {
	if g.tmo > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.tmo)
		defer cancel()
	}
	start := time.Now()
	res, err := g.call(ctx, req)
	g.mDuration.Observe(time.Since(start).Seconds())
	return res, err
}

// publishNow publishes m and waits for the broker's confirm.
func (g *group) publishNow(ctx context.Context, m decide.Message) error {
	done := make(chan error, 1)
	if err := g.publisher(m.Exchange).PublishFunc(ctx, wire.Publishing(m), func(err error) { done <- err }); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkSagas refuses a plan whose sagas cannot run with opts: sagas need
// the store their instances are kept in (Options.Sagas), and their
// consumers, idempotent, the idempotency store; each saga consumer's saga
// must be in the plan.
func checkSagas(pl *plan.Plan, opts Options) error {
	if len(pl.Sagas) == 0 {
		return nil
	}
	if opts.Sagas == nil || opts.Store == nil {
		s := pl.Sagas[0]
		return fmt.Errorf("%s: saga %q keeps its instances in a store, and none is configured; run with --store (sqlite:PATH for one runtime, postgres://… for several)", s.At, s.Name)
	}
	for _, c := range pl.Consumers {
		if c.Saga != "" && pl.Saga(c.Saga) == nil {
			return fmt.Errorf("%s: consumer %q serves saga %q, which is not in the plan; compile the plan from the flow files", c.At, c.ID, c.Saga)
		}
	}
	return nil
}
