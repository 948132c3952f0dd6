package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/broker"
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
	_, err := Send(ctx, q.URL, broker.Message{RoutingKey: target, Publishing: amqp.Publishing{MessageId: "req-1", CorrelationId: "req-1", Body: []byte(`{}`)}}, time.Minute)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "message req-1 was sent") {
		t.Fatalf("Send interrupted during its wait = %v, want context.Canceled naming message req-1 as sent", err)
	}
}
