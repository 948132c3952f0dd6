// Package codec is the Avro codec beneath the engine (FLOW-FORMAT §6):
// the Confluent wire framing, decoding a message by its writer's schema id
// with schema resolution to the reader's type, encoding a handler's JSON
// output by its type's schema, and the cached registry lookups both need.
// Handlers always see JSON; the JSON of an Avro payload is the mapping of
// spec.AvroToJSON and spec.AvroFromJSON.
//
// It imports spec (the types) and stores (the registry's types and its
// interface, narrowed here to Registry); never the broker layer or the
// engine. The engine's codec wrapper calls, in order:
//
//  1. New, then Register at start with the flows' types (registering
//     them, or with Options.ReadOnly only looking them up);
//  2. per delivery, IsAvro and Decode;
//  3. per output, Encode for an Avro output type.
package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"mime"
	"strconv"
)

// The wire names of Avro payloads (FLOW-FORMAT §6).
const (
	// ContentType is the content_type of an Avro message.
	ContentType = "application/vnd.apache.avro+binary"
	// HeaderSchemaID is the header carrying the writer's schema id, a
	// copy of the frame's for tools that read headers only; the frame is
	// what a reader decodes by.
	HeaderSchemaID = "x-acemq-schema-id"
	// MagicByte starts every Confluent-framed body.
	MagicByte byte = 0x00
	// FrameSize is the length of the prefix: the magic byte and the
	// 4-byte big-endian schema id.
	FrameSize = 5
)

// FrameError says why a body is not a Confluent-framed Avro message. A
// message with one is fatal: no retry frames it.
type FrameError struct {
	Len    int // the body's length
	Reason string
}

// Error says what is wrong with the body.
func (e *FrameError) Error() string {
	return fmt.Sprintf("the %d-byte body is not Avro in the Confluent framing: %s", e.Len, e.Reason)
}

// ReadFrame splits a Confluent-framed body into the writer's schema id and
// the Avro binary after it. The payload shares body's memory. An id is
// from 1 to 2^31-1, as the registry gives them.
func ReadFrame(body []byte) (id int, payload []byte, err error) {
	if len(body) < FrameSize {
		return 0, nil, &FrameError{Len: len(body), Reason: fmt.Sprintf("it is shorter than the %d-byte prefix (byte 0x00 and a 4-byte schema id)", FrameSize)}
	}
	if body[0] != MagicByte {
		return 0, nil, &FrameError{Len: len(body), Reason: fmt.Sprintf("it starts with byte 0x%02x, not the magic byte 0x00", body[0])}
	}
	u := binary.BigEndian.Uint32(body[1:FrameSize])
	if u == 0 || u > math.MaxInt32 {
		return 0, nil, &FrameError{Len: len(body), Reason: fmt.Sprintf("its schema id %d is out of range (1 to %d)", u, math.MaxInt32)}
	}
	return int(u), body[FrameSize:], nil
}

// AppendFrame appends the prefix for schema id and then payload (Avro
// binary) to dst. id must be from 1 to 2^31-1.
func AppendFrame(dst []byte, id int, payload []byte) []byte {
	dst = append(dst, MagicByte)
	dst = binary.BigEndian.AppendUint32(dst, uint32(id))
	return append(dst, payload...)
}

// IsAvro reports whether a message is Avro: its content_type says so
// (parameters ignored), or, with no content_type, its body starts with
// the magic byte (which no JSON text does).
func IsAvro(contentType string, body []byte) bool {
	if contentType == "" {
		return len(body) >= FrameSize && body[0] == MagicByte
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == ContentType
}

// HeaderValue is the value of HeaderSchemaID for id, as a string so that
// every AMQP client reads it alike.
func HeaderValue(id int) string { return strconv.Itoa(id) }
