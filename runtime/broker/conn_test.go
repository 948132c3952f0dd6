package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

func TestPasswordNeverAppearsInErrorsOrLogs(t *testing.T) {
	base := testenv.AMQP(t)
	const canary = "canary-Pa55w0rd-7f3a"
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	// A port nothing listens on: take one and free it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := l.Addr().(*net.TCPAddr).Port
	l.Close()

	wrongPort := *u
	wrongPort.User = url.UserPassword("guest", canary)
	wrongPort.Host = fmt.Sprintf("127.0.0.1:%d", freePort)
	wrongPass := *u
	wrongPass.User = url.UserPassword("guest", canary)

	cases := []struct {
		name string
		url  string
	}{
		{"a wrong port", wrongPort.String()},
		{"the broker refusing the password", wrongPass.String()},
		{"a URL that does not parse", "amqp://guest:" + canary + "@127.0.0.1:notaport/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testenv.Buffer{}
			log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
			defer cancel()
			c, err := Open(ctx, tc.url, ConnOptions{Name: testenv.Names(t), Log: log, BackoffMin: 50 * time.Millisecond})
			if err == nil {
				c.Close()
				t.Fatalf("Open(%s) = nil error, want a failure", tc.name)
			}
			for what, text := range map[string]string{"error": err.Error(), "logs": logs.String()} {
				if strings.Contains(text, canary) {
					t.Errorf("the password appears in the %s:\n%s", what, text)
				}
			}
			if tc.name != "a URL that does not parse" && !strings.Contains(err.Error(), "xxxxx") {
				t.Errorf("Open error %q, want the redacted URL in it", err)
			}
			t.Logf("error: %v", err)
		})
	}
}

