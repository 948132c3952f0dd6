package harness

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Outcome is what the broker said of one publish, in Jepsen's terms.
type Outcome int

const (
	// OK: confirmed (acked) and not returned: the broker has it.
	OK Outcome = iota
	// Fail: nacked or returned unroutable: the broker definitely does not.
	Fail
	// Info: no answer (a timeout, or the channel closed first): unknown.
	Info
	// pending: published, its confirm not yet waited for; never in a
	// verdict (Publish settles every message before it returns).
	pending
)

// Sent is the generator's record of every message it published.
type Sent struct {
	mu      sync.Mutex
	outcome map[string]Outcome
	at      map[string]time.Time
}

// NewSent returns an empty record.
func NewSent() *Sent {
	return &Sent{outcome: map[string]Outcome{}, at: map[string]time.Time{}}
}

// IDs returns the ids whose outcome is o.
func (s *Sent) IDs(o Outcome) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, got := range s.outcome {
		if got == o {
			ids = append(ids, id)
		}
	}
	return ids
}

// Len is how many messages were published.
func (s *Sent) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outcome)
}

// At is when id was published.
func (s *Sent) At(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[id]
}

func (s *Sent) set(id string, o Outcome, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.outcome[id]; ok && prev == OK {
		return // a republish of an id the broker already confirmed stays ok
	}
	s.outcome[id] = o
	if !at.IsZero() {
		s.at[id] = at
	}
}

// publishing records that id goes out now, its outcome not known yet; a
// republish of an id already confirmed stays ok.
func (s *Sent) publishing(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.outcome[id]; !ok || prev != OK {
		s.outcome[id] = pending
	}
	s.at[id] = at
}

// settled records what the broker answered for id; an id it confirmed
// before (a republish) stays ok.
func (s *Sent) settled(id string, o Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outcome[id] != OK {
		s.outcome[id] = o
	}
}

// Message is one publish the generator makes.
type Message struct {
	ID       string
	Exchange string
	Key      string
	Body     string
	Headers  amqp.Table
	// ContentType is application/json when empty.
	ContentType string
}

// Generator publishes with confirms and mandatory over a connection of its
// own and records each message's outcome in Sent.
type Generator struct {
	Sent    *Sent
	ReplyTo string
	// ConfirmTimeout is how long Publish waits for one confirm before it
	// records the message info (30s when zero).
	ConfirmTimeout time.Duration
	conn           *amqp.Connection
	ch             *amqp.Channel
	returns        chan amqp.Return
}

// NewGenerator dials url (the connection named "reliability generator", so
// that fault injection can spare it) and puts its channel in confirm mode.
func NewGenerator(t testing.TB, url, replyTo string) *Generator {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "reliability generator"}})
	if err != nil {
		t.Fatalf("generator: dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return &Generator{Sent: NewSent(), ReplyTo: replyTo, conn: conn, ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1<<16))}
}

// Publish publishes msgs at rate per second (0: as fast as confirms
// allow, in batches of 100) and waits for every confirm, up to
// ConfirmTimeout each.
// It returns the first publish that failed to go out (the rest not sent);
// it may run in a goroutine of its own.
func (g *Generator) Publish(rate int, msgs ...Message) error {
	type pending struct {
		id string
		dc *amqp.DeferredConfirmation
	}
	var batch []pending
	wait := g.ConfirmTimeout
	if wait <= 0 {
		wait = 30 * time.Second
	}
	settle := func() {
		for _, p := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			ok, err := p.dc.WaitContext(ctx)
			cancel()
			switch {
			case err != nil || (!ok && g.ch.IsClosed()):
				// No answer in time, or a channel that closed first (it
				// resolves its confirms as nacks): unknown, not refused.
				g.Sent.settled(p.id, Info)
			case !ok:
				g.Sent.settled(p.id, Fail)
			default:
				g.Sent.settled(p.id, OK)
			}
		}
		batch = batch[:0]
		// A return comes before its message's ack: every return of this
		// batch is queued by now.
	returns:
		for {
			select {
			case r := <-g.returns:
				g.Sent.mu.Lock()
				g.Sent.outcome[r.MessageId] = Fail
				g.Sent.mu.Unlock()
			default:
				break returns
			}
		}
	}
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
	}
	for i, m := range msgs {
		if tick != nil {
			<-tick.C
		}
		now := time.Now()
		// Ok only once confirmed: recorded ok before the confirm, a publish
		// whose answer never came could not be told from one the broker has.
		g.Sent.publishing(m.ID, now)
		ct := m.ContentType
		if ct == "" {
			ct = "application/json"
		}
		dc, err := g.ch.PublishWithDeferredConfirmWithContext(context.Background(), m.Exchange, m.Key, true, false, amqp.Publishing{
			MessageId: m.ID, ReplyTo: g.ReplyTo, ContentType: ct, Body: []byte(m.Body),
			DeliveryMode: amqp.Persistent, Headers: m.Headers, Timestamp: now,
		})
		if err != nil {
			g.Sent.settled(m.ID, Info)
			settle()
			return fmt.Errorf("generator: publish %s: %w", m.ID, err)
		}
		batch = append(batch, pending{m.ID, dc})
		if len(batch) == 100 || i == len(msgs)-1 || (rate > 0 && rate < 200 && len(batch) >= rate/10+1) {
			settle()
		}
	}
	settle()
	return nil
}

// Messages returns n messages to exchange/key with body, ids prefix-0…
func Messages(prefix, exchange, key, body string, n int) []Message {
	ms := make([]Message, n)
	for i := range ms {
		ms[i] = Message{ID: fmt.Sprintf("%s-%d", prefix, i), Exchange: exchange, Key: key, Body: body}
	}
	return ms
}
