// Package decide holds what happens to one delivery, decided by pure
// functions of the plan entry, the delivery and the handler's outcome
// (DESIGN.md, one-way data flow): Precheck before the handler, Decide after
// it, InProgress for a claim held elsewhere, DeadLetter, Retry and Park.
// A Decision lists the messages to publish and the outcome to count; the
// engine publishes them with confirms, then acknowledges.
//
// It has its own Message type and reads envelopes and carried routing
// slips (Itinerary, read and written field for field as other languages
// write them) from it, so that it runs with no broker at all: the flow-test
// harness runs the same code the engine does. FirstMessage builds the first
// message of a run. Around the handler it also decides what the engine's
// wrappers do: an idempotent consumer's claim (Claimed), a saga consumer's
// delivery (SagaBegin, SagaAfter), a step's delay (StepDelays), a result
// whose exchange is missing or that the broker refused (MissingExchange,
// PublishFailed), and the schedules' ticks (Ticker, PlanTicks,
// TickMessage). Time is always passed in: nothing here reads the clock.
package decide
