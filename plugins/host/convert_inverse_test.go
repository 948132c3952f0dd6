package host

import (
	"github.com/acemq/acemq-flow/plugins/proto"
)

// The inverses of the conversions this side uses, for the round-trip tests:
// the other side of the protocol owns the real ones.

// requestFromProto is the inverse of requestToProto.
func requestFromProto(m *proto.HandleRequest) Request {
	return Request{
		Handler:    m.GetHandler(),
		Compensate: m.GetCompensate(),
		Envelope:   envelopeFromProto(m.GetEnvelope()),
		Payload:    m.GetPayload(),
	}
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

func handlersToProto(hs []HandlerInfo) *proto.DescribeResponse {
	m := &proto.DescribeResponse{}
	for _, h := range hs {
		m.Handlers = append(m.Handlers, &proto.HandlerInfo{Name: h.Name, InputType: h.InputType, OutputType: h.OutputType})
	}
	return m
}
