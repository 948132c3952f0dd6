package flowtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// Call runs a handler for real (--plugins): the handler's name, the
// delivery's envelope and payload, whether it is a compensation and the
// output of the step it undoes.
type Call func(ctx context.Context, c *plan.Consumer, env decide.Envelope, payload []byte, compensate bool, stepOutput []byte) (decide.Result, error)

// record is what happened in one case, for the expectations.
type record struct {
	route         []string
	outputs       map[string][]decide.Message
	replies       []decide.Message
	retries       []retryRecord
	dead          []deadRecord
	delays        []delayRecord
	firings       []firingRecord
	unroutableDue int
}

type retryRecord struct {
	queue   string
	attempt int
	delay   time.Duration
}

type deadRecord struct {
	queue string
	m     decide.Message
}

type delayRecord struct {
	exchange, routingKey string
	in                   time.Duration
}

type firingRecord struct {
	schedule string
	tick     time.Time
}

func (r *record) output(name string, m decide.Message) {
	if r.outputs == nil {
		r.outputs = map[string][]decide.Message{}
	}
	r.outputs[name] = append(r.outputs[name], m)
}

func (r *record) entered(q *queue, m decide.Message) {
	if q.q.Purpose == "dlq" || q.q.Purpose == "parked" || strings.HasSuffix(q.q.Name, ".dlq") || strings.HasSuffix(q.q.Name, ".parked") {
		r.dead = append(r.dead, deadRecord{queue: q.q.Name, m: m})
	}
}

func (r *record) delayed(m decide.Message, now time.Time) {
	ex, key, due, ok := decide.Destination(m.Headers)
	if ok {
		r.delays = append(r.delays, delayRecord{exchange: ex, routingKey: key, in: due.Sub(now).Round(time.Millisecond)})
	}
}

// sim runs one case.
type sim struct {
	pl         *plan.Plan
	c          *Case
	now        time.Time
	b          *broker
	rec        *record
	routes     map[string][]string // pipeline → declared route
	sagas      map[string]*decide.SagaInstance
	comps      map[string][]string // instance → compensations run, in order
	order      []string            // instances in the order they started
	claimed    map[string]bool     // idempotent consumer's id and message id, confirmed
	stepDelays decide.StepDelays
	call       Call
	timeouts   map[string]time.Duration // plugin name → call timeout
	steps      int
}

// maxDeliveries bounds one case, so that a flow that loops ends as a
// failure instead of a hang.
const maxDeliveries = 100_000

func newSim(pl *plan.Plan, c *Case, start time.Time, call Call) *sim {
	s := &sim{pl: pl, c: c, now: start, rec: &record{}, routes: map[string][]string{}, sagas: map[string]*decide.SagaInstance{},
		comps: map[string][]string{}, claimed: map[string]bool{}, stepDelays: decide.DelayedSteps(pl), call: call, timeouts: map[string]time.Duration{}}
	s.b = newBroker(pl, s.rec, &s.now)
	for _, p := range pl.Pipelines {
		s.routes[p.Name] = p.Route
	}
	for _, p := range pl.Plugins {
		s.timeouts[p.Name] = time.Duration(p.Timeout)
	}
	return s
}

// schedules starts the plan's schedules' tickers at the case's start.
func (s *sim) schedules() error {
	for _, sc := range s.pl.Schedules {
		t, err := decide.NewTicker(sc.Cron, time.Duration(sc.Every), sc.Timezone)
		if err != nil {
			return fmt.Errorf("%s: schedule %q: %v", sc.At, sc.Name, err)
		}
		s.tick(sc, t, t.Next(s.now))
	}
	return nil
}

func (s *sim) tick(sc plan.Schedule, t decide.Ticker, at time.Time) {
	if at.IsZero() {
		return
	}
	s.b.at(at, true, func() error {
		m, err := decide.TickMessage(s.pl, sc, at)
		if err != nil {
			return err
		}
		s.rec.firings = append(s.rec.firings, firingRecord{schedule: sc.Name, tick: at})
		s.tick(sc, t, t.Next(at))
		if err := s.b.publish(m); err != nil {
			return fmt.Errorf("schedule %q fired at %s: %v", sc.Name, decide.TickText(at), err)
		}
		return nil
	})
}

// drain delivers every message waiting in a consumed queue.
func (s *sim) drain(ctx context.Context) error {
	for len(s.b.ready) > 0 {
		r := s.b.ready[0]
		s.b.ready = s.b.ready[1:]
		s.steps++
		if s.steps > maxDeliveries {
			return fmt.Errorf("more than %d deliveries: the flow does not come to rest (a loop between queues?)", maxDeliveries)
		}
		s.deliver(ctx, r.q.consumer, r.m)
	}
	return nil
}

