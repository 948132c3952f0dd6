package sdk

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/acemq/acemq-flow/plugins/proto"
)

func TestRequestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		req  Request
	}{
		{name: "an empty request", req: Request{}},
		{name: "a full envelope", req: Request{
			Handler: "reserve", Compensate: true, Payload: []byte(`{"a":1}`),
			Envelope: Envelope{
				MessageID: "m-2", Type: "Order", CorrelationID: "c-1", CausationID: "m-1", Origin: "shop",
				Attempt: 4, FirstSeen: time.Date(2026, 9, 9, 14, 3, 11, 123456789, time.UTC),
				Headers: map[string]string{"tenant": "acme"},
			},
		}},
		{name: "a binary payload", req: Request{Handler: "h", Payload: []byte{0, 255}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := gproto.Marshal(requestToProto(9, &tc.req, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var m proto.HandleRequest
			if err := gproto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			got := requestFromProto(&m)
			ea, eb := got.Envelope, tc.req.Envelope
			if got.Handler != tc.req.Handler || got.Compensate != tc.req.Compensate || !bytes.Equal(got.Payload, tc.req.Payload) ||
				ea.MessageID != eb.MessageID || ea.Type != eb.Type || ea.CorrelationID != eb.CorrelationID ||
				ea.CausationID != eb.CausationID || ea.Origin != eb.Origin || ea.Attempt != eb.Attempt ||
				!ea.FirstSeen.Equal(eb.FirstSeen) || !maps.Equal(ea.Headers, eb.Headers) {
				t.Fatalf("requestFromProto(requestToProto(%+v)) = %+v", tc.req, *got)
			}
			if m.GetCallId() != 9 || m.GetTimeoutMs() != 1000 {
				t.Fatalf("call id %d, timeout %dms; want 9 and 1000", m.GetCallId(), m.GetTimeoutMs())
			}
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		res       *Result
		err       error
		wantRes   *Result
		wantErr   bool
		wantFatal bool
	}{
		{name: "a result is an output", res: &Result{Payload: []byte("x")}, wantRes: &Result{Payload: []byte("x")}},
		{name: "a nil result is a stop", res: nil},
		{name: "ErrStop is a stop", err: ErrStop},
		{name: "a wrapped ErrStop is a stop", err: errors.Join(errors.New("enough"), ErrStop)},
		{name: "a plain error is retryable", err: errors.New("down"), wantErr: true},
		{name: "a Fatal error is fatal", err: Fatal(errors.New("bad")), wantErr: true, wantFatal: true},
		{name: "Retryable around Fatal is retryable", err: Retryable(Fatal(errors.New("bad"))), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := gproto.Marshal(responseToProto(5, tc.res, tc.err))
			if err != nil {
				t.Fatal(err)
			}
			var m proto.HandleResponse
			if err := gproto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if m.GetCallId() != 5 {
				t.Fatalf("call id %d, want 5", m.GetCallId())
			}
			got, gotErr := responseFromProto(&m)
			if tc.wantErr {
				if gotErr == nil || IsFatal(gotErr) != tc.wantFatal || gotErr.Error() != tc.err.Error() {
					t.Fatalf("round trip of error %v = %v (fatal %v); want fatal %v", tc.err, gotErr, IsFatal(gotErr), tc.wantFatal)
				}
				return
			}
			if gotErr != nil {
				t.Fatalf("round trip of (%v, %v) = error %v", tc.res, tc.err, gotErr)
			}
			if (got == nil) != (tc.wantRes == nil) || (got != nil && !bytes.Equal(got.Payload, tc.wantRes.Payload)) {
				t.Fatalf("round trip of (%v, %v) = %v, want %v", tc.res, tc.err, got, tc.wantRes)
			}
		})
	}
}
