package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestPublishConfirmedAndRouted(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 16)

	if err := p.Publish(t.Context(), msg(q, "m-1", []byte("hello"))); err != nil {
		t.Fatalf("Publish(to %s) = %v, want nil", q, err)
	}
	d, err := e.topo.Get(t.Context(), q)
	if err != nil || d == nil {
		t.Fatalf("Get(%s) = %v, %v; want the message", q, d, err)
	}
	if d.MessageId != "m-1" || string(d.Body) != "hello" || d.DeliveryMode != amqp.Persistent {
		t.Errorf("Get(%s) = id %q body %q mode %d, want m-1 hello persistent", q, d.MessageId, d.Body, d.DeliveryMode)
	}
	if err := d.Ack(); err != nil {
		t.Errorf("Ack() = %v", err)
	}
	if err := d.Ack(); !errors.Is(err, ErrAlreadySettled) {
		t.Errorf("second Ack() = %v, want ErrAlreadySettled", err)
	}
	e.waitDepth(q, 0)
}

func TestPublishUnroutableIsAnError(t *testing.T) {
	e := newEnv(t)
	x := e.exchange("events", "direct")
	p := e.publisher(e.conn("pub"), 64)

	err := p.Publish(t.Context(), Message{Exchange: x, RoutingKey: "nobody.listens", Publishing: amqp.Publishing{MessageId: "m-1"}})
	var ue *UnroutableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnroutable) {
		t.Fatalf("Publish(unbound key) = %v, want *UnroutableError", err)
	}
	if ue.Exchange != x || ue.RoutingKey != "nobody.listens" || !strings.Contains(err.Error(), x) || !strings.Contains(err.Error(), "nobody.listens") {
		t.Errorf("UnroutableError = %+v (%q), want it to name exchange %s and key nobody.listens", ue, err, x)
	}
}

func TestPublishOutcomesStayCorrelatedInFlight(t *testing.T) {
	e := newEnv(t)
	x := e.exchange("events", "direct")
	q := e.queue("bound", "quorum")
	if err := e.topo.Bind(t.Context(), Binding{Queue: q, Exchange: x, RoutingKey: "bound"}); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(e.conn("pub"), 64)

	const n = 400
	pending := make([]*Pending, n)
	for i := range n {
		key := "bound"
		if i%3 == 0 {
			key = "unbound"
		}
		var err error
		pending[i], err = p.PublishAsync(t.Context(), Message{Exchange: x, RoutingKey: key, Publishing: amqp.Publishing{MessageId: fmt.Sprint(i)}})
		if err != nil {
			t.Fatalf("PublishAsync(%d) = %v", i, err)
		}
	}
	routed := 0
	for i, pd := range pending {
		err := pd.Wait(t.Context())
		if i%3 == 0 {
			if !errors.Is(err, ErrUnroutable) {
				t.Errorf("message %d to an unbound key: %v, want ErrUnroutable", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("message %d to a bound key: %v, want nil", i, err)
		}
		routed++
	}
	e.waitDepth(q, routed)
	if s := p.Stats(); s.Confirmed != int64(routed) || s.Unroutable != int64(n-routed) || s.InFlight != 0 {
		t.Errorf("Stats() = %+v, want %d confirmed, %d unroutable, none in flight", s, routed, n-routed)
	}
}

func TestPublishToMissingExchangeFailsAndThePublisherRecovers(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 16)

	err := p.Publish(t.Context(), Message{Exchange: e.ns + "-missing", RoutingKey: "k", Publishing: amqp.Publishing{MessageId: "m-1"}})
	if err == nil || ReplyCode(err) != amqp.NotFound || !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("Publish(to a missing exchange) = %v, want an indeterminate error with reply code 404", err)
	}
	if !strings.Contains(err.Error(), e.ns+"-missing") {
		t.Errorf("Publish(to a missing exchange) = %q, want it to name the exchange", err)
	}
	if err := p.Publish(t.Context(), msg(q, "m-2", nil)); err != nil {
		t.Fatalf("Publish after the channel error = %v, want nil", err)
	}
	e.waitDepth(q, 1)
	if s := p.Stats(); s.Channels != 2 {
		t.Errorf("Stats().Channels = %d, want 2 (reopened once)", s.Channels)
	}
}

func TestPublishFuncCallsBackOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	p := e.publisher(e.conn("pub"), 8)

	done := make(chan error, 100)
	for i := range 100 {
		if err := p.PublishFunc(t.Context(), msg(q, fmt.Sprint(i), nil), func(err error) { done <- err }); err != nil {
			t.Fatalf("PublishFunc(%d) = %v", i, err)
		}
	}
	for range 100 {
		if err := <-done; err != nil {
			t.Errorf("PublishFunc callback = %v, want nil", err)
		}
	}
	e.waitDepth(q, 100)
	if err := p.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := p.Publish(context.Background(), msg(q, "late", nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestPublishOfAnUnencodableHeaderFailsAtOnce(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	p := e.publisher(e.conn("pub"), 8)
	m := msg(q, "bad", nil)
	m.Headers = amqp.Table{"x-bad": struct{}{}}
	if err := p.Publish(t.Context(), m); !errors.Is(err, ErrInvalidMessage) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("Publish(bad header) = %v, want an immediate *InvalidMessageError", err)
	}
	if err := p.Publish(t.Context(), msg(q, "good", nil)); err != nil {
		t.Fatalf("Publish after a refused message = %v", err)
	}
	if s := p.Stats(); s.Channels != 1 || s.InFlight != 0 {
		t.Errorf("Stats() = %+v, want the first channel still in use and nothing in flight", s)
	}
}

func TestPendingWaitGivesUpWithAnIndeterminateError(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "quorum")
	p := e.publisher(e.conn("pub"), 8)
	pd, err := p.PublishAsync(t.Context(), msg(q, "m-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := pd.Wait(ctx); !errors.Is(err, ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled ctx) = %v, want indeterminate wrapping context.Canceled", err)
	}
	if err := pd.Err(); err != nil {
		t.Errorf("Err() = %v, want the publish confirmed all the same", err)
	}
}

// TestReturnMarksOnlyThePublishItBelongsTo: basic.return carries no delivery
// tag. Two publishes with the same message id (here empty), exchange and
// routing key await their confirms at once; the headers exchange routes one
// and returns the other. Only the returned one may fail, whichever was
// published first.
func TestReturnMarksOnlyThePublishItBelongsTo(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(e.conn("pub"), 16)
	for _, order := range []string{"unroutable-first", "routed-first"} {
		x := e.exchange("hdr-"+order, "headers")
		q := e.queue("routed-"+order, "classic")
		if err := e.topo.Bind(t.Context(), Binding{Queue: q, Exchange: x, Args: map[string]any{"x-match": "all", "route": "yes"}}); err != nil {
			t.Fatal(err)
		}
		t.Run(order, func(t *testing.T) {
			// The blocker's callback holds the confirm goroutine, so both
			// publishes below are unconfirmed when the second is made.
			release := make(chan struct{})
			blocked := make(chan error, 1)
			if err := p.PublishFunc(t.Context(), msg(q, "blocker", nil), func(err error) {
				<-release
				blocked <- err
			}); err != nil {
				close(release)
				t.Fatalf("PublishFunc(blocker) = %v", err)
			}
			routes := []string{"no", "yes"}
			if order == "routed-first" {
				routes = []string{"yes", "no"}
			}
			var pending []*Pending
			for _, r := range routes {
				pd, err := p.PublishAsync(t.Context(), Message{Exchange: x, Publishing: amqp.Publishing{Headers: amqp.Table{"route": r}}})
				if err != nil {
					close(release)
					t.Fatalf("PublishAsync(route=%s) = %v", r, err)
				}
				pending = append(pending, pd)
			}
			close(release)
			if err := <-blocked; err != nil {
				t.Errorf("blocker = %v, want nil", err)
			}
			for i, r := range routes {
				err := pending[i].Wait(t.Context())
				if r == "no" && !errors.Is(err, ErrUnroutable) {
					t.Errorf("publish %d (route=no) = %v, want ErrUnroutable", i+1, err)
				}
				if r == "yes" && err != nil {
					t.Errorf("publish %d (route=yes) = %v, want nil: it was routed", i+1, err)
				}
			}
			e.waitDepth(q, 2)
			// Only a publish made while its twin was pending carries the stamp.
			for range 2 {
				d, err := e.topo.Get(t.Context(), q)
				if err != nil || d == nil {
					t.Fatalf("Get(%s) = %v, %v; want a message", q, d, err)
				}
				_, stamped := d.Headers[publishSeqHeader]
				wantStamp := d.Headers["route"] == "yes" && order == "unroutable-first"
				if stamped != wantStamp {
					t.Errorf("message %q with headers %v: stamped %v, want %v", d.MessageId, d.Headers, stamped, wantStamp)
				}
				d.Ack()
			}
		})
	}
}

