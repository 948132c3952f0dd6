package flowtest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// The simulated broker: the plan's exchanges, queues and bindings, routed
// as RabbitMQ routes them, the delay ladder as due times, and queues with
// a TTL (the retry rungs) dead-lettering where their arguments say.

type queue struct {
	q        plan.Queue
	consumer *plan.Consumer
	ttl      time.Duration // x-message-ttl; 0: none
	dlx      string
	dlrk     string
	hasDLX   bool
	held     []decide.Message // what waits in a queue nobody here consumes
}

// event is something that happens at a time of the virtual clock.
type event struct {
	at       time.Time
	seq      int64
	schedule bool // a schedule's tick: `run: until_idle` does not wait for these
	fire     func() error
}

type ready struct {
	q *queue
	m decide.Message
}

type broker struct {
	pl        *plan.Plan
	exchanges map[string]plan.Exchange
	bindings  map[string][]plan.Binding
	queues    map[string]*queue
	ready     []ready
	events    []*event
	seq       int64
	rec       *record
	now       *time.Time
	ladder    decide.Ladder
}

func newBroker(pl *plan.Plan, rec *record, now *time.Time) *broker {
	b := &broker{pl: pl, exchanges: map[string]plan.Exchange{}, bindings: map[string][]plan.Binding{}, queues: map[string]*queue{}, rec: rec, now: now}
	for _, x := range pl.Exchanges {
		b.exchanges[x.Name] = x
	}
	for _, bd := range pl.Bindings {
		b.bindings[bd.Exchange] = append(b.bindings[bd.Exchange], bd)
	}
	for _, q := range pl.Queues {
		qq := &queue{q: q}
		if v, ok := q.Arguments["x-message-ttl"]; ok {
			if ms, ok := intArg(v); ok {
				qq.ttl = time.Duration(ms) * time.Millisecond
			}
		}
		if v, ok := q.Arguments["x-dead-letter-exchange"]; ok {
			qq.dlx, qq.hasDLX = fmt.Sprint(v), true
			if k, ok := q.Arguments["x-dead-letter-routing-key"]; ok {
				qq.dlrk = fmt.Sprint(k)
			}
		}
		b.queues[q.Name] = qq
	}
	for i := range pl.Consumers {
		c := &pl.Consumers[i]
		if q, ok := b.queues[c.Queue]; ok {
			q.consumer = c
		} else {
			b.queues[c.Queue] = &queue{q: plan.Queue{Name: c.Queue, Purpose: "consumer"}, consumer: c}
		}
	}
	return b
}

