package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestAQueueOnANodeThatIsDownIsUnavailableNotMissing: the broker answers
// 404 for a durable queue whose home node is down, as for a queue that
// does not exist; the error says it exists, names the node, and matches
// ErrQueueUnavailable, never ErrNotFound.
func TestAQueueOnANodeThatIsDownIsUnavailableNotMissing(t *testing.T) {
	down := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - home node 'acemq2@localhost' of durable queue 'p.a.dlq' in vhost 'v' is down or inaccessible"}
	missing := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue 'p.a.dlq' in vhost 'v'"}
	if node, ok := homeNodeDown(fmt.Errorf("inspect queue: %w", down)); !ok || node != "acemq2@localhost" {
		t.Errorf("homeNodeDown = %q, %v; want acemq2@localhost", node, ok)
	}
	if _, ok := homeNodeDown(missing); ok {
		t.Error("homeNodeDown says a missing queue's 404 is a node down")
	}
	err := notFound(down)
	if !errors.Is(err, ErrQueueUnavailable) || errors.Is(err, ErrNotFound) {
		t.Errorf("notFound(node down) = %v: unavailable %v, not found %v; want unavailable only", err, errors.Is(err, ErrQueueUnavailable), errors.Is(err, ErrNotFound))
	}
	if want := "the queue exists, but its home node acemq2@localhost is down"; !strings.Contains(err.Error(), want) {
		t.Errorf("notFound(node down) = %q, want it to say %q", err, want)
	}
	if err := notFound(missing); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrQueueUnavailable) {
		t.Errorf("notFound(missing) = %v, want it to match ErrNotFound only", err)
	}
	var tp Topology
	if err := tp.Unconsumed("p.a.dlq", missing); err != missing {
		t.Errorf("Unconsumed(missing) = %v, want the error itself", err)
	}
}
