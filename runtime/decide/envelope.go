package decide

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// Envelope is what travels around a payload (FLOW-FORMAT §2): the AMQP
// properties and the x-acemq headers, read leniently (any integer width, or
// a numeric string) and written as the format says.
type Envelope struct {
	MessageID     string
	CorrelationID string
	CausationID   string
	Type          string
	ContentType   string
	ReplyTo       string
	Timestamp     time.Time
	Attempt       int       // 1 on first delivery
	FirstSeen     time.Time // of the first publish of the run
	Origin        string
	Route         []string // declared route, nil when none
	RoutePosition int      // index in Route of the step this message is addressed to
	Slip          *Itinerary
	SlipErr       error // the slip header was there but could not be parsed
	Replays       int
	Headers       Table // every header as received
}

// ReadEnvelope reads the envelope of a delivered message.
func ReadEnvelope(p Message) Envelope {
	e := Envelope{
		MessageID:     p.MessageID,
		CorrelationID: p.CorrelationID,
		Type:          p.Type,
		ContentType:   p.ContentType,
		ReplyTo:       p.ReplyTo,
		Timestamp:     p.Timestamp,
		Headers:       p.Headers,
		Attempt:       1,
		RoutePosition: -1,
	}
	h := p.Headers
	if n, ok := HeaderInt(h[plan.HeaderAttempt]); ok && n > 0 {
		e.Attempt = n
	}
	if n, ok := HeaderInt(h[plan.HeaderReplays]); ok && n > 0 {
		e.Replays = n
	}
	e.CausationID = HeaderText(h[plan.HeaderCausationID])
	e.Origin = HeaderText(h[plan.HeaderOrigin])
	if s := HeaderText(h[plan.HeaderFirstSeen]); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			e.FirstSeen = t
		}
	}
	if s := HeaderText(h[plan.HeaderRoute]); s != "" {
		e.Route = strings.Split(s, ",")
		if n, ok := HeaderInt(h[plan.HeaderRoutePosition]); ok {
			e.RoutePosition = n
		} else {
			e.RoutePosition = 0
		}
	}
	if v, ok := h[plan.HeaderSlip]; ok && !blankHeader(v) {
		var raw []byte
		switch s := v.(type) {
		case string:
			raw = []byte(s)
		case []byte:
			raw = s
		}
		it, err := ParseItinerary(raw)
		if err != nil {
			e.SlipErr = err
		} else {
			e.Slip = &it
		}
	}
	return e
}

// blankHeader reports a header a client set to nothing (void, or blank
// text): a client that always sets the slip header says "no itinerary" so.
func blankHeader(v any) bool {
	switch s := v.(type) {
	case nil:
		return true
	case string:
		return strings.TrimSpace(s) == ""
	case []byte:
		return len(bytes.TrimSpace(s)) == 0
	}
	return false
}

// HeaderInt reads an integer header written by any client: any integer
// width, a float holding a whole number, or a numeric string.
func HeaderInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		if n > math.MaxInt32 {
			return 0, false
		}
		return int(n), true
	case float32:
		return int(n), float32(int(n)) == n
	case float64:
		return int(n), float64(int(n)) == n
	case string:
		i, err := strconv.Atoi(strings.TrimSpace(n))
		return i, err == nil
	case []byte:
		i, err := strconv.Atoi(strings.TrimSpace(string(n)))
		return i, err == nil
	}
	return 0, false
}

// HeaderText reads a text header written by any client: a string, bytes,
// or any other value as fmt prints it; "" when absent.
func HeaderText(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// NewMessageID returns a random UUID (version 4): every new message gets one.
func NewMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// DerivedMessageID is the message id an idempotent consumer gives the output
// of input message id: a name-based UUID (version 5 layout, SHA-1) of the
// consumer id and the input's id, the same every time.
func DerivedMessageID(consumerID, inputID string) string {
	sum := sha1.Sum([]byte("acemq-flow\x00" + consumerID + "\x00" + inputID))
	var b [16]byte
	copy(b[:], sum[:16])
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

// FormatTime writes a header time as RFC 3339 UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
