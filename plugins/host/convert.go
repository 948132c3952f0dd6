package host

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// requestToProto is the wire form of one call. timeout is how long the host
// will wait; the plugin cancels the handler after it. Every call has a
// limit, and timeout_ms 0 would tell the plugin there is none, so it is
// sent as at least 1 ms (callers do not send calls with no time left).
func requestToProto(callID uint64, r Request, timeout time.Duration) *proto.HandleRequest {
	ms := max(1, int64((timeout+time.Millisecond-1)/time.Millisecond)) // round up: never shorter than ours
	return &proto.HandleRequest{
		CallId:     callID,
		Handler:    r.Handler,
		Compensate: r.Compensate,
		Envelope:   envelopeToProto(r.Envelope),
		Payload:    r.Payload,
		TimeoutMs:  ms,
		StepOutput: r.StepOutput,
	}
}

// envelopeToProto is the wire form of an envelope. Its text comes from
// AMQP, where a message id or a header may hold any bytes, and protobuf
// strings must be UTF-8: bytes that are not are sent as U+FFFD, rather
// than failing the batch the call travels in (and every call with it).
func envelopeToProto(e Envelope) *proto.Envelope {
	m := &proto.Envelope{
		MessageId:     text(e.MessageID),
		Type:          text(e.Type),
		CorrelationId: text(e.CorrelationID),
		CausationId:   text(e.CausationID),
		Origin:        text(e.Origin),
		Attempt:       int32(e.Attempt),
		Headers:       textMap(e.Headers),
		Queue:         text(e.Queue),
	}
	if !e.FirstSeen.IsZero() {
		m.FirstSeen = timestamppb.New(e.FirstSeen)
	}
	if !e.ReceivedAt.IsZero() {
		m.ReceivedAt = timestamppb.New(e.ReceivedAt)
	}
	return m
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

// textMap is m with its keys and values made text; m itself when they are.
func textMap(m map[string]string) map[string]string {
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			out := make(map[string]string, len(m))
			for k, v := range m {
				out[text(k)] = text(v)
			}
			return out
		}
	}
	return m
}
