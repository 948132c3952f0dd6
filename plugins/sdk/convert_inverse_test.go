package sdk

import (
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// The inverses of the conversions this side uses, for the round-trip tests:
// the other side of the protocol owns the real ones.

// requestToProto is the inverse of requestFromProto, for the tests.
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
