package backend

import (
	"context"
	"errors"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// PurgeBatch bounds the rows one purge statement deletes (or, for the
// outbox, reads), so that a large purge holds its locks and its transaction
// briefly, batch after batch. A variable for the tests (see
// purgecheck.SetBatch).
var PurgeBatch = 10000

// PurgeInBatches runs step, which deletes at most limit rows and returns
// how many it deleted, until a step deletes fewer than limit. purged is
// what the steps before deleted, for the step's error message. It returns
// the rows deleted in all; on a step's error, that error and the rows
// deleted until then (the failed step's count included).
func PurgeInBatches(step func(limit int, purged int64) (int64, error)) (int64, error) {
	var total int64
	for {
		limit := PurgeBatch
		n, err := step(limit, total)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(limit) {
			return total, nil
		}
	}
}

// PurgeWalk walks a table in id order, limit rows a step: step reads at
// most limit rows with ids after after, deletes those it should, and
// returns how many it deleted, the last id it read (0 when none) and
// whether the walk is done. purged is what the steps before deleted, for
// the step's error message. The walk ends with a step that is done or read
// nothing. It returns the rows deleted in all; on a step's error, that
// error and the rows deleted until then (the failed step's count included).
func PurgeWalk(step func(after int64, limit int, purged int64) (n, last int64, done bool, err error)) (int64, error) {
	var total, after int64
	for {
		n, last, done, err := step(after, PurgeBatch, total)
		total += n
		if err != nil {
			return total, err
		}
		if done || last == 0 {
			return total, nil
		}
		after = last
	}
}

// purger is the two purges a backend implements.
type purger interface {
	PurgeExpired(ctx context.Context) (int64, error)
	PurgePublished(ctx context.Context, before time.Time) (int64, error)
	PurgeTicks(ctx context.Context, before time.Time) (int64, error)
	PurgeSagas(ctx context.Context, before time.Time) (int64, error)
}

// Purge is every backend's Set.Purge: PurgeExpired, then PurgePublished of
// the records published before now less retention, then PurgeTicks of the
// ticks claimed before that, then PurgeSagas of the instances ended before
// that, each even when the one before failed (a lock on
// one table must not keep the others growing).
func Purge(ctx context.Context, s purger, now time.Time, retention time.Duration) (stores.Purged, error) {
	p := stores.Purged{PublishedBefore: now.Add(-retention)}
	var errExpired, errPublished, errTicks, errSagas error
	p.Expired, errExpired = s.PurgeExpired(ctx)
	p.Published, errPublished = s.PurgePublished(ctx, p.PublishedBefore)
	p.Ticks, errTicks = s.PurgeTicks(ctx, p.PublishedBefore)
	p.Sagas, errSagas = s.PurgeSagas(ctx, p.PublishedBefore)
	return p, errors.Join(errExpired, errPublished, errTicks, errSagas)
}
