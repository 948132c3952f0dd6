// Package flowtest runs flow tests (`*.flowtest.yaml`, FLOW-FORMAT §7): it
// sends a case's messages through the flows' plan on a simulated broker and a
// virtual clock, with the handlers' outcomes the case gives (or the real
// plugins), and checks what happened against what the case expects.
//
// It decides every delivery with the engine's own code, runtime/decide,
// never a copy of it: Precheck, Decide, Retry and DeadLetter for a step or
// a consumer, Claimed for an idempotent one's claim, SagaBegin and
// SagaAfter around a saga consumer's call, StepDelays for a step with a
// delay, MissingExchange and PublishFailed for what the broker would
// refuse, the ladder's Delay and Due for delays and saga timeouts, the
// schedules' Ticker and TickMessage, FirstMessage for what a case sends;
// with --plugins it calls the real plugins through the engine's call
// (runtime/hostcall), and it reads its files with spec's YAML reader. What
// it adds is glue: a broker that routes by the plan's exchanges and
// bindings (direct, topic, fanout and headers exchanges, the default
// exchange), queues whose x-message-ttl dead-letters where their arguments
// say (the retry rungs), the ladder as due times, an in-memory saga store,
// and a clock that only moves when the case says so: `advance: 30s` or
// `run: until_idle`, which fires every retry, delay and saga timeout
// without waiting. It imports no broker, no store and no engine
// (test/imports_test.go).
package flowtest
