package plan

import (
	"strings"
	"time"

	"github.com/acemq/acemq-flow/spec"
)

// LadderUnit is what one second of the delay ladder is: level k holds a
// message LadderUnit × 2^k. The runtime uses LadderUnit; a test may build a
// ladder of a smaller unit (a whole number of milliseconds) on a virtual
// host of its own, so that hours of delay pass in seconds (the routing keys
// then count that unit: decide.Ladder).
const LadderUnit = time.Second

// LadderPurpose is the Purpose of the ladder's exchanges and queues.
const LadderPurpose = "delay ladder"

// Ladder is the delay ladder's topology for unit (FLOW-FORMAT §4): for each
// level k, a topic exchange and a quorum queue `acemq.schedule.<k>` whose
// x-message-ttl is unit × 2^k and which dead-letters, at-least-once, to
// exchange k-1 (level 0: through the default exchange to `.due`); level
// k's exchange routes a key whose digit k is 1 to its queue and one whose
// digit k is 0 on to exchange k-1 (exchange 0: to `.due`). `.due` is a
// quorum queue like any the runtime declares (its .dlq keeps what cannot
// be delivered at all: a message without a destination). Everything is
// declared create-only, so drift is reported as for any queue. Ladder is
// pure; each call returns new values.
func Ladder(unit time.Duration) ([]Exchange, []Queue, []Binding) {
	if unit < time.Millisecond {
		unit = LadderUnit
	}
	var xs []Exchange
	var qs []Queue
	var bs []Binding
	add := func(q Queue) {
		q.Mode, q.Purpose, q.Apply, q.what = Declare, LadderPurpose, spec.ApplyCreateOnly, "the delay ladder"
		qs = append(qs, q)
	}
	for k := range LadderLevels {
		xs = append(xs, Exchange{Name: LadderExchange(k), Type: "topic", Mode: Declare, Purpose: LadderPurpose, Apply: spec.ApplyCreateOnly})
		args := map[string]any{
			"x-queue-type":           "quorum",
			"x-message-ttl":          unit.Milliseconds() << k,
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		}
		next := Binding{Exchange: LadderExchange(k), RoutingKey: LadderPattern(k, '0')}
		if k == 0 {
			args["x-dead-letter-exchange"] = ""
			args["x-dead-letter-routing-key"] = DueQueue
			next.Queue = DueQueue
		} else {
			args["x-dead-letter-exchange"] = LadderExchange(k - 1)
			next.ToExchange = LadderExchange(k - 1)
		}
		add(Queue{Name: LadderQueue(k), Type: "quorum", Arguments: args})
		bs = append(bs, Binding{Exchange: LadderExchange(k), Queue: LadderQueue(k), RoutingKey: LadderPattern(k, '1')}, next)
	}
	add(Queue{Name: DueQueue, Type: "quorum", Arguments: queueArguments(DueQueue, "quorum", true, nil)})
	add(holdingQueue(DeadLetterQueue(DueQueue), "dlq", "", spec.Pos{}, spec.ApplyCreateOnly))
	xs = append(xs, Exchange{Name: DeadLetterExchange, Type: "direct", Mode: Declare, Purpose: "dead letters", Apply: spec.ApplyCreateOnly})
	bs = append(bs, dlqBinding(DeadLetterQueue(DueQueue), "", spec.Pos{}))
	return xs, qs, bs
}

// LadderPattern is the binding key of level k's exchange that matches a
// routing key whose digit k is digit ('0' or '1'): the key's 28 digits are
// written most significant first, so digit k is word 27-k.
func LadderPattern(k int, digit byte) string {
	return strings.Repeat("*.", LadderLevels-1-k) + string(digit) + ".#"
}