// TestOpenFailsAtOnceWhenTheBrokerRefuses: a wrong password, a vhost that
// does not exist and a URL that is not AMQP cannot be fixed by waiting, so
// a first connection fails at once, saying what to correct, rather than
// retrying until its context ends (for `run`, forever).
func TestOpenFailsAtOnceWhenTheBrokerRefuses(t *testing.T) {
	base := testenv.AMQP(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	wrongPass := *u
	wrongPass.User = url.UserPassword("guest", "not-the-password")
	noVhost := *u
	noVhost.Path = "/" + testenv.Names(t) + "-no-such-vhost"
	httpURL := *u
	httpURL.Scheme = "http"
	for _, tc := range []struct{ name, url, want string }{
		{"wrong password", wrongPass.String(), "refused the user name and password"},
		{"missing vhost", noVhost.String(), "refused the virtual host"},
		{"not an AMQP URL", httpURL.String(), "invalid AMQP URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			c, err := Open(ctx, tc.url, ConnOptions{Name: testenv.Names(t), BackoffMin: 50 * time.Millisecond})
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			if ctx.Err() != nil {
				t.Fatalf("Open returned only when its context ended: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open error %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestConnReportsStateAndReconnects(t *testing.T) {
	e := newEnv(t)
	c := e.conn("watched")
	if c.State() != StateConnected || c.Reconnects() != 0 {
		t.Fatalf("after Open: state %v, reconnects %d; want connected, 0", c.State(), c.Reconnects())
	}
	if strings.Contains(c.URL(), "guest:guest") {
		t.Errorf("URL() = %q, want the password redacted", c.URL())
	}
	closeConnection(t, c.Name())
	testenv.Eventually(t, 20*time.Second, func() error {
		if c.Reconnects() == 1 && c.State() == StateConnected {
			return nil
		}
		return fmt.Errorf("state %v, reconnects %d", c.State(), c.Reconnects())
	})
	ch, err := c.Channel(t.Context())
	if err != nil {
		t.Fatalf("Channel after reconnect = %v", err)
	}
	ch.Close()
	if !strings.Contains(e.logs.String(), "connection re-established") {
		t.Errorf("logs lack the reconnect:\n%s", e.logs.String())
	}
	c.Close()
	c.Close()
	if c.State() != StateClosed {
		t.Errorf("after Close: state %v, want closed", c.State())
	}
	if _, err := c.Channel(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Channel after Close = %v, want ErrClosed", err)
	}
}

// TestNoMessageLostWhileConnectionsAreForceClosed feeds 5,000 messages
// through a hop (consume from one queue, publish to the next, acknowledge
// the input when the output is confirmed) and counts them at the end, while
// the test force-closes the consuming and the publishing connection twice.
// Every message must arrive at least once. A publish whose outcome is
// unknown is published again with the same message id; a hop input whose
// output failed is nacked back to its queue.
func TestNoMessageLostWhileConnectionsAreForceClosed(t *testing.T) {
	e := newEnv(t)
	src, sink := e.queue("src", "quorum"), e.queue("sink", "quorum")
	pc, cc := e.conn("pub"), e.conn("consume")
	p := e.publisher(pc, 128)
	hop := NewConsumer(cc, ConsumerOptions{Queue: src, Prefetch: 100, Log: e.log})
	end := NewConsumer(cc, ConsumerOptions{Queue: sink, Prefetch: 100, Concurrency: 2, Log: e.log})

	const total = 5000
	var (
		mu       sync.Mutex
		seen     = make(map[string]int, total)
		dups     int
		progress = make(chan int, total*4)
	)
	stopHop := runConsumer(t, hop, func(ctx context.Context, d *Delivery) {
		out := msg(sink, d.MessageId, d.Body)
		err := p.PublishFunc(ctx, out, func(err error) {
			if err == nil {
				d.Ack() // ErrStaleDelivery after a cut: the broker redelivers it
			} else {
				d.Nack(true)
			}
		})
		if err != nil {
			d.Nack(true)
		}
	})
	// At each cut the end consumer holds its deliveries unacknowledged
	// until both connections were closed, so the cut always finds
	// deliveries in flight; their acks are then stale.
	var hold sync.RWMutex
	stopEnd := runConsumer(t, end, func(_ context.Context, d *Delivery) {
		mu.Lock()
		seen[d.MessageId]++
		if seen[d.MessageId] > 1 {
			dups++
		}
		n := len(seen)
		mu.Unlock()
		progress <- n
		hold.RLock()
		d.Ack() // ErrStaleDelivery after a cut: the broker redelivers it
		hold.RUnlock()
	})

	// Feed 500 messages a second in bursts, so the cuts land under load;
	// each id is published until it is confirmed.
	feedErr := make(chan error, 1)
	go func() {
		defer close(feedErr)
		ctx := t.Context()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var wg sync.WaitGroup
		for i := 0; i < total; i += 25 {
			<-tick.C
			for j := i; j < min(i+25, total); j++ {
				wg.Add(1)
				go func(id string) {
					defer wg.Done()
					for attempt := 1; ; attempt++ {
						err := p.Publish(ctx, msg(src, id, make([]byte, 1024)))
						if err == nil {
							return
						}
						if !errors.Is(err, ErrIndeterminate) || attempt > 20 || ctx.Err() != nil {
							select {
							case feedErr <- fmt.Errorf("publish %s: %w", id, err):
							default:
							}
							return
						}
					}
				}(fmt.Sprint(j))
			}
		}
		wg.Wait()
	}()

	cuts := []int{total / 5, total / 2}
	deadline := time.After(120 * time.Second)
	for n := 0; n < total; {
		select {
		case n = <-progress:
			if len(cuts) > 0 && n >= cuts[0] {
				cuts = cuts[1:]
				hold.Lock()
				closeConnections(t, cc.Name(), pc.Name())
				hold.Unlock()
			}
		case <-deadline:
			mu.Lock()
			t.Fatalf("only %d of %d distinct messages arrived", len(seen), total)
		}
	}
	if err := <-feedErr; err != nil {
		t.Fatalf("feeding: %v", err)
	}
	if err := stopHop(); err != nil {
		t.Errorf("hop Run = %v", err)
	}
	if err := stopEnd(); err != nil {
		t.Errorf("end Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range total {
		if seen[fmt.Sprint(i)] == 0 {
			t.Errorf("message %d lost", i)
		}
	}
	if dups == 0 || end.Stats().Stale == 0 {
		t.Errorf("no delivery was in flight at a cut (%d duplicates, %d stale acks): the test did not test", dups, end.Stats().Stale)
	}
	if pc.Reconnects() != 2 || cc.Reconnects() != 2 {
		t.Errorf("reconnects: publishing %d, consuming %d; want 2 each", pc.Reconnects(), cc.Reconnects())
	}
	t.Logf("%d distinct, %d duplicates; publisher %+v; hop %+v; end %+v", len(seen), dups, p.Stats(), hop.Stats(), end.Stats())
}

// TestPasswordWithReservedCharactersNeverLeaks: a password with an unescaped
// '/', '?' or '#' ends the URL's authority early, so net/url either fails
// with an error quoting part of the password or parses that part as the
// host, port or path. No part of it may reach an error, a log line or the
// redacted URL.
func TestPasswordWithReservedCharactersNeverLeaks(t *testing.T) {
	cases := []struct {
		url   string
		parts []string // pieces of the password that must not appear
	}{
		{"amqp://user:s3cr/et@host", []string{"s3cr"}},
		{"amqp://user:12345/x@host", []string{"12345"}},
		{"amqp://user:q7?zz@host:5672/", []string{"q7", "zz"}},
		{"amqp://user:w9#kk@host/vh", []string{"w9", "kk"}},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprint("case ", i), func(t *testing.T) {
			logs := &testenv.Buffer{}
			log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
			defer cancel()
			c, err := Open(ctx, tc.url, ConnOptions{Name: "leak-check", Log: log, BackoffMin: 50 * time.Millisecond})
			if err == nil {
				c.Close()
				t.Fatalf("Open(case %d) succeeded, want an invalid-URL error", i)
			}
			for what, text := range map[string]string{"error": err.Error(), "logs": logs.String()} {
				for _, part := range tc.parts {
					if strings.Contains(text, part) {
						t.Errorf("the %s contains %q from the password: %s", what, part, text)
					}
				}
			}
			if !strings.Contains(err.Error(), "invalid AMQP URL") || !strings.Contains(err.Error(), "percent-encode") {
				t.Errorf("Open error %q, want it to call the URL invalid and say to percent-encode", err)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqp://user:s3cr/et@host", "amqp://user:xxxxx@host"},
		{"amqp://user:12345/x@host", "amqp://user:xxxxx@host"},
		{"amqp://user:q7?zz@host:5672/", "amqp://user:xxxxx@host:5672/"},
		{"amqp://user:w9#kk@host/vh", "amqp://user:xxxxx@host/vh"},
		{"amqps://user:p@ss@host/vh", "amqps://user:xxxxx@host/vh"},
		{"amqp://token@host", "amqp://token@host"},
		{"amqp://host:5672/vh", "amqp://host:5672/vh"},
		{"user:pass@host", "xxxxx@host"},
	}
	for _, tc := range cases {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
