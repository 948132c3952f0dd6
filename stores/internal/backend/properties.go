package backend

import (
	"unicode/utf8"

	"github.com/acemq/acemq-flow/stores"
)

// decodeFlat reads the common form of the properties column without
// reflection: one object of the known string and number fields, without
// headers, escapes or nulls, as EncodeProperties and PostgreSQL's jsonb
// output write it for most records. ok is false for anything else (headers,
// an escape, a key spelt differently, a value of another type, a number out
// of range, trailing data), which DecodeProperties leaves to the JSON
// decoder, so the result never differs from the decoder's. The relay reads
// this column for every record it publishes; the decoder cost about a
// microsecond and a kilobyte of garbage each.
func decodeFlat(b []byte) (p stores.Properties, ok bool) {
	r := flatReader{b: b}
	if !r.byte('{') {
		return p, false
	}
	if r.byte('}') {
		return p, r.end()
	}
	for {
		key, ok := r.str()
		if !ok || !r.byte(':') {
			return p, false
		}
		switch string(key) {
		case "message_id":
			p.MessageID, ok = r.text()
		case "correlation_id":
			p.CorrelationID, ok = r.text()
		case "reply_to":
			p.ReplyTo, ok = r.text()
		case "type":
			p.Type, ok = r.text()
		case "app_id":
			p.AppID, ok = r.text()
		case "user_id":
			p.UserID, ok = r.text()
		case "content_encoding":
			p.ContentEncoding, ok = r.text()
		case "expiration":
			p.Expiration, ok = r.text()
		case "priority":
			p.Priority, ok = r.small()
		case "delivery_mode":
			p.DeliveryMode, ok = r.small()
		case "timestamp":
			p.Timestamp, ok = r.number(18)
		default:
			return p, false
		}
		if !ok {
			return p, false
		}
		if r.byte('}') {
			return p, r.end()
		}
		if !r.byte(',') {
			return p, false
		}
	}
}

type flatReader struct {
	b []byte
	i int
}

func (r *flatReader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// byte consumes c, after any white space, if it comes next.
func (r *flatReader) byte(c byte) bool {
	r.space()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

func (r *flatReader) end() bool {
	r.space()
	return r.i == len(r.b)
}

// str reads a string without escapes or control characters, in valid
// UTF-8, and returns it without copying.
func (r *flatReader) str() ([]byte, bool) {
	if !r.byte('"') {
		return nil, false
	}
	start, ascii := r.i, true
	for ; r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (r *flatReader) text() (string, bool) {
	s, ok := r.str()
	return string(s), ok
}

// number reads a non-negative integer of at most digits digits.
func (r *flatReader) number(digits int) (int64, bool) {
	r.space()
	start := r.i
	var n int64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		n = n*10 + int64(r.b[r.i]-'0')
		r.i++
	}
	d := r.i - start
	if d == 0 || d > digits || (d > 1 && r.b[start] == '0') {
		return 0, false
	}
	// A fraction or an exponent is the decoder's to judge.
	if r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		return 0, false
	}
	return n, true
}

func (r *flatReader) small() (uint8, bool) {
	n, ok := r.number(3)
	if !ok || n > 255 {
		return 0, false
	}
	return uint8(n), true
}
