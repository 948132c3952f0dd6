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
			m := requestToProto(7, tc.req, 1500*time.Microsecond)
			// Through the wire encoding too, as the plugin receives it.
			b, err := gproto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var back proto.HandleRequest
			if err := gproto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.GetCallId() != 7 || back.GetTimeoutMs() != 2 {
				t.Fatalf("call id %d, timeout %dms; want 7 and 2 (rounded up)", back.GetCallId(), back.GetTimeoutMs())
			}
			got := requestFromProto(&back)
			if !requestsEqual(got, tc.req) {
				t.Fatalf("requestFromProto(requestToProto(%+v)) = %+v", tc.req, got)
			}
		})
	}
}

func requestsEqual(a, b Request) bool {
	ea, eb := a.Envelope, b.Envelope
	return a.Handler == b.Handler && a.Compensate == b.Compensate && bytes.Equal(a.Payload, b.Payload) &&
		ea.MessageID == eb.MessageID && ea.Type == eb.Type && ea.CorrelationID == eb.CorrelationID &&
		ea.CausationID == eb.CausationID && ea.Origin == eb.Origin && ea.Attempt == eb.Attempt &&
		ea.FirstSeen.Equal(eb.FirstSeen) && maps.Equal(ea.Headers, eb.Headers)
}

func TestResultRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		res  Result
		err  error
	}{
		{name: "a payload", res: Result{Payload: []byte(`{"ok":true}`)}},
		{name: "an empty payload is an output, not a stop", res: Result{Payload: nil}},
		{name: "a stop", res: Result{Stop: true}},
		{name: "a retryable failure", err: &CallError{Plugin: "p", Handler: "h", Msg: "try again"}},
		{name: "a fatal failure", err: &CallError{Plugin: "p", Handler: "h", Fatal: true, Msg: "never"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := gproto.Marshal(resultToProto(3, tc.res, tc.err))
			if err != nil {
				t.Fatal(err)
			}
			var m proto.HandleResponse
			if err := gproto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			got, gotErr := resultFromProto("p", "h", &m)
			if tc.err != nil {
				var want, ce *CallError
				errors.As(tc.err, &want)
				if !errors.As(gotErr, &ce) || *ce != *want {
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

func TestHandlersRoundTrip(t *testing.T) {
	hs := []HandlerInfo{{Name: "a"}, {Name: "b", InputType: "Order", OutputType: "none"}}
	got := handlersFromProto(handlersToProto(hs))
	if len(got) != len(hs) || got[0] != hs[0] || got[1] != hs[1] {
		t.Fatalf("handlersFromProto(handlersToProto(%v)) = %v", hs, got)
	}
}
