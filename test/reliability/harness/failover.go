package harness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// FailoverGenerator publishes like Generator, for scenarios that stop or
// kill broker nodes: when its connection dies it redials the next of its
// URLs every 500 ms (Watermill's reconnect test: publishers retry every
// 500 ms) and republishes, with the same message id, every message whose
// confirm it did not get. Such a message is recorded info until a
// republish is confirmed, and then ok; Republished counts them.
type FailoverGenerator struct {
	Sent    *Sent
	ReplyTo string
	urls    []string
	next    int
	mu      sync.Mutex // one Publish at a time on the channel
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return

	republished atomic.Int64
	redials     atomic.Int64
}

// NewFailoverGenerator dials the first of urls that answers (the
// connection named "reliability generator").
func NewFailoverGenerator(t testing.TB, urls []string, replyTo string) *FailoverGenerator {
	t.Helper()
	g := &FailoverGenerator{Sent: NewSent(), ReplyTo: replyTo, urls: urls}
	if err := g.redial(time.Minute); err != nil {
		t.Fatalf("generator: %v", err)
	}
	t.Cleanup(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.conn != nil {
			g.conn.Close()
		}
	})
	return g
}

// Republished is how many publishes were made again after their first
// outcome was unknown.
func (g *FailoverGenerator) Republished() int { return int(g.republished.Load()) }

// Redials is how many times the generator connected again.
func (g *FailoverGenerator) Redials() int { return int(g.redials.Load()) }

// redial connects to the next URL that answers, trying every 500 ms for up
// to d.
func (g *FailoverGenerator) redial(d time.Duration) error {
	if g.conn != nil {
		g.conn.Close()
	}
	end := time.Now().Add(d)
	var last error
	for time.Now().Before(end) {
		u := g.urls[g.next%len(g.urls)]
		g.next++
		conn, err := amqp.DialConfig(u, amqp.Config{Properties: amqp.Table{"connection_name": "reliability generator"}, Heartbeat: 5 * time.Second})
		if err == nil {
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			if err == nil {
				g.conn, g.ch, g.returns = conn, ch, ch.NotifyReturn(make(chan amqp.Return, 1<<16))
				return nil
			}
			conn.Close()
		}
		last = err
		time.Sleep(500 * time.Millisecond) // the retry period of the plan
	}
	return fmt.Errorf("no broker URL answered for %s: %v", d, last)
}

// Publish publishes msgs at rate per second (0: as fast as confirms
// allow) and waits for every confirm, republishing after a redial what a
// dead connection left unconfirmed. It returns an error only when no URL
// answered for two minutes.
func (g *FailoverGenerator) Publish(rate int, msgs ...Message) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
	}
	type pending struct {
		m  Message
		dc *amqp.DeferredConfirmation
	}
	var batch []pending
	var again []Message
	// settle waits for the batch's confirms; what the connection's death
	// left unknown goes to again.
	settle := func() {
		for _, p := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ok, err := p.dc.WaitContext(ctx)
			cancel()
			switch {
			case err != nil || (!ok && g.ch.IsClosed()):
				// A channel that closes resolves its confirms as nacks:
				// unknown, not refused.
				g.Sent.force(p.m.ID, Info)
				again = append(again, p.m)
			case !ok:
				g.Sent.force(p.m.ID, Fail)
			default:
				g.Sent.promote(p.m.ID)
			}
		}
		batch = batch[:0]
	returns:
		for {
			select {
			case r, ok := <-g.returns:
				if !ok {
					// Closed with the channel: a closed channel reads at
					// once, forever.
					break returns
				}
				g.Sent.mu.Lock()
				g.Sent.outcome[r.MessageId] = Fail
				g.Sent.mu.Unlock()
			default:
				break returns
			}
		}
	}
	send := func(m Message, first bool) bool {
		now := time.Now()
		if first {
			g.Sent.set(m.ID, OK, now)
		}
		ct := m.ContentType
		if ct == "" {
			ct = "application/json"
		}
		dc, err := g.ch.PublishWithDeferredConfirmWithContext(context.Background(), m.Exchange, m.Key, true, false, amqp.Publishing{
			MessageId: m.ID, ReplyTo: g.ReplyTo, ContentType: ct, Body: []byte(m.Body),
			DeliveryMode: amqp.Persistent, Headers: m.Headers, Timestamp: now,
		})
		if err != nil {
			g.Sent.force(m.ID, Info)
			again = append(again, m)
			return false
		}
		batch = append(batch, pending{m, dc})
		return true
	}
	// resume redials until the messages left unknown are all confirmed.
	resume := func() error {
		for len(again) > 0 || g.ch.IsClosed() {
			settle()
			if err := g.redial(2 * time.Minute); err != nil {
				return err
			}
			g.redials.Add(1)
			retry := again
			again = nil
			for _, m := range retry {
				g.republished.Add(1)
				if !send(m, false) {
					break
				}
			}
			settle()
		}
		return nil
	}
	for _, m := range msgs {
		if tick != nil {
			<-tick.C
		}
		if !send(m, true) {
			settle()
			if err := resume(); err != nil {
				return err
			}
			continue
		}
		if len(batch) >= 100 || (rate > 0 && rate < 200 && len(batch) >= rate/10+1) {
			settle()
			if len(again) > 0 {
				if err := resume(); err != nil {
					return err
				}
			}
		}
	}
	settle()
	return resume()
}

