package stores

import "time"

// Purged counts what one Set.Purge deleted, table by table.
type Purged struct {
	// Expired is the acemq_idempotency rows deleted: claims whose lease
	// ended and confirmations older than Options.Retention.
	Expired int64

	// Published is the acemq_outbox rows deleted: records published before
	// PublishedBefore. Pending and stuck records are never deleted.
	Published int64

	// Ticks is the acemq_schedule_ticks rows deleted: ticks claimed before
	// PublishedBefore, but each schedule's latest, which says where it
	// stopped.
	Ticks int64

	// Sagas is the acemq_sagas rows deleted: instances that ended
	// (completed, compensated or unresolved) before PublishedBefore.
	Sagas int64

	// PublishedBefore is the outbox cut-off: the store's clock when the
	// purge began, less Options.PublishedRetention.
	PublishedBefore time.Time
}
