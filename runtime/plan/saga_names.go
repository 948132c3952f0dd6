package plan

// Saga wire names beyond the queues and exchange in names.go (FLOW-FORMAT
// §2 and §5).

// Headers of a saga's step and compensation messages: which saga, which
// instance (the id of the message that started it) and which step the
// message is addressed to.
const (
	HeaderSaga     = "x-acemq-saga"
	HeaderSagaID   = "x-acemq-saga-id"
	HeaderSagaStep = "x-acemq-saga-step"
)

// SagaStepKey is the routing key of a saga step on the saga's exchange: the
// step's name.
func SagaStepKey(step string) string { return step }

// SagaStepConsumerID is the registry id of a saga step's consumer: its
// queue's name, `<saga>.<step>`.
func SagaStepConsumerID(saga, step string) string { return SagaStepQueue(saga, step) }

// CompensateConsumerID is the registry id of a saga step's compensation
// consumer: its queue's name, `<saga>.<step>.compensate`.
func CompensateConsumerID(saga, step string) string { return CompensateQueue(saga, step) }

// TimeoutQueue is the queue of a saga's timeout messages, `<saga>.timeout`:
// one per instance, published into the delay ladder when the instance
// starts and delivered there (routing key TimeoutKey) when its time is up.
// A saga with a timeout cannot have a step named `timeout` (the queues
// would collide; Compile says so).
func TimeoutQueue(saga string) string { return saga + ".timeout" }

// TimeoutKey is the routing key of a saga's timeout messages on the saga's
// exchange.
const TimeoutKey = "timeout"

// TimeoutConsumerID is the registry id of a saga's timeout consumer: its
// queue's name.
func TimeoutConsumerID(saga string) string { return TimeoutQueue(saga) }
