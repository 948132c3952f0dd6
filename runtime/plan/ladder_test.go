package plan

import (
	"strings"
	"testing"
	"time"
)

func TestLadderTopology(t *testing.T) {
	xs, qs, bs := Ladder(LadderUnit)
	if len(xs) != LadderLevels+1 || len(qs) != LadderLevels+2 || len(bs) != 2*LadderLevels+1 {
		t.Fatalf("Ladder: %d exchanges, %d queues, %d bindings; want 29, 30, 57", len(xs), len(qs), len(bs))
	}
	for k := range LadderLevels {
		q := qs[k]
		if q.Name != "acemq.schedule."+itoa(k) || q.Type != "quorum" || xs[k].Type != "topic" {
			t.Errorf("level %d: queue %q (%s), exchange %q (%s)", k, q.Name, q.Type, xs[k].Name, xs[k].Type)
		}
		if ttl := q.Arguments["x-message-ttl"]; ttl != int64(1000)<<k {
			t.Errorf("level %d: x-message-ttl %v, want %d", k, ttl, int64(1000)<<k)
		}
		if q.Arguments["x-dead-letter-strategy"] != "at-least-once" || q.Arguments["x-overflow"] != "reject-publish" {
			t.Errorf("level %d: not dead-lettered at least once: %v", k, q.Arguments)
		}
		if _, ok := q.Arguments["x-delivery-limit"]; ok {
			t.Errorf("level %d has a delivery limit, which would dead-letter a message to the next level early", k)
		}
		want := "acemq.schedule." + itoa(k-1)
		if k == 0 {
			want = ""
			if q.Arguments["x-dead-letter-routing-key"] != DueQueue {
				t.Errorf("level 0 dead-letters with key %v, want %s", q.Arguments["x-dead-letter-routing-key"], DueQueue)
			}
		}
		if q.Arguments["x-dead-letter-exchange"] != want {
			t.Errorf("level %d dead-letters to %v, want %q", k, q.Arguments["x-dead-letter-exchange"], want)
		}
		one, zero := bs[2*k], bs[2*k+1]
		if one.Queue != q.Name || one.RoutingKey != LadderPattern(k, '1') {
			t.Errorf("level %d: digit 1 binding %+v", k, one)
		}
		if k > 0 && (zero.ToExchange != want || zero.Queue != "") || k == 0 && zero.Queue != DueQueue {
			t.Errorf("level %d: digit 0 binding %+v", k, zero)
		}
	}
	if got := LadderPattern(27, '1'); got != "1.#" {
		t.Errorf("LadderPattern(27) = %q", got)
	}
	if got := LadderPattern(0, '0'); got != strings.Repeat("*.", 27)+"0.#" {
		t.Errorf("LadderPattern(0) = %q", got)
	}
	_, small, _ := Ladder(10 * time.Millisecond)
	if ttl := small[3].Arguments["x-message-ttl"]; ttl != int64(80) {
		t.Errorf("a 10ms ladder's level 3 TTL = %v, want 80", ttl)
	}
}

func itoa(k int) string { return LadderExchange(k)[len("acemq.schedule."):] }
