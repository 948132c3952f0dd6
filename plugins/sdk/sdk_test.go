package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/plugins/proto"
)

type Order struct {
	ID string `json:"id"`
}

type Reservation struct {
	OrderID string `json:"order_id"`
}

func TestTypedDeclaresTypeNames(t *testing.T) {
	tests := []struct {
		name          string
		h             Handler
		wantIn, wantO string
	}{
		{"named structs give their names", Typed(func(context.Context, Envelope, Order) (Reservation, error) { return Reservation{}, nil }), "Order", "Reservation"},
		{"pointers give the element's name", Typed(func(context.Context, Envelope, *Order) (*Reservation, error) { return nil, nil }), "Order", "Reservation"},
		{"None is none", Typed(func(context.Context, Envelope, Order) (None, error) { return None{}, nil }), "Order", "none"},
		{"raw JSON and maps are any", Typed(func(context.Context, Envelope, json.RawMessage) (map[string]any, error) { return nil, nil }), "", ""},
		{"bytes and strings are any", Typed(func(context.Context, Envelope, []byte) (string, error) { return "", nil }), "", ""},
		{"WithTypes overrides", Typed(func(context.Context, Envelope, []byte) ([]byte, error) { return nil, nil }).WithTypes("A", "B"), "A", "B"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.h.InputType != tc.wantIn || tc.h.OutputType != tc.wantO {
				t.Fatalf("types = %q → %q, want %q → %q", tc.h.InputType, tc.h.OutputType, tc.wantIn, tc.wantO)
			}
		})
	}
}

func TestTypedCodec(t *testing.T) {
	reserve := Typed(func(_ context.Context, env Envelope, in Order) (Reservation, error) {
		return Reservation{OrderID: in.ID + "/" + env.MessageID}, nil
	})
	res, err := reserve.Func(t.Context(), &Request{Envelope: Envelope{MessageID: "m"}, Payload: []byte(`{"id":"o-1"}`)})
	if err != nil || string(res.Payload) != `{"order_id":"o-1/m"}` {
		t.Fatalf("reserve = %v, %v", res, err)
	}
	_, err = reserve.Func(t.Context(), &Request{Payload: []byte(`[1,2]`)})
	if !IsFatal(err) || !strings.Contains(err.Error(), "does not decode as sdk.Order") {
		t.Fatalf("reserve(bad payload) error = %v, want fatal naming the type", err)
	}
	raw := Typed(func(_ context.Context, _ Envelope, in []byte) ([]byte, error) { return bytes.ToUpper(in), nil })
	res, err = raw.Func(t.Context(), &Request{Payload: []byte("not json")})
	if err != nil || string(res.Payload) != "NOT JSON" {
		t.Fatalf("raw = %v, %v; bytes in and out must pass unencoded", res, err)
	}
}

