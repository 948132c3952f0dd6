package plan

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Wire names (FLOW-FORMAT §2). Every queue, exchange and rung name comes from
// one of these functions; none is assembled inline elsewhere.

// DeadLetterExchange is the direct exchange that routes `<queue>.dlq` to
// that queue, for broker-side dead-lettering (delivery limits and
// `declare: {dead_letter: true}`).
const DeadLetterExchange = "acemq.dlx"

// DefaultDeliveryLimit is the x-delivery-limit of the quorum queues the
// runtime declares, unless `arguments` override it.
const DefaultDeliveryLimit = 20

// InProgressDelay is the rung an in-progress idempotent delivery is
// republished through (FLOW-FORMAT §2, outcomes).
const InProgressDelay = time.Second

// PipelineExchange is the direct exchange of a pipeline.
func PipelineExchange(pipeline string) string { return pipeline }

// StepQueue is the queue step consumes: `<pipeline>.<step>`.
func StepQueue(pipeline, step string) string { return pipeline + "." + step }

// StepConsumerID is the registry id of a step's consumer: `<pipeline>.<step>`.
func StepConsumerID(pipeline, step string) string { return pipeline + "." + step }

// RetryQueue is the retry rung of queue for delay: `<queue>.retry.<delay>`.
func RetryQueue(queue string, delay time.Duration) string {
	return queue + ".retry." + DelayName(delay)
}

// DeadLetterQueue is where exhausted and fatal messages of queue go.
func DeadLetterQueue(queue string) string { return queue + ".dlq" }

// ParkedQueue is where messages replayed too often go.
func ParkedQueue(queue string) string { return queue + ".parked" }

// SagaExchange is the direct exchange of a saga's step queues.
func SagaExchange(saga string) string { return saga }

// SagaStepQueue is the queue of a saga step: `<saga>.<step>`.
func SagaStepQueue(saga, step string) string { return saga + "." + step }

// CompensateQueue is the queue of a saga step's compensation.
func CompensateQueue(saga, step string) string { return saga + "." + step + ".compensate" }

// CompensateKey is the routing key of a saga step's compensation.
func CompensateKey(step string) string { return step + ".compensate" }

// LadderLevels is the number of levels of the shared delay ladder
// (FLOW-FORMAT §4): level k holds a message 2^k s, so the longest delay is
// 2^28 - 1 s, about 8.5 years.
const LadderLevels = 28

// LadderExchange is level k's topic exchange, `acemq.schedule.<k>`; the
// level's queue has the same name (LadderQueue).
func LadderExchange(k int) string { return "acemq.schedule." + strconv.Itoa(k) }

// LadderQueue is level k's quorum queue, named as its exchange.
func LadderQueue(k int) string { return LadderExchange(k) }

// DueQueue is where the ladder puts a message once it is due; the runtime
// consumes it and publishes each message to its destination.
const DueQueue = "acemq.schedule.due"

// DelayName writes a delay in the largest unit that divides it exactly:
// 500ms, 2s, 90s, 1m, 1h.
func DelayName(d time.Duration) string {
	switch {
	case d <= 0:
		return "0ms"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
	// Below a millisecond the broker's TTL cannot express it; round up.
	return fmt.Sprintf("%dms", (d+time.Millisecond-1)/time.Millisecond)
}

// HeaderPrefix starts every x-acemq header: the runtime's own, which a
// plugin's envelope leaves out.
const HeaderPrefix = "x-acemq-"

// Headers of the wire format (FLOW-FORMAT §2).
const (
	HeaderAttempt       = "x-acemq-attempt"
	HeaderFirstSeen     = "x-acemq-first-seen"
	HeaderCausationID   = "x-acemq-causation-id"
	HeaderOrigin        = "x-acemq-origin"
	HeaderRoute         = "x-acemq-route"
	HeaderRoutePosition = "x-acemq-route-position"
	HeaderSlip          = "acemq-routing-slip"
	HeaderError         = "x-acemq-error"
	HeaderErrorKind     = "x-acemq-error-kind"
	HeaderFailedQueue   = "x-acemq-failed-queue"
	HeaderFailedAt      = "x-acemq-failed-at"
	HeaderReplays       = "x-acemq-replays"
	HeaderOutcome       = "x-acemq-outcome"
	HeaderStoppedAt     = "x-acemq-stopped-at"
)

// Headers of the delay ladder and of schedules (FLOW-FORMAT §4). Where a
// delayed message goes when due travels in headers, never in the routing
// key, and the delivered message keeps them.
const (
	HeaderDeliverExchange   = "x-acemq-deliver-exchange"
	HeaderDeliverRoutingKey = "x-acemq-deliver-routing-key"
	HeaderDueAt             = "x-acemq-due-at" // RFC 3339 UTC, milliseconds
	// HeaderDueRetries counts the times a message was due and could not be
	// delivered (nothing bound, the exchange missing), each followed by
	// another 10 s in the ladder. It is not set on a message delivered at
	// its first try.
	HeaderDueRetries = "x-acemq-due-retries"
	HeaderSchedule   = "x-acemq-schedule" // <flow>/<schedule>
	HeaderTick       = "x-acemq-tick"     // RFC 3339 UTC
)

// RouteHeader renders a declared route: comma-separated step names.
func RouteHeader(steps []string) string { return strings.Join(steps, ",") }
