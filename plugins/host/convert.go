package host

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// wireRequest is a call's wire messages, allocated together: one
// allocation instead of four (request, envelope and its two times).
type wireRequest struct {
	req                   proto.HandleRequest
	env                   proto.Envelope
	firstSeen, receivedAt timestamppb.Timestamp
}

// requestToProto is the wire form of one call. timeout is how long the host
// will wait; the plugin cancels the handler after it. Every call has a
// limit, and timeout_ms 0 would tell the plugin there is none, so it is
// sent as at least 1 ms (callers do not send calls with no time left).
func requestToProto(callID uint64, r Request, timeout time.Duration) *proto.HandleRequest {
	ms := max(1, int64((timeout+time.Millisecond-1)/time.Millisecond)) // round up: never shorter than ours
	w := &wireRequest{}
	w.req.CallId = callID
	w.req.Handler = r.Handler
	w.req.Compensate = r.Compensate
	w.req.Envelope = &w.env
	w.req.Payload = r.Payload
	w.req.TimeoutMs = ms
	w.req.StepOutput = r.StepOutput
	w.envelope(r.Envelope)
	return &w.req
}

// envelope fills w.env with the wire form of e. Its text comes from AMQP,
// where a message id or a header may hold any bytes, and protobuf strings
// must be UTF-8: bytes that are not are sent as U+FFFD, rather than failing
// the batch the call travels in (and every call with it).
func (w *wireRequest) envelope(e Envelope) {
	m := &w.env
	m.MessageId = text(e.MessageID)
	m.Type = text(e.Type)
	m.CorrelationId = text(e.CorrelationID)
	m.CausationId = text(e.CausationID)
	m.Origin = text(e.Origin)
	m.Attempt = int32(e.Attempt)
	m.Queue = text(e.Queue)
	if !e.FirstSeen.IsZero() {
		w.firstSeen.Seconds, w.firstSeen.Nanos = e.FirstSeen.Unix(), int32(e.FirstSeen.Nanosecond())
		m.FirstSeen = &w.firstSeen
	}
	if !e.ReceivedAt.IsZero() {
		w.receivedAt.Seconds, w.receivedAt.Nanos = e.ReceivedAt.Unix(), int32(e.ReceivedAt.Nanosecond())
		m.ReceivedAt = &w.receivedAt
	}
	if len(e.Headers) > 0 {
		// The headers go out already encoded, as the envelope's field 8
		// (map entries are messages of key 1 and value 2), which the
		// plugin decodes as its headers map: protobuf-go encodes a map
		// field by reflection, allocating each key and value twice (once
		// to size the message, once to write it).
		m.ProtoReflect().SetUnknown(appendStringMap(nil, envelopeHeadersField, e.Headers))
	}
}

// envelopeHeadersField is Envelope.headers' field number in plugin.proto.
const envelopeHeadersField = 8

// appendStringMap appends m encoded as the map<string, string> field num, its
// keys and values made text (see text).
func appendStringMap(b []byte, num protowire.Number, m map[string]string) []byte {
	size := 0
	for k, v := range m {
		size += protowire.SizeTag(num) + protowire.SizeBytes(mapEntrySize(len(k), len(v)))
	}
	b = slices.Grow(b, size)
	for k, v := range m {
		k, v = text(k), text(v)
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mapEntrySize(len(k), len(v))))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

// mapEntrySize is the encoded size of a map entry with a key of k bytes and
// a value of v.
func mapEntrySize(k, v int) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(k) + protowire.SizeTag(2) + protowire.SizeBytes(v)
}

// resultFromProto turns a plugin's answer into Call's result: an output, a
// stop, a *CallError for a reported failure, or ErrProtocol for an answer
// without an outcome.
func resultFromProto(pluginName, handler string, m *proto.HandleResponse) (Result, error) {
	switch o := m.GetOutcome().(type) {
	case *proto.HandleResponse_Output:
		return Result{Payload: o.Output.GetPayload()}, nil
	case *proto.HandleResponse_Stop:
		return Result{Stop: true}, nil
	case *proto.HandleResponse_Failure:
		return Result{}, &CallError{Plugin: pluginName, Handler: handler, Fatal: o.Failure.GetFatal(), Msg: o.Failure.GetMessage()}
	}
	return Result{}, fmt.Errorf("plugin %q handler %q: answer without an outcome: %w", pluginName, handler, ErrProtocol)
}

func handlersFromProto(m *proto.DescribeResponse) []HandlerInfo {
	out := make([]HandlerInfo, 0, len(m.GetHandlers()))
	for _, h := range m.GetHandlers() {
		out = append(out, HandlerInfo{Name: h.GetName(), InputType: h.GetInputType(), OutputType: h.GetOutputType()})
	}
	return out
}

// text is s with bytes that are not UTF-8 replaced by U+FFFD.
func text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