func TestTypedCompensationGetsWhatItsStepReturned(t *testing.T) {
	var gotIn Order
	var gotStep Reservation
	var gotQueue string
	release := TypedCompensation(func(_ context.Context, env Envelope, in Order, step Reservation) error {
		gotIn, gotStep, gotQueue = in, step, env.Queue
		if step.OrderID == "fail" {
			return errors.New("warehouse closed")
		}
		return nil
	})
	if release.InputType != "Order" || release.OutputType != "none" {
		t.Fatalf("TypedCompensation types = %q → %q, want Order → none", release.InputType, release.OutputType)
	}
	res, err := release.Func(t.Context(), &Request{Compensate: true, Payload: []byte(`{"id":"o-1"}`),
		StepOutput: []byte(`{"order_id":"r-1"}`), Envelope: Envelope{Queue: "place-order.reserve-stock.compensate"}})
	if err != nil || res != nil || gotIn.ID != "o-1" || gotStep.OrderID != "r-1" || gotQueue != "place-order.reserve-stock.compensate" {
		t.Fatalf("release = %v, %v with in %+v step %+v queue %q; want nothing returned, the input, the step's output and the queue", res, err, gotIn, gotStep, gotQueue)
	}
	gotStep = Reservation{OrderID: "stale"}
	if _, err := release.Func(t.Context(), &Request{Compensate: true, Payload: []byte(`{"id":"o-2"}`)}); err != nil || gotStep.OrderID != "" {
		t.Fatalf("release without a step output = %v, step %+v; want the zero value", err, gotStep)
	}
	if _, err := release.Func(t.Context(), &Request{Compensate: true, Payload: []byte(`{}`), StepOutput: []byte(`{"order_id":"fail"}`)}); err == nil || IsFatal(err) {
		t.Fatalf("a failing compensation = %v, want its error, retryable", err)
	}
	if _, err := release.Func(t.Context(), &Request{Compensate: true, Payload: []byte(`{}`), StepOutput: []byte(`[1]`)}); !IsFatal(err) || !strings.Contains(err.Error(), "step's output does not decode as sdk.Reservation") {
		t.Fatalf("a step output that does not decode = %v, want fatal naming the type", err)
	}
	if _, err := release.Func(t.Context(), &Request{Handler: "release", Payload: []byte(`{}`)}); !IsFatal(err) || !strings.Contains(err.Error(), "called as a step") {
		t.Fatalf("a compensation called as a step = %v, want fatal", err)
	}
}

func TestNewServerRejectsBadHandlers(t *testing.T) {
	_, err := NewServer(map[string]Handler{"": {Func: func(context.Context, *Request) (*Result, error) { return nil, nil }}, "x.y": {}, "nofunc": {}})
	if err == nil {
		t.Fatal("NewServer accepted an empty name, a dotted name and a handler without Func")
	}
	for _, want := range []string{`handler name ""`, `handler name "x.y"`, `handler "nofunc" has no Func`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestDescribeIsSorted(t *testing.T) {
	noop := func(context.Context, *Request) (*Result, error) { return nil, nil }
	srv, err := NewServer(map[string]Handler{"b": {Func: noop}, "a": {Func: noop, InputType: "T"}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Describe(t.Context(), &proto.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hs := resp.GetHandlers()
	if len(hs) != 2 || hs[0].GetName() != "a" || hs[0].GetInputType() != "T" || hs[1].GetName() != "b" {
		t.Fatalf("Describe = %v, want a (input T), b", hs)
	}
}

func TestLoggerWritesGoPluginJSON(t *testing.T) {
	var buf bytes.Buffer
	old := stderr
	stderr = &buf
	defer func() { stderr = old }()
	Logger(slog.LevelInfo).Warn("stock low", "sku", "A-1")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("Logger wrote %q: %v", buf.String(), err)
	}
	if rec["@level"] != "warn" || rec["@message"] != "stock low" || rec["sku"] != "A-1" || rec["@timestamp"] == nil {
		t.Fatalf("Logger wrote %v; want @level warn, @message, @timestamp and sku", rec)
	}
}

func TestFatalAndRetryableOfNil(t *testing.T) {
	if Fatal(nil) != nil || Retryable(nil) != nil {
		t.Fatal("Fatal(nil) or Retryable(nil) is not nil")
	}
	base := errors.New("x")
	if err := Fatal(base); !errors.Is(err, base) || !IsFatal(err) {
		t.Fatalf("Fatal(x) = %v: must wrap x and be fatal", err)
	}
}

func TestLevelFromEnv(t *testing.T) {
	for value, want := range map[string]slog.Level{"debug": slog.LevelDebug, "warn": slog.LevelWarn, "": slog.LevelInfo, "loud": slog.LevelInfo} {
		t.Setenv("ACEMQ_SDK_TEST_LEVEL", value)
		if got := LevelFromEnv("ACEMQ_SDK_TEST_LEVEL"); got != want {
			t.Errorf("LevelFromEnv with %q = %v, want %v", value, got, want)
		}
	}
}
