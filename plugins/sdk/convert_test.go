package sdk

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// The conversions are checked against the wire messages of
// plugins/proto/plugin.proto, which is the contract; the host's
// TestInProcessRoundTrip checks them together with the host's.

// wire sends m through the protobuf encoding and decodes it into out, as the
// other side receives it.
func wire(t *testing.T, m, out gproto.Message) {
	t.Helper()
	b, err := gproto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := gproto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func TestRequestFromProto(t *testing.T) {
	firstSeen := time.Date(2026, 9, 9, 14, 3, 11, 123456789, time.UTC)
	received := firstSeen.Add(1500 * time.Millisecond)
	tests := []struct {
		name string
		m    *proto.HandleRequest
		want Request
	}{
		{name: "an empty request", m: &proto.HandleRequest{}, want: Request{}},
		{name: "a full envelope", m: &proto.HandleRequest{
			CallId: 9, Handler: "reserve", Payload: []byte(`{"a":1}`), TimeoutMs: 1000,
			Envelope: &proto.Envelope{
				MessageId: "m-2", Type: "Order", CorrelationId: "c-1", CausationId: "m-1", Origin: "shop",
				Attempt: 4, FirstSeen: timestamppb.New(firstSeen), Headers: map[string]string{"tenant": "acme"},
				Queue: "fulfilment.reserve", ReceivedAt: timestamppb.New(received),
			},
		}, want: Request{
			Handler: "reserve", Payload: []byte(`{"a":1}`),
			Envelope: Envelope{
				MessageID: "m-2", Type: "Order", CorrelationID: "c-1", CausationID: "m-1", Origin: "shop",
				Attempt: 4, FirstSeen: firstSeen, Headers: map[string]string{"tenant": "acme"},
				Queue: "fulfilment.reserve", ReceivedAt: received,
			},
		}},
		{name: "a compensation with what its step returned", m: &proto.HandleRequest{
			Handler: "refund", Compensate: true, Payload: []byte(`{"order":"o-1"}`), StepOutput: []byte(`{"payment":"p-1"}`),
			Envelope: &proto.Envelope{MessageId: "m-3", Queue: "place-order.take-payment.compensate"},
		}, want: Request{
			Handler: "refund", Compensate: true, Payload: []byte(`{"order":"o-1"}`), StepOutput: []byte(`{"payment":"p-1"}`),
			Envelope: Envelope{MessageID: "m-3", Queue: "place-order.take-payment.compensate"},
		}},
		{name: "a binary payload", m: &proto.HandleRequest{Handler: "h", Payload: []byte{0, 255}},
			want: Request{Handler: "h", Payload: []byte{0, 255}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m proto.HandleRequest
			wire(t, tc.m, &m)
			got := requestFromProto(&m)
			ea, eb := got.Envelope, tc.want.Envelope
			if got.Handler != tc.want.Handler || got.Compensate != tc.want.Compensate || !bytes.Equal(got.Payload, tc.want.Payload) ||
				!bytes.Equal(got.StepOutput, tc.want.StepOutput) || ea.Queue != eb.Queue || !ea.ReceivedAt.Equal(eb.ReceivedAt) ||
				ea.MessageID != eb.MessageID || ea.Type != eb.Type || ea.CorrelationID != eb.CorrelationID ||
				ea.CausationID != eb.CausationID || ea.Origin != eb.Origin || ea.Attempt != eb.Attempt ||
				!ea.FirstSeen.Equal(eb.FirstSeen) || !maps.Equal(ea.Headers, eb.Headers) {
				t.Fatalf("requestFromProto(%v) = %+v, want %+v", tc.m, *got, tc.want)
			}
		})
	}
}

func TestResponseToProto(t *testing.T) {
	tests := []struct {
		name      string
		res       *Result
		err       error
		wantOut   []byte // an output with this payload
		wantStop  bool
		wantFail  bool
		wantFatal bool
	}{
		{name: "a result is an output", res: &Result{Payload: []byte("x")}, wantOut: []byte("x")},
		{name: "a nil result is a stop", res: nil, wantStop: true},
		{name: "ErrStop is a stop", err: ErrStop, wantStop: true},
		{name: "a wrapped ErrStop is a stop", err: errors.Join(errors.New("enough"), ErrStop), wantStop: true},
		{name: "a plain error is retryable", err: errors.New("down"), wantFail: true},
		{name: "a Fatal error is fatal", err: Fatal(errors.New("bad")), wantFail: true, wantFatal: true},
		{name: "Retryable around Fatal is retryable", err: Retryable(Fatal(errors.New("bad"))), wantFail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m proto.HandleResponse
			wire(t, responseToProto(5, tc.res, tc.err), &m)
			if m.GetCallId() != 5 {
				t.Fatalf("call id %d, want 5", m.GetCallId())
			}
			switch o := m.GetOutcome().(type) {
			case *proto.HandleResponse_Output:
				if tc.wantOut == nil || !bytes.Equal(o.Output.GetPayload(), tc.wantOut) {
					t.Fatalf("responseToProto(%v, %v) = output %q", tc.res, tc.err, o.Output.GetPayload())
				}
			case *proto.HandleResponse_Stop:
				if !tc.wantStop {
					t.Fatalf("responseToProto(%v, %v) = stop", tc.res, tc.err)
				}
			case *proto.HandleResponse_Failure:
				if !tc.wantFail || o.Failure.GetFatal() != tc.wantFatal || o.Failure.GetMessage() != tc.err.Error() {
					t.Fatalf("responseToProto(%v, %v) = failure %v; want fatal %v with the error's text", tc.res, tc.err, o.Failure, tc.wantFatal)
				}
			default:
				t.Fatalf("responseToProto(%v, %v) has no outcome", tc.res, tc.err)
			}
		})
	}
}
