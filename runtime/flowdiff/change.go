package flowdiff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/acemq/acemq-flow/spec"
)

// Kind names a kind of change; it is the code of the change's diagnostic.
type Kind string

// Breaking kinds (FLOW-FORMAT §7).
const (
	PipelineRemoved     Kind = "pipeline-removed"
	StepRemoved         Kind = "step-removed"
	StepRenamed         Kind = "step-renamed"
	ItineraryRemoved    Kind = "itinerary-removed"
	StopRemoved         Kind = "stop-removed"
	StopRenamed         Kind = "stop-renamed"
	StopMoved           Kind = "stop-moved" // its exchange or routing key changed
	SagaRemoved         Kind = "saga-removed"
	SagaStepRemoved     Kind = "saga-step-removed"
	SagaStepRenamed     Kind = "saga-step-renamed"
	SagaStepAdded       Kind = "saga-step-added" // running instances keep their steps by position
	CompensationRemoved Kind = "compensation-removed"
	ConsumerRemoved     Kind = "consumer-removed"
	ConsumerRenamed     Kind = "consumer-renamed" // breaking when idempotent
	ConsumerQueueMoved  Kind = "consumer-queue-changed"
	RouteReordered      Kind = "route-reordered"
	QueueTypeChanged    Kind = "queue-type-changed"
	QueueArgsChanged    Kind = "queue-arguments-changed"
	TypeNarrowed        Kind = "type-narrowed"
	RetryRungsOrphaned  Kind = "retry-rungs-orphaned"
	BindingRemoved      Kind = "binding-removed"
	ExchangeTypeChanged Kind = "exchange-type-changed"
)

// Kinds that break nothing, listed by `acemq-flow diff --all`.
const (
	PipelineAdded       Kind = "pipeline-added"
	StepAdded           Kind = "step-added"
	ItineraryAdded      Kind = "itinerary-added"
	StopAdded           Kind = "stop-added"
	StopConditionChange Kind = "stop-condition-changed"
	SagaAdded           Kind = "saga-added"
	CompensationAdded   Kind = "compensation-added"
	SagaTimeoutChanged  Kind = "saga-timeout-changed"
	ConsumerAdded       Kind = "consumer-added"
	TypeAdded           Kind = "type-added"
	TypeRemoved         Kind = "type-removed"
	TypeWidened         Kind = "type-widened"
	DescriptionChanged  Kind = "description-changed"
	HandlerChanged      Kind = "handler-changed"
	ConcurrencyChanged  Kind = "concurrency-changed"
	PrefetchChanged     Kind = "prefetch-changed"
	IdempotentChanged   Kind = "idempotent-changed"
	AutoStartupChanged  Kind = "auto-startup-changed"
	DelayChanged        Kind = "delay-changed"
	RetryChanged        Kind = "retry-changed"
	ExchangeAdded       Kind = "exchange-added"
	ExchangeRemoved     Kind = "exchange-removed"
	BindingAdded        Kind = "binding-added"
	QueueAdded          Kind = "queue-added"
	QueueRemoved        Kind = "queue-removed"
	ScheduleAdded       Kind = "schedule-added"
	ScheduleRemoved     Kind = "schedule-removed"
	ScheduleChanged     Kind = "schedule-changed"
)

// Change is one difference between the old and the new flows.
type Change struct {
	Kind Kind `json:"kind"`
	// Breaking says the change breaks what is deployed or in flight.
	Breaking bool `json:"breaking"`
	// Pos is where the change is written: in the new file, or in the old
	// one for a removal.
	Pos spec.Pos `json:"-"`
	// Old says Pos is in the old version of its file.
	Old bool `json:"old,omitempty"`
	// Msg says what changed, as a sentence.
	Msg string `json:"message"`
	// InFlight says what happens to the messages in flight when it is
	// deployed.
	InFlight string `json:"in_flight,omitempty"`
	// Deploy says how to deploy it safely; empty when nothing is needed.
	Deploy string `json:"deploy,omitempty"`
	// Queues are the queues whose messages the change strands, the ones
	// on the broker's names: when every one is empty, nothing in flight
	// breaks (Settle). Empty for a change that breaks whatever the depths,
	// such as a redeclare the broker refuses.
	Queues []string `json:"queues,omitempty"`
	// Drained is set by Settle when every queue in Queues was found empty
	// (or missing) on the broker.
	Drained bool `json:"drained,omitempty"`
}

// Severity is how the change is reported: "error" for a breaking change,
// "warning" for a breaking one whose queues were found empty, "notice" for
// one that breaks nothing.
func (c Change) Severity() string {
	switch {
	case c.Breaking && !c.Drained:
		return "error"
	case c.Breaking:
		return "warning"
	}
	return "notice"
}

// Text is the change as one line without its position: what changed, what
// happens to the messages in flight, and how to deploy it.
func (c Change) Text() string {
	parts := []string{c.Msg}
	if c.Drained {
		parts = append(parts, fmt.Sprintf("the broker holds no ready message in %s, so nothing in flight is stranded now (messages a running consumer holds unacknowledged are not counted)", queueList(c.Queues)))
	} else if c.InFlight != "" {
		parts = append(parts, c.InFlight)
	}
	if c.Deploy != "" {
		parts = append(parts, c.Deploy)
	}
	return strings.Join(parts, "; ")
}

// String renders the change as `file:line:col: error: text`.
func (c Change) String() string {
	return c.Pos.String() + ": " + c.Severity() + ": " + c.Text()
}

// Changes is a list of changes, sorted by position.
type Changes []Change

// Breaking reports whether any change breaks and was not found drained.
func (cs Changes) Breaking() bool {
	return slices.ContainsFunc(cs, func(c Change) bool { return c.Severity() == "error" })
}

func (cs Changes) sort() {
	slices.SortStableFunc(cs, func(a, b Change) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			-cmp.Compare(btoi(a.Breaking), btoi(b.Breaking)), // breaking first
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
}

// Settle asks depth about the queues of each breaking change that has any,
// and marks the change Drained when every one is empty or missing. depth
// returns the ready messages of a queue and whether it exists; each queue
// is asked once. The first error stops it, naming the queue.
func Settle(cs Changes, depth func(queue string) (n int, exists bool, err error)) error {
	known := map[string]int{}
	for i := range cs {
		c := &cs[i]
		if !c.Breaking || len(c.Queues) == 0 {
			continue
		}
		total := 0
		for _, q := range c.Queues {
			n, ok := known[q]
			if !ok {
				d, _, err := depth(q)
				if err != nil {
					return fmt.Errorf("read the depth of queue %q: %w", q, err)
				}
				known[q], n = d, d
			}
			total += n
		}
		c.Drained = total == 0
	}
	return nil
}

// queueList names queues for a sentence: "a", "a and b", "a, b and 3 more".
func queueList(qs []string) string {
	quoted := make([]string, len(qs))
	for i, q := range qs {
		quoted[i] = fmt.Sprintf("%q", q)
	}
	switch {
	case len(quoted) == 0:
		return "no queue"
	case len(quoted) == 1:
		return "queue " + quoted[0]
	case len(quoted) <= 4:
		return "queues " + strings.Join(quoted[:len(quoted)-1], ", ") + " and " + quoted[len(quoted)-1]
	}
	return fmt.Sprintf("queues %s and %d more", strings.Join(quoted[:3], ", "), len(quoted)-3)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
