package host

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// The conversions are checked against the wire messages of
// plugins/proto/plugin.proto, which is the contract; TestInProcessRoundTrip
// checks them together with the SDK's.

func TestRequestToProto(t *testing.T) {
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
				Headers: map[string]string{"tenant": "acme", "x-trace": "t"},
			},
		}},
		{name: "a first-seen time in another zone", req: Request{Envelope: Envelope{
			FirstSeen: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)),
		}}},
		{name: "a binary payload", req: Request{Handler: "h", Payload: []byte{0, 1, 2, 255}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Through the wire encoding too, as the plugin receives it.
			b, err := gproto.Marshal(requestToProto(7, tc.req, 1500*time.Microsecond))
			if err != nil {
				t.Fatal(err)
			}
			var m proto.HandleRequest
			if err := gproto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if m.GetCallId() != 7 || m.GetTimeoutMs() != 2 {
				t.Fatalf("call id %d, timeout %dms; want 7 and 2 (rounded up)", m.GetCallId(), m.GetTimeoutMs())
			}
			e, want := m.GetEnvelope(), tc.req.Envelope
			var firstSeen time.Time
			if ts := e.GetFirstSeen(); ts != nil {
				firstSeen = ts.AsTime()
			}
			if m.GetHandler() != tc.req.Handler || m.GetCompensate() != tc.req.Compensate || !bytes.Equal(m.GetPayload(), tc.req.Payload) ||
				e.GetMessageId() != want.MessageID || e.GetType() != want.Type || e.GetCorrelationId() != want.CorrelationID ||
				e.GetCausationId() != want.CausationID || e.GetOrigin() != want.Origin || int(e.GetAttempt()) != want.Attempt ||
				!firstSeen.Equal(want.FirstSeen) || (want.FirstSeen.IsZero() && e.GetFirstSeen() != nil) ||
				!maps.Equal(e.GetHeaders(), want.Headers) {
				t.Fatalf("requestToProto(%+v) sent %v", tc.req, &m)
			}
		})
	}
}

func TestResultFromProto(t *testing.T) {
	tests := []struct {
		name string
		m    *proto.HandleResponse
		res  Result
		err  *CallError
	}{
		{name: "a payload", res: Result{Payload: []byte(`{"ok":true}`)},
			m: &proto.HandleResponse{Outcome: &proto.HandleResponse_Output{Output: &proto.Output{Payload: []byte(`{"ok":true}`)}}}},
		{name: "an empty payload is an output, not a stop", res: Result{},
			m: &proto.HandleResponse{Outcome: &proto.HandleResponse_Output{Output: &proto.Output{}}}},
		{name: "a stop", res: Result{Stop: true},
			m: &proto.HandleResponse{Outcome: &proto.HandleResponse_Stop{Stop: &proto.Stop{}}}},
		{name: "a retryable failure", err: &CallError{Plugin: "p", Handler: "h", Msg: "try again"},
			m: &proto.HandleResponse{Outcome: &proto.HandleResponse_Failure{Failure: &proto.Failure{Message: "try again"}}}},
		{name: "a fatal failure", err: &CallError{Plugin: "p", Handler: "h", Fatal: true, Msg: "never"},
			m: &proto.HandleResponse{Outcome: &proto.HandleResponse_Failure{Failure: &proto.Failure{Fatal: true, Message: "never"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := gproto.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			var m proto.HandleResponse
			if err := gproto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			got, gotErr := resultFromProto("p", "h", &m)
			if tc.err != nil {
				var ce *CallError
				if !errors.As(gotErr, &ce) || *ce != *tc.err {
					t.Fatalf("resultFromProto = %v, want %v", gotErr, tc.err)
				}
				return
			}
			if gotErr != nil || got.Stop != tc.res.Stop || !bytes.Equal(got.Payload, tc.res.Payload) {
				t.Fatalf("resultFromProto = %+v, %v; want %+v", got, gotErr, tc.res)
			}
		})
	}
	t.Run("an answer without an outcome is a retryable protocol error", func(t *testing.T) {
		_, err := resultFromProto("p", "h", &proto.HandleResponse{CallId: 1})
		if !errors.Is(err, ErrProtocol) || IsFatal(err) {
			t.Fatalf("resultFromProto(no outcome) = %v, want ErrProtocol, retryable", err)
		}
	})
}

func TestHandlersFromProto(t *testing.T) {
	m := &proto.DescribeResponse{Handlers: []*proto.HandlerInfo{{Name: "a"}, {Name: "b", InputType: "Order", OutputType: "none"}}}
	want := []HandlerInfo{{Name: "a"}, {Name: "b", InputType: "Order", OutputType: "none"}}
	got := handlersFromProto(m)
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("handlersFromProto(%v) = %v, want %v", m, got, want)
	}
}