func intArg(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

func (b *broker) at(t time.Time, schedule bool, fire func() error) {
	b.seq++
	b.events = append(b.events, &event{at: t, seq: b.seq, schedule: schedule, fire: fire})
}

// next takes the earliest event, at or before until when until is not
// zero, skipping schedules' ticks unless withSchedules.
func (b *broker) next(until time.Time, withSchedules bool) *event {
	best := -1
	for i, e := range b.events {
		if (e.schedule && !withSchedules) || (!until.IsZero() && e.at.After(until)) {
			continue
		}
		if best < 0 || e.at.Before(b.events[best].at) || (e.at.Equal(b.events[best].at) && e.seq < b.events[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	e := b.events[best]
	b.events = append(b.events[:best], b.events[best+1:]...)
	return e
}

// errUnroutable is a publish that reached no queue; errNoExchange, one to
// an exchange that does not exist.
type publishError struct {
	missing string
	msg     string
}

func (e *publishError) Error() string { return e.msg }

// targets are the queues m reaches, or why it reaches none. A message into
// the delay ladder reaches the ladder.
func (b *broker) targets(m decide.Message) (qs []*queue, ladder bool, err error) {
	if m.Exchange == "" {
		if m.RoutingKey == plan.DueQueue {
			return nil, true, nil
		}
		if q, ok := b.queues[m.RoutingKey]; ok {
			return []*queue{q}, false, nil
		}
		return nil, false, &publishError{msg: fmt.Sprintf("no queue %q for the default exchange to route to (NO_ROUTE)", m.RoutingKey)}
	}
	if strings.HasPrefix(m.Exchange, "acemq.schedule.") {
		return nil, true, nil
	}
	seen := map[string]bool{}
	var walk func(x string, depth int) error
	walk = func(x string, depth int) error {
		ex, ok := b.exchanges[x]
		if !ok && !strings.HasPrefix(x, "amq.") {
			return &publishError{missing: x, msg: fmt.Sprintf("exchange %q does not exist (NOT_FOUND)", x)}
		}
		for _, bd := range b.bindings[x] {
			if !matches(ex.Type, bd.RoutingKey, m.RoutingKey) {
				continue
			}
			if bd.ToExchange != "" {
				if depth < 8 {
					if err := walk(bd.ToExchange, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			if q, ok := b.queues[bd.Queue]; ok && !seen[bd.Queue] {
				seen[bd.Queue] = true
				qs = append(qs, q)
			}
		}
		return nil
	}
	if err := walk(m.Exchange, 0); err != nil {
		return nil, false, err
	}
	if len(qs) == 0 {
		return nil, false, &publishError{msg: fmt.Sprintf("exchange %q routes routing key %q to no queue (NO_ROUTE)", m.Exchange, m.RoutingKey)}
	}
	return qs, false, nil
}

// matches is RabbitMQ's routing of key by binding key pattern on an
// exchange of type typ. A headers exchange's bindings carry no arguments
// in a plan: each matches every message, as x-match all with none does.
func matches(typ, pattern, key string) bool {
	switch typ {
	case "fanout", "headers":
		return true
	case "topic":
		return topicMatch(strings.Split(pattern, "."), strings.Split(key, "."))
	}
	return pattern == key
}

func topicMatch(p, k []string) bool {
	if len(p) == 0 {
		return len(k) == 0
	}
	if p[0] == "#" {
		for i := 0; i <= len(k); i++ {
			if topicMatch(p[1:], k[i:]) {
				return true
			}
		}
		return false
	}
	if len(k) == 0 {
		return false
	}
	if p[0] == "*" || p[0] == k[0] {
		return topicMatch(p[1:], k[1:])
	}
	return false
}

// publish routes m and enqueues it, or says why it could not.
func (b *broker) publish(m decide.Message) error {
	qs, ladder, err := b.targets(m)
	if err != nil {
		return err
	}
	if m.Exchange != "" && !ladder {
		b.rec.output(m.Exchange, m)
	}
	if ladder {
		b.intoLadder(m)
		return nil
	}
	for _, q := range qs {
		b.enqueue(q, m)
	}
	return nil
}

func (b *broker) enqueue(q *queue, m decide.Message) {
	b.rec.output(q.q.Name, m)
	b.rec.entered(q, m)
	if q.consumer != nil {
		b.ready = append(b.ready, ready{q: q, m: m})
		return
	}
	ttl := q.ttl
	if m.Expiration != "" {
		if ms, err := strconv.ParseInt(m.Expiration, 10, 64); err == nil && (ttl == 0 || time.Duration(ms)*time.Millisecond < ttl) {
			ttl = time.Duration(ms) * time.Millisecond
		}
	}
	if ttl <= 0 || !q.hasDLX {
		q.held = append(q.held, m)
		return
	}
	// Dead-lettered on expiry where the queue's arguments say: a retry
	// rung back to its queue.
	b.at(b.now.Add(ttl), false, func() error {
		dm := m
		dm.Expiration = ""
		dm.Exchange = q.dlx
		if q.dlrk != "" {
			dm.RoutingKey = q.dlrk
		}
		if err := b.publish(dm); err != nil {
			return fmt.Errorf("a message expired from %s could not be dead-lettered: %v", q.q.Name, err)
		}
		return nil
	})
}

// intoLadder holds m until the due time its headers say, then does what
// the `.due` consumer does with it (decide.Ladder.Due): delivers it, or,
// when its destination does not take it, puts it back for 10 s.
func (b *broker) intoLadder(m decide.Message) {
	_, _, dueAt, ok := decide.Destination(m.Headers)
	if !ok {
		dueAt = *b.now
	}
	b.rec.delayed(m, *b.now)
	b.holdUntil(m, dueAt)
}

func (b *broker) holdUntil(m decide.Message, at time.Time) {
	if at.Before(*b.now) {
		at = *b.now
	}
	b.at(at, false, func() error {
		dd := b.ladder.Due(m, *b.now)
		switch dd.Action {
		case decide.DueDeadLetter:
			return b.publish(dd.Publish)
		case decide.DueDelay, decide.DueWait:
			_, _, dueAt, _ := decide.Destination(m.Headers)
			b.holdUntil(m, dueAt)
			return nil
		}
		if err := b.publish(dd.Publish); err != nil {
			b.rec.unroutableDue++
			if b.rec.unroutableDue > maxUnroutable {
				return fmt.Errorf("a due message for exchange %q, routing key %q was routed nowhere %d times (%v); it would wait in the ladder for ever: bind a queue there", dd.Publish.Exchange, dd.Publish.RoutingKey, maxUnroutable, err)
			}
			// Back into the ladder for 10 s, its due time unchanged.
			b.holdUntil(b.ladder.Unroutable(dd.Publish), b.now.Add(decide.UnroutableRetry*time.Second))
		}
		return nil
	})
}

const maxUnroutable = 100