func (s *sim) fire(ctx context.Context, e *event) error {
	if e.at.After(s.now) {
		s.now = e.at
	}
	if err := e.fire(); err != nil {
		return err
	}
	return s.drain(ctx)
}

// untilIdle runs until nothing is left to happen but schedules' ticks.
func (s *sim) untilIdle(ctx context.Context) error {
	if err := s.drain(ctx); err != nil {
		return err
	}
	for n := 0; ; n++ {
		e := s.b.next(time.Time{}, false)
		if e == nil {
			return nil
		}
		if n > maxDeliveries {
			return fmt.Errorf("more than %d timed events: the flow does not come to rest", maxDeliveries)
		}
		if err := s.fire(ctx, e); err != nil {
			return err
		}
	}
}

// advance moves the clock by d, firing everything due on the way.
func (s *sim) advance(ctx context.Context, d time.Duration) error {
	end := s.now.Add(d)
	if err := s.drain(ctx); err != nil {
		return err
	}
	for {
		e := s.b.next(end, true)
		if e == nil {
			break
		}
		if err := s.fire(ctx, e); err != nil {
			return err
		}
	}
	if end.After(s.now) {
		s.now = end
	}
	return nil
}

// send publishes what a case's send step says.
func (s *sim) send(sd *Send) error {
	var m decide.Message
	if sd.Queue != "" {
		id := decide.NewMessageID()
		m = decide.Message{Exchange: "", RoutingKey: sd.Queue, MessageID: id, CorrelationID: id, ContentType: "application/json",
			DeliveryMode: decide.Persistent, Timestamp: s.now.Truncate(time.Second), Body: sd.Payload,
			Headers: decide.Table{plan.HeaderAttempt: int64(1), plan.HeaderFirstSeen: decide.FormatTime(s.now)}}
	} else {
		var err error
		if m, err = decide.FirstMessage(s.pl, sd.Target, sd.Payload, s.now); err != nil {
			return err
		}
	}
	if sd.ID != "" {
		m.MessageID, m.CorrelationID = sd.ID, sd.ID
	}
	m.ReplyTo = sd.ReplyTo
	if sd.In > 0 {
		if _, _, err := s.b.ladder.Delay(&m, m.Exchange, m.RoutingKey, s.now.Add(sd.In), s.now); err != nil {
			return err
		}
	}
	return s.b.publish(m)
}

// deliver is one delivery to consumer c, decided as the engine's group
// decides it: checkStep(destinationStep(delayStep(claimStep(call or saga)))).
func (s *sim) deliver(ctx context.Context, c *plan.Consumer, m decide.Message) {
	in := decide.InboundOf(m)
	ran := ""
	var dec decide.Decision
	if d := decide.Precheck(c, in, s.now); d != nil {
		dec = *d
	} else {
		dec = s.claimed1(ctx, c, in, &ran)
		dec = s.stepDelays.Apply(s.b.ladder, c, in, dec, s.now)
		dec = s.destinations(c, in, dec)
	}
	s.carryOut(c, in, dec, ran)
}

// claimed1 is the claim gate of an idempotent consumer around the call.
func (s *sim) claimed1(ctx context.Context, c *plan.Consumer, in decide.Inbound, ran *string) decide.Decision {
	if !c.Idempotent {
		return s.inner(ctx, c, in, ran)
	}
	key := c.ID + "\x00" + in.Env.MessageID
	answer := decide.ClaimTaken
	if s.claimed[key] {
		answer = decide.ClaimConfirmed
	}
	if d := decide.Claimed(c, in, answer, s.now); d != nil {
		return *d
	}
	dec := s.inner(ctx, c, in, ran)
	if dec.Outcome != decide.OutcomeRetried && dec.Outcome != decide.OutcomeInProgress {
		s.claimed[key] = true
	}
	return dec
}

func (s *sim) inner(ctx context.Context, c *plan.Consumer, in decide.Inbound, ran *string) decide.Decision {
	if c.Saga != "" {
		return s.sagaStep(ctx, c, in, ran)
	}
	res, err := s.handle(ctx, c, in, false, nil)
	if err == nil {
		// On the route once the decision acknowledges it (a result that
		// fails its output type is dead-lettered instead).
		*ran = stepName(c, in.Env)
	}
	return decide.Decide(c, s.routes[c.Pipeline], in, res, err, s.now, 0)
}

