package postgres

import (
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// The relay claims from two loops at once: a claim that started after the
// held batches and ends after a concurrent claim from the head leaves what
// the head read found in place, so the next claim reads from the head again
// and the backlog behind the held batches is taken at claim speed.
func TestAClaimAfterTheHeldBatchesLeavesWhatAHeadReadFound(t *testing.T) {
	var h heldIDs
	now := time.Now()
	held := &lockedBatch{recs: []stores.OutboxRecord{{ID: 1000}}}
	h.record(held, 1000, false, false)

	x, top := h.after(now) // the interval has passed: from the head
	if x != 0 || top != 1000 {
		t.Fatalf("first claim: after = %d, top = %d; want 0 and 1000", x, top)
	}
	y, _ := h.after(now) // concurrently: after the held batch
	if y != 1000 {
		t.Fatalf("concurrent claim: after = %d, want 1000", y)
	}
	fromHead := &lockedBatch{recs: []stores.OutboxRecord{{ID: 1}, {ID: 2}}}
	h.record(fromHead, 2, x == 0, true) // filled its batch behind the held one
	ahead := &lockedBatch{recs: []stores.OutboxRecord{{ID: 1001}}}
	h.record(ahead, 1001, y == 0, false) // ends last

	if next, _ := h.after(now); next != 0 {
		t.Fatalf("the claim after them starts after %d, want 0 (from the head: rows wait behind the held batches)", next)
	}
	// A head read that reaches past the held batches ends it.
	h.record(&lockedBatch{}, 0, true, false)
	if next, _ := h.after(now); next != 1001 {
		t.Fatalf("after a head read found nothing more behind: after = %d, want 1001", next)
	}
}
