package sdk

import (
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// requestFromProto is the request a handler sees for a call on the wire.
func requestFromProto(m *proto.HandleRequest) *Request {
	return &Request{
		Handler:    m.GetHandler(),
		Compensate: m.GetCompensate(),
		Envelope:   envelopeFromProto(m.GetEnvelope()),
		Payload:    m.GetPayload(),
	}
}

// requestToProto is the inverse of requestFromProto, for tests and tools
// that call a plugin without the host.
func requestToProto(callID uint64, r *Request, timeout time.Duration) *proto.HandleRequest {
	return &proto.HandleRequest{
		CallId:     callID,
		Handler:    r.Handler,
		Compensate: r.Compensate,
		Envelope:   envelopeToProto(r.Envelope),
		Payload:    r.Payload,
		TimeoutMs:  timeout.Milliseconds(),
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

// responseToProto turns what a handler returned into its answer on the
// wire: an output, a stop (nil result, or ErrStop), or a failure whose kind
// comes from Fatal and Retryable marks (unmarked errors are retryable).
func responseToProto(callID uint64, res *Result, err error) *proto.HandleResponse {
	m := &proto.HandleResponse{CallId: callID}
	switch {
	case errors.Is(err, ErrStop), err == nil && res == nil:
		m.Outcome = &proto.HandleResponse_Stop{Stop: &proto.Stop{}}
	case err != nil:
		m.Outcome = &proto.HandleResponse_Failure{Failure: &proto.Failure{Fatal: IsFatal(err), Message: err.Error()}}
	default:
		m.Outcome = &proto.HandleResponse_Output{Output: &proto.Output{Payload: res.Payload}}
	}
	return m
}

// responseFromProto is the inverse of responseToProto: what a handler
// would have returned to produce m. A failure comes back as a plain error
// marked Fatal or Retryable.
func responseFromProto(m *proto.HandleResponse) (*Result, error) {
	switch o := m.GetOutcome().(type) {
	case *proto.HandleResponse_Output:
		return &Result{Payload: o.Output.GetPayload()}, nil
	case *proto.HandleResponse_Failure:
		err := errors.New(o.Failure.GetMessage())
		if o.Failure.GetFatal() {
			return nil, Fatal(err)
		}
		return nil, Retryable(err)
	case *proto.HandleResponse_Stop:
		return nil, nil
	}
	return nil, errors.New("response without an outcome")
}
