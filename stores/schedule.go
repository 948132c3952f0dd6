package stores

import (
	"context"
	"time"
)

// ScheduleTicks records which ticks of which schedules have fired, so that a
// tick fires once across any number of runtime replicas (FLOW-FORMAT §4). A
// schedule is named by a key the caller chooses (the runtime uses
// `<flow>/<schedule>`); a tick is an instant, kept to the millisecond.
//
// Protocol: every replica that reaches a tick calls ClaimTick with the
// firing's outbox record. Exactly one call per (schedule, tick) returns
// claimed, and its record is written to the outbox in the same transaction
// as the tick: a claimed tick is never lost (the relay publishes its
// record), and a tick whose claim failed is not recorded and wrote nothing.
// The others get claimed false and write nothing. LastTick is read at start
// to learn where a schedule stopped; it is the latest claimed tick, not the
// latest written, so a replica that claims an older missed tick after a
// newer one does not move it back. Any error is a failure of the store and
// decides nothing: the caller claims the tick again. Implementations are
// safe for concurrent use.
type ScheduleTicks interface {
	// ClaimTick records tick of schedule and adds rec to the outbox in one
	// transaction; claimed is false, and nothing is written, when the tick
	// was claimed before.
	ClaimTick(ctx context.Context, schedule string, tick time.Time, rec OutboxRecord) (claimed bool, err error)

	// LastTick returns the latest claimed tick of schedule, and ok false
	// when it has none.
	LastTick(ctx context.Context, schedule string) (tick time.Time, ok bool, err error)

	// PurgeTicks deletes the ticks before before, keeping each schedule's
	// latest, and returns how many it deleted.
	PurgeTicks(ctx context.Context, before time.Time) (int64, error)
}
