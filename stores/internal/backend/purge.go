package backend

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
