package decide

import "time"

// Table is a message's headers, as AMQP carries them: string keys, values of
// the types an AMQP field table holds. The engine passes a delivery's
// headers here and a decision's headers to the broker without copying.
type Table map[string]any

// Delivery modes of a Message (AMQP basic properties).
const (
	Transient  uint8 = 1
	Persistent uint8 = 2
)

// Message is a message as the decisions see and write it: where it goes,
// its AMQP properties and its body. It knows nothing of a broker
// connection; the engine reads deliveries into it and publishes it.
type Message struct {
	Exchange   string
	RoutingKey string
	// NotMandatory lets a publish go unrouted without failing: a reply to
	// direct reply-to, which the broker does not route through a queue.
	NotMandatory bool

	MessageID       string
	CorrelationID   string
	ReplyTo         string
	Type            string
	ContentType     string
	ContentEncoding string
	Expiration      string
	AppID           string
	DeliveryMode    uint8
	Priority        uint8
	Timestamp       time.Time
	Headers         Table
	Body            []byte
}
