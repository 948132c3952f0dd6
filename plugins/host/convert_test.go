package host

import (
	"bytes"
	"errors"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acemq/acemq-flow/plugins/proto"
)

// The conversions are checked against the wire messages of
// plugins/proto/plugin.proto, which is the contract; TestInProcessRoundTrip
// checks them together with the SDK's.

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

func TestRequestToProto(t *testing.T) {
	firstSeen := time.Date(2026, 9, 9, 14, 3, 11, 123456789, time.UTC)
	cet := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	received := time.Date(2026, 9, 9, 14, 3, 12, 5000, time.UTC)
	// Every call is sent with id 7 and 1.5ms left: timeout_ms 2, rounded up.
	tests := []struct {
		name string
		req  Request
		want *proto.HandleRequest
	}{
		{name: "an empty request", req: Request{},
			want: &proto.HandleRequest{CallId: 7, TimeoutMs: 2, Envelope: &proto.Envelope{}}},
		{name: "a full envelope", req: Request{
			Handler: "reserve", Payload: []byte(`{"a":1}`),
			Envelope: Envelope{
				MessageID: "m-2", Type: "Order", CorrelationID: "c-1", CausationID: "m-1", Origin: "shop",
				Attempt: 4, FirstSeen: firstSeen,
				Headers: map[string]string{"tenant": "acme", "x-trace": "t"},
				Queue:   "fulfilment.reserve", ReceivedAt: received,
			},
		}, want: &proto.HandleRequest{
			CallId: 7, TimeoutMs: 2, Handler: "reserve", Payload: []byte(`{"a":1}`),
			Envelope: &proto.Envelope{
				MessageId: "m-2", Type: "Order", CorrelationId: "c-1", CausationId: "m-1", Origin: "shop",
				Attempt: 4, FirstSeen: timestamppb.New(firstSeen),
				Headers: map[string]string{"tenant": "acme", "x-trace": "t"},
				Queue:   "fulfilment.reserve", ReceivedAt: timestamppb.New(received),
			},
		}},
		{name: "a compensation carries what its step returned", req: Request{
			Handler: "refund", Compensate: true, Payload: []byte(`{"order":"o-1"}`), StepOutput: []byte(`{"payment":"p-1"}`),
			Envelope: Envelope{MessageID: "m-3", Queue: "place-order.take-payment.compensate"},
		}, want: &proto.HandleRequest{
			CallId: 7, TimeoutMs: 2, Handler: "refund", Compensate: true, Payload: []byte(`{"order":"o-1"}`), StepOutput: []byte(`{"payment":"p-1"}`),
			Envelope: &proto.Envelope{MessageId: "m-3", Queue: "place-order.take-payment.compensate"},
		}},
		{name: "a queue name that is not UTF-8 is sent as text", req: Request{Envelope: Envelope{Queue: "q\xff"}},
			want: &proto.HandleRequest{CallId: 7, TimeoutMs: 2, Envelope: &proto.Envelope{Queue: "q\uFFFD"}}},
		{name: "headers that are not UTF-8 are sent as text, empty ones as they are", req: Request{Envelope: Envelope{
			Headers: map[string]string{"k\xff": "v", "tenant": "a\xffb", "empty": "", "": "no name"},
		}}, want: &proto.HandleRequest{CallId: 7, TimeoutMs: 2, Envelope: &proto.Envelope{
			Headers: map[string]string{"k\uFFFD": "v", "tenant": "a\uFFFDb", "empty": "", "": "no name"},
		}}},
		{name: "a first-seen time in another zone", req: Request{Envelope: Envelope{FirstSeen: cet}},
			want: &proto.HandleRequest{CallId: 7, TimeoutMs: 2, Envelope: &proto.Envelope{
				FirstSeen: &timestamppb.Timestamp{Seconds: cet.Unix()},
			}}},
		{name: "a binary payload", req: Request{Handler: "h", Payload: []byte{0, 1, 2, 255}},
			want: &proto.HandleRequest{CallId: 7, TimeoutMs: 2, Handler: "h", Payload: []byte{0, 1, 2, 255}, Envelope: &proto.Envelope{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Through the wire encoding too, as the plugin receives it.
			var m proto.HandleRequest
			wire(t, requestToProto(7, tc.req, 1500*time.Microsecond), &m)
			if !gproto.Equal(&m, tc.want) {
				t.Fatalf("requestToProto(%+v) sent %v, want %v", tc.req, &m, tc.want)
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
			var m proto.HandleResponse
			wire(t, tc.m, &m)
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
