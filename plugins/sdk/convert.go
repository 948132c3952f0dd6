package sdk

import (
	"errors"
	"strings"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// requestFromProto is the request a handler sees for a call on the wire.
func requestFromProto(m *proto.HandleRequest) *Request {
	return &Request{
		Handler:    m.GetHandler(),
		Compensate: m.GetCompensate(),
		Envelope:   envelopeFromProto(m.GetEnvelope()),
		Payload:    m.GetPayload(),
		StepOutput: m.GetStepOutput(),
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
		Queue:         m.GetQueue(),
	}
	if ts := m.GetFirstSeen(); ts != nil {
		e.FirstSeen = ts.AsTime()
	}
	if ts := m.GetReceivedAt(); ts != nil {
		e.ReceivedAt = ts.AsTime()
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	return e
}

// responseToProto turns what a handler returned into its answer on the
// wire: an output, a stop (nil result, or ErrStop), or a failure whose kind
// comes from Fatal and Retryable marks (unmarked errors are retryable).
func responseToProto(callID uint64, res *Result, err error) *proto.HandleResponse {
	m := &proto.HandleResponse{CallId: callID}
	switch {
	case errors.Is(err, ErrStop), err == nil && res == nil:
		m.Outcome = &proto.HandleResponse_Stop{Stop: &proto.Stop{}}
	case err != nil:
		// A protobuf string must be UTF-8: an error quoting bytes that are
		// not would fail the whole answer batch.
		m.Outcome = &proto.HandleResponse_Failure{Failure: &proto.Failure{Fatal: IsFatal(err), Message: strings.ToValidUTF8(err.Error(), "\uFFFD")}}
	default:
		m.Outcome = &proto.HandleResponse_Output{Output: &proto.Output{Payload: res.Payload}}
	}
	return m
}
