package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestPublishOfAnOverlongFieldFailsAtOnceAndKeepsTheConnection: amqp091-go
// cannot encode a short string (exchange, routing key, most properties, a
// header key at any depth) longer than 255 bytes, and it shuts the whole
// connection down when it tries. Such a publish must fail before anything
// is written, with an *InvalidMessageError naming the field, without taking
// a window slot and without touching the channel or the connection.
func TestPublishOfAnOverlongFieldFailsAtOnceAndKeepsTheConnection(t *testing.T) {
	e := newEnv(t)
	q := e.queue("in", "classic")
	c := e.conn("pub")
	p := e.publisher(c, 1)

	// Fill the window of one: the blocker's callback holds the confirm
	// goroutine, so the confirm of "held" cannot be processed and its slot
	// stays taken until release.
	release := make(chan struct{})
	blocked := make(chan error, 1)
	if err := p.PublishFunc(t.Context(), msg(q, "blocker", nil), func(err error) {
		<-release
		blocked <- err
	}); err != nil {
		t.Fatalf("PublishFunc(blocker) = %v", err)
	}
	held, err := p.PublishAsync(t.Context(), msg(q, "held", nil))
	if err != nil {
		t.Fatalf("PublishAsync(held) = %v", err)
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	long := strings.Repeat("k", 256)
	set := func(f func(m *Message)) Message {
		m := msg(q, "m-1", nil)
		f(&m)
		return m
	}
	cases := []struct {
		name  string
		msg   Message
		field string
	}{
		{"an exchange", set(func(m *Message) { m.Exchange = long }), "exchange"},
		{"a routing key", set(func(m *Message) { m.RoutingKey = long }), "routing key"},
		{"a message id", set(func(m *Message) { m.MessageId = long }), "MessageId"},
		{"a correlation id", set(func(m *Message) { m.CorrelationId = long }), "CorrelationId"},
		{"a reply-to", set(func(m *Message) { m.ReplyTo = long }), "ReplyTo"},
		{"a type", set(func(m *Message) { m.Type = long }), "Type"},
		{"an app id", set(func(m *Message) { m.AppId = long }), "AppId"},
		{"a user id", set(func(m *Message) { m.UserId = long }), "UserId"},
		{"a content type", set(func(m *Message) { m.ContentType = long }), "ContentType"},
		{"a content encoding", set(func(m *Message) { m.ContentEncoding = long }), "ContentEncoding"},
		{"an expiration", set(func(m *Message) { m.Expiration = long }), "Expiration"},
		{"a header key", set(func(m *Message) { m.Headers = amqp.Table{"ok": 1, long: "v"} }),
			`header key "` + long[:40] + `…"`},
		{"a key of a nested table", set(func(m *Message) { m.Headers = amqp.Table{"outer": amqp.Table{long: int64(1)}} }),
			`header key "` + long[:40] + `…" inside header "outer"`},
		{"a key of a table in an array", set(func(m *Message) { m.Headers = amqp.Table{"list": []any{"a", amqp.Table{long: true}}} }),
			`header key "` + long[:40] + `…" inside header "list"[1]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			err := p.PublishFunc(ctx, tc.msg, func(err error) { t.Errorf("callback called with %v for a refused publish", err) })
			var ie *InvalidMessageError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidMessage) || errors.Is(err, ErrIndeterminate) {
				t.Fatalf("PublishFunc(256-byte %s) = %v, want an *InvalidMessageError at once", tc.name, err)
			}
			if ie.Field != tc.field || ie.Len != 256 {
				t.Errorf("InvalidMessageError field %q, length %d; want %q, 256", ie.Field, ie.Len, tc.field)
			}
			for _, want := range []string{tc.field, "256 bytes", "limit of 255 bytes"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}

	// RabbitMQ closes the channel (406) on an expiration that is not a
	// whole number of milliseconds.
	err = p.PublishFunc(t.Context(), set(func(m *Message) { m.Expiration = "soon" }), func(err error) {
		t.Errorf("callback called with %v for a refused publish", err)
	})
	if !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), "milliseconds") {
		t.Errorf("PublishFunc(expiration soon) = %v, want an *InvalidMessageError naming milliseconds", err)
	}

	close(release)
	released = true
	if err := <-blocked; err != nil {
		t.Errorf("blocker callback = %v, want nil", err)
	}
	if err := held.Wait(t.Context()); err != nil {
		t.Errorf("held publish = %v, want nil", err)
	}
	if err := p.Publish(t.Context(), msg(q, strings.Repeat("m", 255), nil)); err != nil {
		t.Errorf("Publish(255-byte message id) = %v, want nil", err)
	}
	e.waitDepth(q, 3)
	if s := p.Stats(); s.Channels != 1 || s.Published != 3 || s.InFlight != 0 {
		t.Errorf("Stats() = %+v, want 3 published on the first channel and nothing in flight", s)
	}
	if n := c.Reconnects(); n != 0 {
		t.Errorf("Reconnects() = %d, want 0: a refused publish must not cost the connection", n)
	}
}
