// Package scheduler holds the runtime's daemons of time (FLOW-FORMAT §4),
// each started and drained by the engine beside its consumer groups:
//
//   - Due, the consumer of the delay ladder's `acemq.schedule.due` queue: it
//     publishes each due message to the destination its headers name, with
//     confirms and mandatory, and acknowledges it after; a message its
//     destination does not take (nothing bound, the exchange missing) goes
//     back into the ladder for 10 s, with a warning naming the destination,
//     and is tried again until it is delivered: never dead-lettered, never
//     dropped.
//   - the schedules' loop, which fires each schedule once per tick across
//     every runtime replica, the store deciding which one.
//
// What the ladder does with a message (its routing key and level, what a
// due message becomes) is decided by runtime/decide (Ladder), and so are a
// schedule's ticks and what a firing sends (Ticker, PlanTicks,
// TickMessage), which the flow-test harness runs too; the ladder's
// topology is runtime/plan's (Ladder). This package carries the decisions
// out on the broker. It may import plan, decide, broker, wire and stores,
// never the engine.
package scheduler
