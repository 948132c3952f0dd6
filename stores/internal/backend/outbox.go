package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// EncodeProperties returns the JSON the properties column holds.
func EncodeProperties(p stores.Properties) ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode outbox properties: %w", err)
	}
	return b, nil
}

// DecodeProperties reads the properties column. Numbers in headers come back
// as json.Number so that integers keep their exact value; an empty column is
// no properties.
func DecodeProperties(b []byte) (stores.Properties, error) {
	var p stores.Properties
	if len(bytes.TrimSpace(b)) == 0 {
		return p, nil
	}
	if p, ok := decodeFlat(b); ok {
		return p, checkDecoded(p)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&p); err != nil {
		return p, fmt.Errorf("decode outbox properties %.80q: %w", b, err)
	}
	return p, checkDecoded(p)
}

// checkDecoded applies CheckProperties to a column another program may
// have written: a value RabbitMQ refuses makes the row unreadable (failed
// with the reason, then stuck) rather than a publish that closes the
// relay's channel and every publish in flight on it, at every lease.
func checkDecoded(p stores.Properties) error {
	if err := CheckProperties("", p); err != nil {
		return fmt.Errorf("outbox properties: %w", err)
	}
	return nil
}

// CheckRecord rejects a record the relay could not publish, before it is
// written.
func CheckRecord(r stores.OutboxRecord) error {
	if r.RoutingKey == "" && r.Exchange == "" {
		return fmt.Errorf("outbox record has neither exchange nor routing key")
	}
	if len(r.RoutingKey) > 255 || len(r.Exchange) > 255 {
		return fmt.Errorf("outbox record for exchange %.40q: exchange and routing key are limited to 255 bytes", r.Exchange)
	}
	return CheckProperties(r.ContentType, r.Properties)
}

// CheckProperties rejects properties AMQP cannot carry, or RabbitMQ would
// refuse by closing the relay's channel: a short string over 255 bytes, a
// header key over 255 bytes at any depth, an expiration that is not a
// whole number of milliseconds.
func CheckProperties(contentType string, p stores.Properties) error {
	for _, f := range [...]struct{ name, v string }{
		{"content type", contentType}, {"message_id", p.MessageID}, {"correlation_id", p.CorrelationID},
		{"reply_to", p.ReplyTo}, {"type", p.Type}, {"app_id", p.AppID}, {"user_id", p.UserID},
		{"content_encoding", p.ContentEncoding}, {"expiration", p.Expiration},
	} {
		if len(f.v) > 255 {
			return fmt.Errorf("outbox record %s is %d bytes long; AMQP carries at most 255", f.name, len(f.v))
		}
	}
	for i := range len(p.Expiration) {
		if c := p.Expiration[i]; c < '0' || c > '9' {
			return fmt.Errorf("outbox record expiration %q is not a whole number of milliseconds; write it as \"60000\"", p.Expiration)
		}
	}
	if key := longHeaderKey(p.Headers); key != "" {
		return fmt.Errorf("outbox record header key %.40q… is %d bytes long; AMQP carries at most 255", key, len(key))
	}
	return nil
}

// longHeaderKey returns a header key over 255 bytes, at any depth, or "".
func longHeaderKey(v any) string {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if len(k) > 255 {
				return k
			}
			if key := longHeaderKey(x); key != "" {
				return key
			}
		}
	case []any:
		for _, x := range t {
			if key := longHeaderKey(x); key != "" {
				return key
			}
		}
	}
	return ""
}

// DeliverAt is a record's deliver_at as the stores keep it: zero stays
// zero, any other time is rounded up to the millisecond (the stores keep
// milliseconds, and rounding down would make a message early), in UTC.
func DeliverAt(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	r := t.Truncate(time.Millisecond)
	if r.Before(t) {
		r = r.Add(time.Millisecond)
	}
	return r.UTC()
}

// CheckClaim refuses a relay's claim without an owner, rows or lease.
func CheckClaim(owner string, n int, lease time.Duration) error {
	if owner == "" || n <= 0 || lease <= 0 {
		return fmt.Errorf("outbox claim batch: owner must be set and n %d and lease %s positive", n, lease)
	}
	return nil
}
