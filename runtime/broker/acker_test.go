package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ackLog records the acks an acker writes. While held, a write blocks, so
// the test decides what gathers for the next one.
type ackLog struct {
	mu     sync.Mutex
	writes []string
	fail   bool
	hold   chan struct{} // when set, a write waits for it to close
	called chan struct{} // a write has begun
	wrote  chan struct{} // a write has ended
}

func newAckLog() *ackLog {
	return &ackLog{called: make(chan struct{}, 100), wrote: make(chan struct{}, 100)}
}

func (l *ackLog) Ack(tag uint64, multiple bool) error {
	l.called <- struct{}{}
	l.mu.Lock()
	hold := l.hold
	l.mu.Unlock()
	if hold != nil {
		<-hold
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return amqp.ErrClosed
	}
	l.writes = append(l.writes, fmt.Sprintf("%d/%v", tag, multiple))
	l.wrote <- struct{}{}
	return nil
}

func (l *ackLog) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

// writing waits until the writer is inside a write.
func (l *ackLog) writing(t *testing.T) {
	t.Helper()
	select {
	case <-l.called:
	case <-time.After(10 * time.Second):
		t.Fatal("the acker wrote nothing within 10s")
	}
}

func (l *ackLog) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-l.wrote:
		case <-time.After(10 * time.Second):
			t.Fatalf("acks written: %v; waited for %d more", l.got(), n)
		}
	}
}

func TestAckerCoalescesARunOfAcks(t *testing.T) {
	l := newAckLog()
	l.hold = make(chan struct{})
	a := newAcker(l, func(int64) {})
	defer a.close()
	a.ack(1)
	l.writing(t) // the writer took tag 1 and is blocked in the write
	for tag := range uint64(5) {
		a.ack(tag + 2)
	}
	close(l.hold)
	l.wait(t, 2)
	if got, want := l.got(), []string{"1/true", "6/true"}; !slices.Equal(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
}

func TestAckerNeverHoldsAnAckBehindADeliveryInFlight(t *testing.T) {
	l := newAckLog()
	a := newAcker(l, func(int64) {})
	defer a.close()
	// Tag 1 is still being handled: 2 and 3 go out on their own.
	a.ack(2)
	l.wait(t, 1)
	a.ack(3)
	l.wait(t, 1)
	// Once 1 is acknowledged, the run 1..3 is settled; the multiple ack
	// names 1, the only tag of the run the broker still holds.
	a.ack(1)
	l.wait(t, 1)
	if got, want := l.got(), []string{"2/false", "3/false", "1/true"}; !slices.Equal(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
}

func TestAckerMultipleAckNeverNamesANackedTag(t *testing.T) {
	l := newAckLog()
	l.hold = make(chan struct{})
	a := newAcker(l, func(int64) {})
	defer a.close()
	a.ack(1)
	l.writing(t)
	a.ack(3)
	a.settled(2) // nacked, written by the caller
	a.settled(4)
	close(l.hold)
	l.wait(t, 2)
	// The first write took tag 1 alone; then the run 2..4 holds one ack, 3:
	// an ack naming 4 would close the channel (unknown delivery tag).
	if got, want := l.got(), []string{"1/true", "3/true"}; !slices.Equal(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
}

func TestAckerCountsAcksTheClosedChannelLost(t *testing.T) {
	l := newAckLog()
	l.fail = true
	var n atomic.Int64
	a := newAcker(l, func(k int64) { n.Add(k) })
	a.ack(1)
	a.ack(2)
	a.ack(3)
	if err := a.close(); !errors.Is(err, ErrStaleDelivery) {
		t.Errorf("close = %v, want ErrStaleDelivery", err)
	}
	if n := n.Load(); n != 3 {
		t.Errorf("lost %d acks, want 3", n)
	}
}

// On the broker: acknowledgements in any order, mixed with nacks, settle
// exactly what they name; no multiple ack closes the channel by naming a
// tag the broker no longer holds, and none settles a delivery still in
// flight.
func TestCoalescedAcksSettleExactlyWhatTheyName(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 64)
	c := NewConsumer(e.conn("consume"), ConsumerOptions{Queue: q, Prefetch: 100, DrainTimeout: 200 * time.Millisecond, Log: e.log})
	got := make(chan *Delivery, 100)
	stop := runConsumer(t, c, func(_ context.Context, d *Delivery) { got <- d })
	const n = 60
	for i := range n {
		if err := p.Publish(t.Context(), msg(q, fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	var ds []*Delivery
	for range n {
		ds = append(ds, receive(t, got))
	}
	// Keep every tenth in flight (tags 10, 20, ...), nack (requeue) the
	// seventh ones first, then acknowledge the first nine from the back: all
	// but the last are written alone (tag 1 is still unsettled), and the last
	// completes the run 1..9, whose multiple ack must name tag 1, not 9 (the
	// broker no longer holds 9). Then acknowledge the rest from the front, so
	// runs form between the held ones.
	var held []*Delivery
	settle := func(i int) {
		d := ds[i]
		switch {
		case i%10 == 9:
			held = append(held, d)
		case i%7 == 3:
		default:
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, d := range ds {
		if i%7 == 3 && i%10 != 9 {
			if err := d.Nack(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 8; i >= 0; i-- {
		settle(i)
		ds[i].g.ack.flush() // written now, not gathered with the next
	}
	for i := 9; i < n; i++ {
		settle(i)
	}
	// The nacked come back; the held are still unacknowledged.
	again := map[string]bool{}
	for range 8 {
		d := receive(t, got)
		again[d.MessageId] = true
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if i%7 == 3 && i%10 != 9 && !again[fmt.Sprint(i)] {
			t.Errorf("nacked message %d did not come back", i)
		}
	}
	// Stopping with the held ones in flight closes the channel, which
	// hands them back: the queue then holds exactly them, so no ack settled
	// one of them and every other was settled.
	var de *DrainError
	if err := stop(); !errors.As(err, &de) || de.Left != len(held) {
		t.Fatalf("Run = %v, want a *DrainError with %d left", err, len(held))
	}
	e.waitDepth(q, len(held))
	if s := c.Stats(); s.Sessions != 1 || s.Stale != 0 || s.Acked != int64(n-len(held)) {
		t.Errorf("Stats() = %+v, want one session (the channel never closed), %d acked, none stale", s, n-len(held))
	}
}

// Closing writes what is waiting; an ack after that is refused (the caller
// reports the delivery stale) instead of being recorded and never sent.
func TestAckerWritesWhatWaitsAndTakesNoAckOnceClosed(t *testing.T) {
	l := newAckLog()
	l.hold = make(chan struct{})
	a := newAcker(l, func(int64) {})
	a.ack(1)
	l.writing(t)
	a.ack(2)
	closed := make(chan error, 1)
	go func() { closed <- a.close() }()
	close(l.hold)
	if err := <-closed; err != nil {
		t.Fatalf("close = %v", err)
	}
	if a.ack(3) {
		t.Error("ack after close = true, want it refused")
	}
	if got, want := l.got(), []string{"1/true", "2/true"}; !slices.Equal(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
}
