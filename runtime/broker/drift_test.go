package broker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestDriftErrorSentences(t *testing.T) {
	cases := []struct {
		name   string
		kind   string
		reason string
		want   string
		set    Setting
	}{
		{
			name:   "a classic queue declared quorum names both types",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'orders.charge' in vhost '/': received the value 'quorum' of type 'longstr' but current is none",
			want:   `queue "orders.charge" exists on the broker as a classic queue but the flow declares it quorum; delete the queue or declare it as it is`,
			set:    Setting{Name: "type", Declared: "quorum", Broker: "classic"},
		},
		{
			name:   "a quorum queue declared classic names both types",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'orders.charge' in vhost '/': received 'classic' but current is 'quorum'",
			want:   `queue "orders.charge" exists on the broker as a quorum queue but the flow declares it classic; delete the queue or declare it as it is`,
			set:    Setting{Name: "type", Declared: "classic", Broker: "quorum"},
		},
		{
			name:   "a different ttl names both values",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'orders.charge' in vhost '/': received '2000' but current is '1000'",
			want:   `queue "orders.charge" exists on the broker with other settings than the flow declares: arguments {x-message-ttl=2000} here, {x-message-ttl=1000} there; delete the queue or declare it as it is`,
			set:    Setting{Name: "x-message-ttl", Arg: true, Declared: "2000", Broker: "1000"},
		},
		{
			name:   "a ttl the broker lacks is only here",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'orders.charge' in vhost '/': received the value '60000' of type 'long' but current is none",
			want:   `queue "orders.charge" exists on the broker with other settings than the flow declares: arguments {x-message-ttl=60000} here, {} there; delete the queue or declare it as it is`,
			set:    Setting{Name: "x-message-ttl", Arg: true, Declared: "60000"},
		},
		{
			name:   "a ttl the flow lacks is only there",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'orders.charge' in vhost '/': received none but current is the value '1000' of type 'long'",
			want:   `queue "orders.charge" exists on the broker with other settings than the flow declares: arguments {} here, {x-message-ttl=1000} there; delete the queue or declare it as it is`,
			set:    Setting{Name: "x-message-ttl", Arg: true, Broker: "1000"},
		},
		{
			name:   "durability differs",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'orders.charge' in vhost '/': received 'false' but current is 'true'",
			want:   `queue "orders.charge" exists on the broker with other settings than the flow declares: durable false here, true there; delete the queue or declare it as it is`,
			set:    Setting{Name: "durable", Declared: "false", Broker: "true"},
		},
		{
			name:   "an exchange of another type",
			kind:   "exchange",
			reason: "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'orders-events' in vhost '/': received 'topic' but current is 'direct'",
			want:   `exchange "orders-events" exists on the broker as a direct exchange but the flow declares it topic; delete the exchange or declare it as it is`,
			set:    Setting{Name: "type", Declared: "topic", Broker: "direct"},
		},
		{
			name:   "an unparsed reply is quoted",
			kind:   "queue",
			reason: "PRECONDITION_FAILED - something new",
			want:   `queue "orders.charge" exists on the broker with other settings than the flow declares (PRECONDITION_FAILED - something new); delete the queue or declare it as it is`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "orders.charge"
			if tc.kind == "exchange" {
				name = "orders-events"
			}
			err := declareError(tc.kind, name, &amqp.Error{Code: amqp.PreconditionFailed, Reason: tc.reason, Server: true})
			if got := err.Error(); got != tc.want {
				t.Errorf("declareError(%q):\n got %s\nwant %s", tc.reason, got, tc.want)
			}
			var de *DriftError
			if !errors.As(err, &de) || !errors.Is(err, ErrDrift) || ReplyCode(err) != amqp.PreconditionFailed {
				t.Fatalf("declareError(%q) = %T, want a *DriftError with code 406", tc.reason, err)
			}
			var want []Setting
			if tc.set.Name != "" {
				want = []Setting{tc.set}
			}
			if !slices.Equal(de.Settings, want) || !de.Partial || de.Reason != tc.reason {
				t.Errorf("declareError(%q): Settings %+v, Partial %v, Reason %q; want %+v, true and the reply", tc.reason, de.Settings, de.Partial, de.Reason, want)
			}
		})
	}
}

