package ops

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/test/queuetest"
)

// TestAnInterruptedWaitNamesTheMessageSent: the message has gone out when
// the wait for its reply is interrupted (Ctrl-C): the error says which.
func TestAnInterruptedWaitNamesTheMessageSent(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("requests")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Interrupt once the message is in the queue (the wait has begun). No
	// t.Fatal here: off the test's goroutine; a message that never arrives
	// fails the assertion below through Send's own minute-long wait.
	go func() {
		defer cancel()
		for ctx.Err() == nil {
			if n, err := q.Top.Depth(ctx, target); err == nil && n == 1 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := Send(ctx, q.URL, decide.Message{RoutingKey: target, MessageID: "req-1", CorrelationID: "req-1", Body: []byte(`{}`)}, time.Minute)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "message req-1 was sent") {
		t.Fatalf("Send interrupted during its wait = %v, want context.Canceled naming message req-1 as sent", err)
	}
}

// TestSendWaitsNoLongerThanItsWaitForAConfirm sends through a proxy that
// passes the connection's set-up and nothing from the first basic.publish
// on, as a broker whose resource alarm blocks publishers reads nothing:
// the confirm never comes. `send --wait` must return within its wait,
// saying the outcome is unknown, instead of waiting for ever; and close
// its connection without the broker's close-ok, although the broker's
// heartbeats, still passed, kept pushing the socket's read deadline that
// amqp091-go sets for it (the close took twice the heartbeat, 20 s).
func TestSendWaitsNoLongerThanItsWaitForAConfirm(t *testing.T) {
	q := queuetest.New(t)
	target := q.Queue("requests")
	u, err := url.Parse(q.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = publishSwallower(t, u.Host)
	const wait = 500 * time.Millisecond
	start := time.Now()
	_, err = Send(t.Context(), u.String(), decide.Message{RoutingKey: target, MessageID: "req-1", CorrelationID: "req-1", Body: []byte(`{}`)}, wait)
	if took := time.Since(start); took > wait+10*time.Second {
		t.Fatalf("Send took %s with a wait of %s", took, wait)
	}
	if !errors.Is(err, broker.ErrIndeterminate) || !strings.Contains(err.Error(), "req-1") || !strings.Contains(err.Error(), "did not confirm") {
		t.Fatalf("Send without a confirm = %v, want ErrIndeterminate naming message req-1", err)
	}
}

// publishSwallower listens on a local port and forwards each connection
// to broker, passing the client's AMQP frames until its first basic.publish
// (class 60, method 40) and none from there on; the broker's are all
// passed. It returns the address to dial.
func publishSwallower(t *testing.T, brokerAddr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", brokerAddr)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); b.Close() })
			go io.Copy(c, b)
			go func() {
				r := bufio.NewReader(c)
				header := make([]byte, 8) // "AMQP" 0 0 9 1
				if _, err := io.ReadFull(r, header); err != nil {
					return
				}
				b.Write(header)
				for {
					head := make([]byte, 7) // type, channel, size
					if _, err := io.ReadFull(r, head); err != nil {
						return
					}
					rest := make([]byte, binary.BigEndian.Uint32(head[3:])+1) // payload and frame end
					if _, err := io.ReadFull(r, rest); err != nil {
						return
					}
					if head[0] == 1 && len(rest) >= 4 && binary.BigEndian.Uint16(rest) == 60 && binary.BigEndian.Uint16(rest[2:]) == 40 {
						io.Copy(io.Discard, r) // swallow the rest
						return
					}
					b.Write(append(head, rest...))
				}
			}()
		}
	}()
	return ln.Addr().String()
}
