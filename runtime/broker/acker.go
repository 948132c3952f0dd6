package broker

import "sync"

// acker sends the acknowledgements of one consuming channel. They are
// coalesced: one basic.ack with multiple=true settles a run of consecutive
// delivery tags that were all acknowledged locally, which spares the broker
// one settle per message (on a quorum queue, one Raft command each).
//
// A tag joins a run only once it is settled locally: acknowledged (its ack
// not yet sent) or already settled on the broker one by one (a nack or
// reject, written before it is recorded here). So a multiple ack never
// covers a delivery that is still being handled or that was nacked. An
// acknowledgement that cannot join a run (an earlier tag is still in flight)
// is sent on its own at once, as it would be without coalescing, so a slow
// delivery never holds back the credit of the ones after it.
//
// The broker numbers a channel's deliveries 1, 2, 3, ... (AMQP 0-9-1,
// basic.deliver); the acker relies on nothing else. A tag that never arrives
// only stops runs from forming: every ack then goes out on its own.
//
// Acks are written by one goroutine, woken when there is something to send;
// while it writes, further acknowledgements gather for its next write. The
// cost to the acknowledging goroutine is a map entry and a non-blocking
// channel send.
type acker struct {
	ch ackWriter

	mu    sync.Mutex
	floor uint64              // every tag up to floor is settled on the broker, or its ack is being written
	tags  map[uint64]struct{} // tags above floor settled locally
	acks  []uint64            // tags acknowledged since the last write
	ended bool                // close was called: no more acks are taken

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once

	sendMu sync.Mutex // one writer of acks at a time
	err    error      // the first failed write; later acks are not sent
	lost   func(n int64)
}

// ackWriter is the part of *amqp.Channel the acker writes to.
type ackWriter interface {
	Ack(tag uint64, multiple bool) error
}

// newAcker starts the writer of ch's acks. lost is told how many
// acknowledgements could not be written because the channel closed first
// (the broker requeues those deliveries).
func newAcker(ch ackWriter, lost func(n int64)) *acker {
	a := &acker{ch: ch, lost: lost, tags: map[uint64]struct{}{}, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go a.loop()
	return a
}

// ack records tag as acknowledged; the ack is written shortly. It reports
// false, recording nothing, once the acker is closed.
func (a *acker) ack(tag uint64) bool {
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return false
	}
	if tag > a.floor {
		a.tags[tag] = struct{}{}
		a.acks = append(a.acks, tag)
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return true
}

// settled records that tag was settled on the broker by the caller (a nack
// or reject already written), so runs of acks can pass over it.
func (a *acker) settled(tag uint64) {
	a.mu.Lock()
	if tag > a.floor {
		a.tags[tag] = struct{}{}
	}
	wake := len(a.acks) > 0
	a.mu.Unlock()
	if wake {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

func (a *acker) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.wake:
			a.flush()
		case <-a.quit:
			return
		}
	}
}

// close takes no more acks, stops the writer and writes what is waiting;
// on a channel already gone those writes fail at once and are counted
// lost (the broker requeues those deliveries).
func (a *acker) close() error {
	a.mu.Lock()
	a.ended = true
	a.mu.Unlock()
	a.once.Do(func() { close(a.quit) })
	<-a.done
	a.flush()
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	return a.err
}

// flush writes one multiple ack for the run of settled tags above floor,
// and single acks for acknowledged tags beyond a gap.
func (a *acker) flush() {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.mu.Lock()
	if len(a.acks) == 0 {
		a.mu.Unlock()
		return
	}
	h := a.floor
	for {
		if _, ok := a.tags[h+1]; !ok {
			break
		}
		h++
		delete(a.tags, h)
	}
	a.floor = h
	// The multiple ack names the highest acknowledged tag of the run: the
	// broker refuses (closing the channel) a tag it no longer holds, such as
	// one nacked already. Tags above it in the run are all settled there.
	var top uint64
	var singles []uint64
	for _, t := range a.acks {
		if t <= h {
			top = max(top, t)
		} else {
			singles = append(singles, t)
		}
	}
	n := int64(len(a.acks))
	a.acks = a.acks[:0]
	a.mu.Unlock()
	var lost int64
	switch {
	case a.err != nil:
		lost = n
	case top > 0 && a.ch.Ack(top, true) != nil:
		a.err, lost = ErrStaleDelivery, n
	default:
		for i, t := range singles {
			if a.ch.Ack(t, false) != nil {
				a.err, lost = ErrStaleDelivery, int64(len(singles)-i)
				break
			}
		}
	}
	if lost > 0 {
		a.lost(lost)
	}
}