// force records outcome o for id, whatever it was.
func (s *Sent) force(id string, o Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcome[id] = o
}

// promote records a republished message the broker confirmed as ok.
func (s *Sent) promote(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outcome[id] == Info {
		s.outcome[id] = OK
	}
}

// CollectFrom is Collect for scenarios that stop broker nodes: the reply
// queue is a quorum queue (on every node of a cluster), each reply is
// acknowledged once recorded, and a connection that dies is redialled on
// the next of urls every 500 ms until the test ends. A reply the broker
// redelivers after a lost ack counts as a duplicate.
func CollectFrom(t testing.TB, urls []string, queue string) *Replies {
	t.Helper()
	r := &Replies{outcome: map[string]string{}, at: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	stop := make(chan struct{})
	done := make(chan struct{})
	var mu sync.Mutex
	var cur *amqp.Connection
	consume := func(u string) (<-chan amqp.Delivery, error) {
		conn, err := amqp.DialConfig(u, amqp.Config{Properties: amqp.Table{"connection_name": "reliability collector"}, Heartbeat: 5 * time.Second})
		if err != nil {
			return nil, err
		}
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		}
		if err == nil {
			err = ch.Qos(500, 0, false)
		}
		var dels <-chan amqp.Delivery
		if err == nil {
			dels, err = ch.Consume(queue, "", false, false, false, false, nil)
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
		mu.Lock()
		cur = conn
		mu.Unlock()
		return dels, nil
	}
	dels, err := consume(urls[0])
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	go func() {
		defer close(done)
		next := 1
		for {
			for d := range dels {
				r.mu.Lock()
				if _, ok := r.outcome[d.CorrelationId]; ok {
					r.dups++
				} else {
					r.outcome[d.CorrelationId] = fmt.Sprint(d.Headers["x-acemq-outcome"])
					r.at[d.CorrelationId] = time.Now()
				}
				r.mu.Unlock()
				_ = d.Ack(false)
				select {
				case r.changed <- struct{}{}:
				default:
				}
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := consume(urls[next%len(urls)])
				next++
				if err == nil {
					select {
					case <-stop: // the cleanup closed the connection before this one
						mu.Lock()
						cur.Close()
						mu.Unlock()
						return
					default:
					}
					dels = d
					break
				}
				time.Sleep(500 * time.Millisecond) // the retry period of the plan
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		mu.Lock()
		cur.Close()
		mu.Unlock()
		<-done
	})
	return r
}
