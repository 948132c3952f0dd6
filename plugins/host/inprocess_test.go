package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/acemq/acemq-flow/plugins/proto"
	"github.com/acemq/acemq-flow/plugins/sdk"
)

// startInProcess serves handlers with the SDK's server inside the test
// process, over go-plugin's in-process gRPC test connection, and returns a
// Plugin that calls them through the same stream code as a real process.
func startInProcess(t *testing.T, handlers map[string]sdk.Handler) *Plugin {
	t.Helper()
	srv, err := sdk.NewServer(handlers)
	if err != nil {
		t.Fatal(err)
	}
	return startInProcessServer(t, srv)
}

// startInProcessServer is startInProcess with the plugin's server given.
func startInProcessServer(t *testing.T, srv proto.PluginServer) *Plugin {
	t.Helper()
	p, err := newPlugin(Config{Name: "inproc", Command: "(in process)", Timeout: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	p.spawn = func(ctx context.Context) (*instance, error) {
		client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{proto.PluginName: &grpcPlugin{server: srv}})
		raw, err := client.Dispense(proto.PluginName)
		if err != nil {
			return nil, err
		}
		return openInstance(ctx, "inproc", raw.(*grpc.ClientConn), nil, 0, nil, nil, func(bool) error { return client.Close() })
	}
	if err := p.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

type order struct {
	ID    string  `json:"id"`
	Total float64 `json:"total"`
}

type Reservation struct {
	OrderID string `json:"order_id"`
	Attempt int    `json:"attempt"`
	Origin  string `json:"origin"`
}

func TestInProcessRoundTrip(t *testing.T) {
	seen := make(chan sdk.Request, 1)
	p := startInProcess(t, map[string]sdk.Handler{
		"reserve": sdk.Typed(func(_ context.Context, env sdk.Envelope, in order) (Reservation, error) {
			if in.Total > 1000 {
				return Reservation{}, sdk.Fatal(fmt.Errorf("order %s is over the limit", in.ID))
			}
			if in.Total == 0 {
				return Reservation{}, sdk.ErrStop
			}
			if in.Total < 0 {
				return Reservation{}, errors.New("stock service unavailable")
			}
			return Reservation{OrderID: in.ID, Attempt: env.Attempt, Origin: env.Origin}, nil
		}).WithTypes("Order", "Reservation"),
		"record": sdk.Typed(func(context.Context, sdk.Envelope, order) (sdk.None, error) { return sdk.None{}, nil }),
		"raw": {Func: func(_ context.Context, req *sdk.Request) (*sdk.Result, error) {
			seen <- *req
			return &sdk.Result{Payload: []byte("ok")}, nil
		}},
		"panics": {Func: func(context.Context, *sdk.Request) (*sdk.Result, error) { panic("boom") }},
	})

	t.Run("describe lists handlers with their declared types", func(t *testing.T) {
		got := p.Handlers()
		want := []HandlerInfo{
			{Name: "panics"},
			{Name: "raw"},
			{Name: "record", InputType: "order", OutputType: "none"}, // Go type names by default
			{Name: "reserve", InputType: "Order", OutputType: "Reservation"},
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Handlers() = %+v, want %+v", got, want)
		}
	})

	env := Envelope{
		MessageID: "m-1", Type: "Order", CorrelationID: "c-1", CausationID: "m-0", Origin: "shop",
		Attempt: 3, FirstSeen: time.Date(2026, 9, 9, 14, 3, 11, 500, time.UTC), Headers: map[string]string{"tenant": "acme"},
		Queue: "place-order.take-payment.compensate", ReceivedAt: time.Date(2026, 9, 9, 14, 3, 12, 700, time.UTC),
	}
	tests := []struct {
		name      string
		handler   string
		payload   string
		want      Result
		wantErr   bool
		wantFatal bool
	}{
		{name: "a typed handler decodes, sees the envelope and encodes", handler: "reserve", payload: `{"id":"o-1","total":12}`,
			want: Result{Payload: []byte(`{"order_id":"o-1","attempt":3,"origin":"shop"}`)}},
		{name: "ErrStop returns nothing", handler: "reserve", payload: `{"id":"o-1","total":0}`, want: Result{Stop: true}},
		{name: "a None output returns nothing", handler: "record", payload: `{"id":"o-1"}`, want: Result{Stop: true}},
		{name: "sdk.Fatal is fatal", handler: "reserve", payload: `{"id":"o-1","total":5000}`, wantErr: true, wantFatal: true},
		{name: "a plain error is retryable", handler: "reserve", payload: `{"id":"o-1","total":-1}`, wantErr: true},
		{name: "a payload that does not decode is fatal", handler: "reserve", payload: `not json`, wantErr: true, wantFatal: true},
		{name: "a panic is a retryable failure of that call", handler: "panics", payload: `{}`, wantErr: true},
		{name: "an unknown handler is fatal", handler: "missing", payload: `{}`, wantErr: true, wantFatal: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Call(t.Context(), Request{Handler: tc.handler, Envelope: env, Payload: []byte(tc.payload)})
			if tc.wantErr {
				var ce *CallError
				if !errors.As(err, &ce) || ce.Fatal != tc.wantFatal || IsFatal(err) != tc.wantFatal {
					t.Fatalf("Call(%s, %s) error = %v; want a *CallError with Fatal=%v", tc.handler, tc.payload, err, tc.wantFatal)
				}
				return
			}
			if err != nil {
				t.Fatalf("Call(%s, %s): %v", tc.handler, tc.payload, err)
			}
			if got.Stop != tc.want.Stop || string(got.Payload) != string(tc.want.Payload) {
				t.Fatalf("Call(%s, %s) = {Stop:%v Payload:%s}, want {Stop:%v Payload:%s}", tc.handler, tc.payload, got.Stop, got.Payload, tc.want.Stop, tc.want.Payload)
			}
		})
	}

	t.Run("the handler sees the request exactly as sent", func(t *testing.T) {
		if _, err := p.Call(t.Context(), Request{Handler: "raw", Compensate: true, Envelope: env, Payload: []byte("body"), StepOutput: []byte(`{"payment":"p-1"}`)}); err != nil {
			t.Fatal(err)
		}
		got := <-seen
		e := got.Envelope
		if got.Handler != "raw" || !got.Compensate || string(got.Payload) != "body" || string(got.StepOutput) != `{"payment":"p-1"}` ||
			e.Queue != env.Queue || !e.ReceivedAt.Equal(env.ReceivedAt) ||
			e.MessageID != env.MessageID || e.Type != env.Type || e.CorrelationID != env.CorrelationID ||
			e.CausationID != env.CausationID || e.Origin != env.Origin || e.Attempt != env.Attempt ||
			!e.FirstSeen.Equal(env.FirstSeen) || !maps.Equal(e.Headers, env.Headers) {
			t.Fatalf("handler saw %+v, want handler raw, compensate, payload body, the step's output and envelope %+v", got, env)
		}
	})
}

// TestInProcessRestart fails the in-process instance's connection and
// checks that the Plugin replaces it: calls in flight fail as retryable and
// the next call is served by the new instance.
func TestInProcessRestart(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	p := startInProcess(t, map[string]sdk.Handler{
		"echo": {Func: func(_ context.Context, r *sdk.Request) (*sdk.Result, error) {
			return &sdk.Result{Payload: r.Payload}, nil
		}},
		"block": {Func: func(ctx context.Context, _ *sdk.Request) (*sdk.Result, error) {
			entered <- struct{}{}
			<-block
			return nil, nil
		}},
	})
	defer close(block)
	inflight := make(chan error, 1)
	started := p.cur.Load()
	go func() {
		_, err := p.Call(t.Context(), Request{Handler: "block"})
		inflight <- err
	}()
	<-entered // the call is in flight
	// Break the connection under the call, as a dying process would.
	started.fail(fmt.Errorf("%w (test)", ErrCrashed))
	if err := <-inflight; !errors.Is(err, ErrCrashed) || IsFatal(err) {
		t.Fatalf("call in flight on a failed instance: error = %v, want ErrCrashed, retryable", err)
	}
	res, err := p.Call(t.Context(), Request{Handler: "echo", Payload: []byte("x")})
	if err != nil || string(res.Payload) != "x" {
		t.Fatalf("Call(echo) after the failure = %q, %v", res.Payload, err)
	}
	if p.Restarts() != 1 {
		t.Fatalf("Restarts() = %d, want 1", p.Restarts())
	}
}