func stepName(c *plan.Consumer, env decide.Envelope) string {
	if env.Slip != nil {
		if cur, ok := env.Slip.Current(); ok && cur.Name != "" {
			return cur.Name
		}
	}
	if c.Step != "" {
		return c.Step
	}
	return c.ID
}

// destinations dead-letters a decision that publishes to an exchange that
// does not exist, as the engine's destinationStep does.
func (s *sim) destinations(c *plan.Consumer, in decide.Inbound, dec decide.Decision) decide.Decision {
	for _, p := range dec.Publish {
		if p.BestEffort || p.Exchange == "" || strings.HasPrefix(p.Exchange, "acemq.schedule.") || strings.HasPrefix(p.Exchange, "amq.") {
			continue
		}
		if _, ok := s.b.exchanges[p.Exchange]; !ok {
			return decide.MissingExchange(c, in, p.Exchange, p.RoutingKey, s.now)
		}
	}
	return dec
}

// carryOut publishes the decision's messages and records what it did. A
// publish the broker would refuse is handled as the engine's group does
// (decide.PublishFailed): a refused dead-letter is parked, a refused retry
// dead-lettered, any other refused result dead-lettered with the reason.
func (s *sim) carryOut(c *plan.Consumer, in decide.Inbound, dec decide.Decision, ran string) {
	for _, p := range dec.Publish {
		if p.BestEffort {
			continue
		}
		if _, _, err := s.b.targets(p.Message); err != nil {
			f := decide.PublishFailure{Kind: decide.PublishUnroutable, Err: err}
			var pe *publishError
			if errors.As(err, &pe) && pe.missing != "" {
				f.Kind, f.Exchange = decide.PublishNoExchange, pe.missing
			}
			fb := decide.PublishFailed(c, in, dec, f, s.now)
			if !fb.Hold { // held back: nowhere to go
				s.carryOut(c, in, fb.Decision, "")
			}
			return
		}
	}
	if ran != "" && (dec.Outcome == decide.OutcomeAcknowledged || dec.Outcome == decide.OutcomeStopped) {
		s.rec.route = append(s.rec.route, ran)
	}
	if dec.Outcome == decide.OutcomeRetried {
		r := retryRecord{queue: c.Queue, attempt: in.Env.Attempt + 1}
		for _, rg := range c.Retry.Rungs {
			if rg.Queue == dec.Rung {
				r.delay = time.Duration(rg.Delay)
			}
		}
		s.rec.retries = append(s.rec.retries, r)
	}
	for _, p := range dec.Publish {
		if p.BestEffort {
			s.rec.replies = append(s.rec.replies, p.Message)
			if _, ok := s.b.queues[p.RoutingKey]; ok && p.Exchange == "" {
				_ = s.b.publish(p.Message)
			}
			continue
		}
		_ = s.b.publish(p.Message)
	}
}

// handle is the handler's outcome on this delivery: the case's, or the
// real plugin's with --plugins.
func (s *sim) handle(ctx context.Context, c *plan.Consumer, in decide.Inbound, compensate bool, stepOutput []byte) (decide.Result, error) {
	if s.call != nil {
		return s.call(ctx, c, in.Env, in.Body, compensate, stepOutput)
	}
	var h *Handler
	for _, k := range []string{c.ID, c.Queue, c.Handler} {
		if h = s.c.Handlers[k]; h != nil {
			break
		}
	}
	o := Outcome{}
	if h != nil && len(h.Outcomes) > 0 {
		i := max(in.Env.Attempt, 1) - 1
		o = h.Outcomes[min(i, len(h.Outcomes)-1)]
	}
	if o.Sleep > 0 {
		tmo := s.timeouts[c.Plugin]
		if tmo > 0 && o.Sleep > tmo {
			s.now = s.now.Add(tmo)
			return decide.Result{}, fmt.Errorf("%s: the call did not end within its timeout of %s: %w", c.Handler, durationText(tmo), context.DeadlineExceeded)
		}
		s.now = s.now.Add(o.Sleep)
	}
	switch {
	case o.Fatal != "":
		return decide.Result{}, fatalError(o.Fatal)
	case o.Fail != "":
		return decide.Result{}, errors.New(o.Fail)
	case o.Stop:
		return decide.Result{Stop: true}, nil
	case o.hasReturn:
		return decide.Result{Payload: o.Return}, nil
	}
	return decide.Result{Payload: in.Body}, nil
}

// fatalError is a handler's fatal failure: no retry can fix it.
type fatalError string

func (e fatalError) Error() string        { return string(e) }
func (e fatalError) Is(target error) bool { return target == decide.ErrFatal }
