package host

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// requestToProto is the wire form of one call. timeout is how long the host
// will wait (0 = no limit); the plugin cancels the handler after it.
func requestToProto(callID uint64, r Request, timeout time.Duration) *proto.HandleRequest {
	var ms int64
	if timeout > 0 {
		ms = int64((timeout + time.Millisecond - 1) / time.Millisecond) // round up: never shorter than ours
	}
	return &proto.HandleRequest{
		CallId:     callID,
		Handler:    r.Handler,
		Compensate: r.Compensate,
		Envelope:   envelopeToProto(r.Envelope),
		Payload:    r.Payload,
		TimeoutMs:  ms,
	}
}

// requestFromProto is the inverse of requestToProto.
func requestFromProto(m *proto.HandleRequest) Request {
	return Request{
		Handler:    m.GetHandler(),
		Compensate: m.GetCompensate(),
		Envelope:   envelopeFromProto(m.GetEnvelope()),
		Payload:    m.GetPayload(),
	}
}

func envelopeToProto(e Envelope) *proto.Envelope {
	m := &proto.Envelope{
		MessageId:     e.MessageID,
		Type:          e.Type,
		CorrelationId: e.CorrelationID,
		CausationId:   e.CausationID,
		Origin:        e.Origin,
		Attempt:       int32(e.Attempt),
		Headers:       e.Headers,
	}
	if !e.FirstSeen.IsZero() {
		m.FirstSeen = timestamppb.New(e.FirstSeen)
	}
	return m
}

func envelopeFromProto(m *proto.Envelope) Envelope {
	e := Envelope{
		MessageID:     m.GetMessageId(),
		Type:          m.GetType(),
		CorrelationID: m.GetCorrelationId(),
		CausationID:   m.GetCausationId(),
		Origin:        m.GetOrigin(),
		Attempt:       int(m.GetAttempt()),
		Headers:       m.GetHeaders(),
	}
	if ts := m.GetFirstSeen(); ts != nil {
		e.FirstSeen = ts.AsTime()
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	return e
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

// resultToProto is the inverse of resultFromProto for results and
// *CallError failures.
func resultToProto(callID uint64, r Result, err error) *proto.HandleResponse {
	m := &proto.HandleResponse{CallId: callID}
	if ce, ok := err.(*CallError); ok {
		m.Outcome = &proto.HandleResponse_Failure{Failure: &proto.Failure{Fatal: ce.Fatal, Message: ce.Msg}}
		return m
	}
	if r.Stop {
		m.Outcome = &proto.HandleResponse_Stop{Stop: &proto.Stop{}}
		return m
	}
	m.Outcome = &proto.HandleResponse_Output{Output: &proto.Output{Payload: r.Payload}}
	return m
}

func handlersFromProto(m *proto.DescribeResponse) []HandlerInfo {
	out := make([]HandlerInfo, 0, len(m.GetHandlers()))
	for _, h := range m.GetHandlers() {
		out = append(out, HandlerInfo{Name: h.GetName(), InputType: h.GetInputType(), OutputType: h.GetOutputType()})
	}
	return out
}

func handlersToProto(hs []HandlerInfo) *proto.DescribeResponse {
	m := &proto.DescribeResponse{}
	for _, h := range hs {
		m.Handlers = append(m.Handlers, &proto.HandlerInfo{Name: h.Name, InputType: h.InputType, OutputType: h.OutputType})
	}
	return m
}