func TestDifferenceSentences(t *testing.T) {
	cases := []struct {
		name string
		d    Difference
		want string
	}{
		{
			name: "a missing queue",
			d:    Difference{Kind: "queue", Name: "orders.nwe", Missing: true},
			want: `queue "orders.nwe" does not exist on the broker; create it on the broker, or let the flow declare it`,
		},
		{
			name: "a missing binding",
			d:    Difference{Kind: "binding", Name: "orders.charge", Binding: Binding{Queue: "orders.charge", Exchange: "orders", RoutingKey: "charge"}, Missing: true},
			want: `queue "orders.charge" is not bound to exchange "orders" with routing key "charge"; bind it on the broker, or let the flow declare the binding`,
		},
		{
			name: "the type first, then flags, then every argument in one pair of braces each",
			d: Difference{Kind: "queue", Name: "audit.log", Settings: []Setting{
				{Name: "type", Declared: "quorum", Broker: "classic"},
				{Name: "durable", Declared: "true", Broker: "false"},
				{Name: "x-dead-letter-exchange", Arg: true, Declared: "acemq.dlx"},
				{Name: "x-max-length", Arg: true, Broker: "5"},
				{Name: "x-message-ttl", Arg: true, Declared: "60000", Broker: "1000"},
			}},
			want: `queue "audit.log" exists on the broker as a classic queue but the flow declares it quorum; durable true here, false there; arguments {x-dead-letter-exchange=acemq.dlx, x-message-ttl=60000} here, {x-max-length=5, x-message-ttl=1000} there; delete the queue or declare it as it is`,
		},
		{
			name: "a refusal left unread is quoted after what was read",
			d: Difference{Kind: "queue", Name: "q", Refusal: "PRECONDITION_FAILED - odd", Settings: []Setting{
				{Name: "x-message-ttl", Arg: true, Declared: "2"},
			}},
			want: `queue "q" exists on the broker with other settings than the flow declares: arguments {x-message-ttl=2} here, {} there; the broker also reports PRECONDITION_FAILED - odd; delete the queue or declare it as it is`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.String(); got != tc.want {
				t.Errorf("Difference.String():\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestArgumentsCompareByValueNotGoType(t *testing.T) {
	declared, err := Args(map[string]any{"x-message-ttl": 60000, "x-max-length": float64(5), "x-queue-type": "quorum", "x-ratio": 0.5, "x-s": "1000"})
	if err != nil {
		t.Fatal(err)
	}
	broker := map[string]any{"x-message-ttl": json.Number("60000"), "x-max-length": json.Number("5"), "x-queue-type": "classic", "x-ratio": json.Number("0.5"), "x-s": json.Number("1000")}
	got := argSettings(declared, broker, "x-queue-type")
	want := []Setting{{Name: "x-s", Arg: true, Declared: `"1000"`, Broker: "1000"}}
	if !slices.Equal(got, want) {
		t.Errorf("argSettings = %+v, want %+v (a string is not the number it spells; x-queue-type is compared as the type)", got, want)
	}
}

func TestDeclareErrorDecidesOnTheReplyCode(t *testing.T) {
	err := declareError("queue", "q", &amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - inequivalent arg 'x' for queue 'q' in vhost '/': received 'a' but current is 'b'"})
	if errors.Is(err, ErrDrift) {
		t.Errorf("declareError(403) = %v, want no drift", err)
	}
}

func TestArgsTypesNumbersAsInt64(t *testing.T) {
	got, err := Args(map[string]any{
		"x-message-ttl":    60000,
		"x-delivery-limit": int32(20),
		"x-max-length":     float64(1000),
		"x-single-active":  true,
		"x-queue-type":     "quorum",
		"x-ratio":          0.5,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"x-message-ttl": int64(60000), "x-delivery-limit": int64(20), "x-max-length": int64(1000),
		"x-single-active": true, "x-queue-type": "quorum", "x-ratio": 0.5,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Args: %s = %#v (%T), want %#v (%T)", k, got[k], got[k], v, v)
		}
	}
	if _, err := Args(map[string]any{"x-bad": struct{}{}}); err == nil {
		t.Errorf("Args(struct{}) = nil error, want one naming x-bad")
	}
}

func TestBackoffStaysWithinBounds(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 10 * time.Second
	for n := range 40 {
		// lo doubled n times, capped at hi; the delay is its upper half.
		c := hi
		if n < 20 {
			c = min(lo<<n, hi)
		}
		d := backoff(n, lo, hi)
		if d < c/2 || d > c {
			t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, c/2, c)
		}
	}
}

// connection.blocked holds publishes until connection.unblocked; a publish
// waiting meanwhile gives up with its context, naming the alarm.
func TestBlockedConnectionHoldsPublishesUntilUnblocked(t *testing.T) {
	c := &Conn{closing: make(chan struct{}), opts: ConnOptions{Name: "test"}}
	open := make(chan struct{})
	close(open)
	c.unblocked.Store(&open)
	if c.Blocked() || c.waitUnblocked(t.Context()) != nil {
		t.Fatal("a new connection is blocked")
	}
	c.setBlocked(true, "low on memory")
	c.setBlocked(true, "low on memory") // repeated: still one blocked period
	if !c.Blocked() {
		t.Fatal("Blocked() = false after connection.blocked")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := c.waitUnblocked(ctx); err == nil || !strings.Contains(err.Error(), "blocked by the broker") {
		t.Fatalf("waitUnblocked while blocked = %v, want the alarm named", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- c.waitUnblocked(t.Context()) }()
	c.setBlocked(false, "")
	if err := <-waited; err != nil || c.Blocked() {
		t.Fatalf("after connection.unblocked: waitUnblocked = %v, Blocked() = %v", err, c.Blocked())
	}
}
