// Package purgecheck holds a check and a setting that the SQL backends' own
// purge tests share (they cannot import storetest, which imports them).
package purgecheck

import (
	"testing"

	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// SetBatch sets backend.PurgeBatch, the rows a purge statement handles, to n
// until the test ends.
func SetBatch(t testing.TB, n int) {
	t.Helper()
	old := backend.PurgeBatch
	backend.PurgeBatch = n
	t.Cleanup(func() { backend.PurgeBatch = old })
}

// CheckPurgeWalk checks a PurgePublished over the 50 outbox rows a backend's
// own test wrote, ids 1 to 50: 1-25 written and published two hours before
// the cut-off's hour, 26-30 published after the cut-off, 31-35 stuck, 36-40
// pending, and 41-50 written after the cut-off (but marked published long
// before, which a relay cannot do: they show where the walk stops). n is
// what the purge returned and kept the ids left. Rows 1-25 must be gone,
// 26-40 kept, and the walk must have stopped before the end of 41-50.
func CheckPurgeWalk(t *testing.T, n int64, kept map[int64]bool) {
	t.Helper()
	var gone int64
	for row := int64(1); row <= 50; row++ {
		switch {
		case row <= 25 && kept[row]:
			t.Errorf("row %d, published before the cut-off, was not purged", row)
		case row > 25 && row <= 40 && !kept[row]:
			t.Errorf("row %d (published after the cut-off, stuck or pending) was purged", row)
		case row > 40 && !kept[row]:
			gone++
		}
	}
	if gone == 10 {
		t.Errorf("the purge walked past the first row written after the cut-off to the end of the table")
	}
	if n != 25+gone {
		t.Errorf("PurgePublished = %d, want %d (the rows it deleted)", n, 25+gone)
	}
}