// TestPublishFailsOnceTheConnIsClosed: a Conn closed before its Publisher
// ends the publishing channel for good; a publish with no deadline of its
// own must fail with ErrClosed instead of waiting for a channel that will
// never open.
func TestPublishFailsOnceTheConnIsClosed(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	c := e.conn("pub")
	p := e.publisher(c, 8)
	if err := p.Publish(t.Context(), msg(q, "m-1", nil)); err != nil {
		t.Fatalf("Publish = %v, want nil", err)
	}
	c.Close()
	res := make(chan error, 1)
	go func() { res <- p.Publish(context.Background(), msg(q, "m-2", nil)) }()
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Publish after the Conn closed = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Publish(context.Background()) after the Conn closed has not returned within 10s")
	}
}

// TestCloseReturnsWhenTheBrokerStopsReading: a broker under a resource alarm
// stops reading the socket, so neither the confirms nor the close-ok of the
// publishing channel ever come. Close must still return, within CloseTimeout
// and two OpTimeouts, having failed every pending publish exactly once.
func TestCloseReturnsWhenTheBrokerStopsReading(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	px := newStallProxy(t, e.url)
	const opTimeout = 300 * time.Millisecond
	c, err := Open(t.Context(), px.url, ConnOptions{Name: e.ns + "-stalled", Log: e.log, Heartbeat: time.Minute, OpTimeout: opTimeout})
	if err != nil {
		t.Fatalf("Open(through the proxy) = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := OpenPublisher(t.Context(), c, PublisherOptions{Window: 16, CloseTimeout: 200 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatalf("OpenPublisher = %v", err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Publish(t.Context(), msg(q, "before", nil)); err != nil {
		t.Fatalf("Publish(before the stall) = %v, want nil", err)
	}

	px.stall()
	const n = 5
	var (
		mu    sync.Mutex
		calls = make(map[string][]error, n)
	)
	for i := range n {
		id := fmt.Sprint("stalled-", i)
		if err := p.PublishFunc(t.Context(), msg(q, id, nil), func(err error) {
			mu.Lock()
			calls[id] = append(calls[id], err)
			mu.Unlock()
		}); err != nil {
			t.Fatalf("PublishFunc(%s) = %v", id, err)
		}
	}

	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close has not returned within 5s while the broker reads nothing")
	}
	check := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			id := fmt.Sprint("stalled-", i)
			errs := calls[id]
			if len(errs) != 1 || !errors.Is(errs[0], ErrIndeterminate) {
				t.Errorf("%s: callback of %s called with %v, want once with an indeterminate error", when, id, errs)
			}
		}
	}
	check("after Close")

	// The confirm goroutine ends with the connection; it must find nothing
	// left to fail a second time.
	c.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the publisher's confirm goroutine has not ended within 10s of the Conn closing")
	}
	check("after the Conn closed")
}

// stallProxy forwards TCP connections from a port on 127.0.0.1 to the
// broker. After stall it stops passing on what the clients send, as a broker
// that stops reading its sockets does, while the broker's side still flows.
type stallProxy struct {
	url     string
	ln      net.Listener
	target  string
	stalled chan struct{}
	stop    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newStallProxy(t *testing.T, brokerURL string) *stallProxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &stallProxy{ln: ln, target: u.Host, stalled: make(chan struct{}), stop: make(chan struct{})}
	u.Host = ln.Addr().String()
	px.url = u.String()
	px.wg.Go(px.accept)
	t.Cleanup(px.close)
	return px
}

func (px *stallProxy) stall() { px.once.Do(func() { close(px.stalled) }) }

func (px *stallProxy) accept() {
	for {
		client, err := px.ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.Dial("tcp", px.target)
		if err != nil {
			client.Close()
			continue
		}
		px.mu.Lock()
		if isClosed(px.stop) {
			px.mu.Unlock()
			client.Close()
			broker.Close()
			return
		}
		px.conns = append(px.conns, client, broker)
		px.mu.Unlock()
		px.wg.Go(func() { px.pipe(broker, client, true) })
		px.wg.Go(func() { px.pipe(client, broker, false) })
	}
}

// pipe copies from src to dst until either fails or the proxy closes;
// when stallable, it holds what it read once the proxy is stalled.
func (px *stallProxy) pipe(dst, src net.Conn, stallable bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if stallable && isClosed(px.stalled) {
				<-px.stop
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (px *stallProxy) close() {
	close(px.stop)
	px.ln.Close()
	px.mu.Lock()
	for _, c := range px.conns {
		c.Close()
	}
	px.mu.Unlock()
	px.wg.Wait()
}
