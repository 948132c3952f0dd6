package broker

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrClosed is returned by operations on a Conn, Publisher or Topology
	// after Close.
	ErrClosed = errors.New("broker connection closed")

	// ErrUnroutable matches *UnroutableError.
	ErrUnroutable = errors.New("unroutable")

	// ErrNacked matches *NackError.
	ErrNacked = errors.New("nacked by the broker")

	// ErrIndeterminate matches *IndeterminateError.
	ErrIndeterminate = errors.New("publish outcome unknown")

	// ErrStaleDelivery is returned by Delivery.Ack, Nack and Reject when the
	// channel that received the delivery has closed. Nothing was sent: the
	// broker has already requeued the message and will deliver it again. It
	// is not a failure of the caller.
	ErrStaleDelivery = errors.New("delivery belongs to a closed channel; the broker requeues it")

	// ErrAlreadySettled is returned when a Delivery is acknowledged, nacked or
	// rejected a second time. Nothing was sent (a second ack would close the
	// channel).
	ErrAlreadySettled = errors.New("delivery already settled")

	// ErrNotFound matches errors for a queue or exchange that does not exist
	// (AMQP reply code 404).
	ErrNotFound = errors.New("not found")

	// ErrDrift matches *DriftError.
	ErrDrift = errors.New("declared differently on the broker")

	// ErrQueueUnavailable matches errors for a durable queue that exists
	// but whose home node (the one node of a classic queue) is down or
	// cannot be reached: the broker answers 404 for it, as for a queue that
	// does not exist, though it does, and holds its messages.
	ErrQueueUnavailable = errors.New("queue unavailable: its home node is down")
)

// homeNodeDownText is RabbitMQ's 404 for a durable queue on a node that is
// down or unreachable.
var homeNodeDownText = regexp.MustCompile(`home node '([^']*)' of durable queue '.*' in vhost '.*' is down or inaccessible`)

// homeNodeDown reports whether err is the broker's 404 for a durable queue
// whose home node is down, and names the node.
func homeNodeDown(err error) (node string, ok bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return "", false
	}
	m := homeNodeDownText.FindStringSubmatch(ae.Reason)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// ReplyCode returns the AMQP reply code carried by err (404 NOT_FOUND, 406
// PRECONDITION_FAILED, 320 CONNECTION_FORCED, ...), or 0 when err carries
// none.
func ReplyCode(err error) int {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// ClosedNotFound reports whether err is the failure of a publish whose
// channel the broker closed with 404 NOT_FOUND: an exchange one of the
// publishes in flight on it named does not exist. Which one the close does
// not say in any form but text; every publish in flight fails with it, so
// the caller asks the broker about its own exchange (Topology.ExchangeExists).
func ClosedNotFound(err error) bool {
	var ie *IndeterminateError
	return errors.As(err, &ie) && ReplyCode(err) == amqp.NotFound
}

// UnroutableError reports a message the broker returned because no queue was
// bound for it (mandatory publish, basic.return). The message was not stored
// anywhere; publishing it again will fail the same way until a queue is bound.
type UnroutableError struct {
	Exchange   string
	RoutingKey string
	MessageID  string
	Code       int    // the broker's reply code, 312 NO_ROUTE
	Reason     string // the broker's reply text
}

// Error describes the failure; see the type's comment.
func (e *UnroutableError) Error() string {
	return fmt.Sprintf("message %q to %s with routing key %q reached no queue (%d %s); bind a queue for that routing key",
		e.MessageID, exchangeName(e.Exchange), e.RoutingKey, e.Code, e.Reason)
}

// Is reports whether target is ErrUnroutable.
func (e *UnroutableError) Is(target error) bool { return target == ErrUnroutable }

// NackError reports a publish the broker refused with basic.nack (an
// internal error in a queue, or a full quorum queue with overflow
// reject-publish). The message may be published again.
type NackError struct {
	Exchange   string
	RoutingKey string
	MessageID  string
}

// Error describes the failure; see the type's comment.
func (e *NackError) Error() string {
	return fmt.Sprintf("message %q to %s with routing key %q was nacked by the broker",
		e.MessageID, exchangeName(e.Exchange), e.RoutingKey)
}

// Is reports whether target is ErrNacked.
func (e *NackError) Is(target error) bool { return target == ErrNacked }

// IndeterminateError reports a publish whose outcome is unknown: the channel
// or connection closed, or the caller's context ended, before the broker
// confirmed it. The message may or may not be stored; publish it again with
// the same message id and let idempotency absorb a duplicate. Err is the
// cause: an *amqp.Error from the broker (ReplyCode 404 means the exchange
// does not exist), ErrClosed, or a context error.
type IndeterminateError struct {
	Exchange   string
	RoutingKey string
	MessageID  string
	Err        error
}

// Error describes the failure; see the type's comment.
func (e *IndeterminateError) Error() string {
	return fmt.Sprintf("message %q to %s with routing key %q: outcome unknown, publish it again: %v",
		e.MessageID, exchangeName(e.Exchange), e.RoutingKey, e.Err)
}

// Is reports whether target is ErrIndeterminate.
func (e *IndeterminateError) Is(target error) bool { return target == ErrIndeterminate }

// Unwrap returns the cause.
func (e *IndeterminateError) Unwrap() error { return e.Err }

// MissingQueuesError names every queue a check found missing, in the order
// they were asked about.
type MissingQueuesError struct {
	Queues []string
}

// Error describes the failure; see the type's comment.
func (e *MissingQueuesError) Error() string {
	q := make([]string, len(e.Queues))
	for i, n := range e.Queues {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return "queue " + q[0] + " does not exist on the broker"
	}
	return fmt.Sprintf("%d queues do not exist on the broker: %s", len(q), strings.Join(q, ", "))
}

// Is reports whether target is ErrNotFound.
func (e *MissingQueuesError) Is(target error) bool { return target == ErrNotFound }

// DriftError reports a queue or exchange that exists on the broker with
// settings other than those declared: the broker refused the declaration
// with 406 PRECONDITION_FAILED. The refusal names one setting; Settings
// names every one that differs, the type first, read through the
// management API or else from further refusals (Partial; see
// Topology.Check). AMQP cannot change an entity in place: the remedy is to
// delete it or to declare it as it is.
type DriftError struct {
	Difference        // Kind, Name and the settings that differ
	Reason     string // the broker's reply text to the declaration, verbatim
	Err        error  // the broker's *amqp.Error
}

// Error returns a sentence a person reads, for example
// `queue "orders.charge" exists on the broker as a classic queue but the
// flow declares it quorum; arguments {x-delivery-limit=20} here, {} there;
// delete the queue or declare it as it is` ("here" is the declaration,
// "there" the broker).
func (e *DriftError) Error() string { return e.Difference.String() }

// Is reports whether target is ErrDrift.
func (e *DriftError) Is(target error) bool { return target == ErrDrift }

// Unwrap returns the broker's error.
func (e *DriftError) Unwrap() error { return e.Err }

// DrainError is returned by Consumer.Run when deliveries were still in flight
// (handed to a handler and not settled) when the drain timeout passed. The
// broker redelivers them once the channel closes.
type DrainError struct {
	Queue string
	Left  int
	After time.Duration
}

// Error describes the failure; see the type's comment.
func (e *DrainError) Error() string {
	return fmt.Sprintf("queue %q: %d message(s) still in flight after %s; they will be redelivered", e.Queue, e.Left, e.After)
}

func exchangeName(x string) string {
	if x == "" {
		return "the default exchange"
	}
	return fmt.Sprintf("exchange %q", x)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
