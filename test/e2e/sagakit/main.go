// Command sagakit is the plugin of the saga end-to-end tests: charge,
// refund, reserve, release and book, each of which appends one line
// "<handler> <order id> <message id>" to the file $SAGAKIT_EFFECTS before
// it answers, so that a test counts every call, and, keyed by message id,
// every effect. The payload is {"id", "fail", "sleep_ms", "slow"}: fail
// names the handlers that fail for good (comma-separated), sleep_ms how
// long each call takes after its effect is recorded, or only the calls of
// the handlers slow names. charge returns {"payment": "pay-<id>"}; refund refuses, as
// fatal, a step output that is not the payment its charge returned.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	hs := map[string]sdk.Handler{}
	for _, name := range []string{"charge", "refund", "reserve", "release", "book"} {
		hs[name] = sdk.Handler{Func: func(ctx context.Context, req *sdk.Request) (*sdk.Result, error) { return handle(ctx, name, req) }}
	}
	sdk.Serve(hs)
}

type order struct {
	ID      string `json:"id"`
	Fail    string `json:"fail"`
	SleepMS int    `json:"sleep_ms"`
	Slow    string `json:"slow"`
}

func handle(ctx context.Context, name string, req *sdk.Request) (*sdk.Result, error) {
	var o order
	if err := json.Unmarshal(req.Payload, &o); err != nil {
		return nil, sdk.Fatal(fmt.Errorf("sagakit: %s wants {\"id\": …}: %w", name, err))
	}
	if err := record(name, o.ID, req.Envelope.MessageID); err != nil {
		return nil, err
	}
	// The effect has happened; the runtime has not heard of it yet. A
	// runtime killed now calls the handler again, with the same message.
	if o.SleepMS > 0 && (o.Slow == "" || slices.Contains(strings.Split(o.Slow, ","), name)) {
		t := time.NewTimer(time.Duration(o.SleepMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("sagakit: %s interrupted: %w", name, context.Cause(ctx))
		}
	}
	if slices.Contains(strings.Split(o.Fail, ","), name) {
		return nil, sdk.Fatal(fmt.Errorf("sagakit: %s refuses order %s", name, o.ID))
	}
	switch name {
	case "charge":
		return &sdk.Result{Payload: []byte(`{"payment":"pay-` + o.ID + `"}`)}, nil
	case "refund":
		if want := `{"payment":"pay-` + o.ID + `"}`; string(req.StepOutput) != want {
			return nil, sdk.Fatal(fmt.Errorf("sagakit: refund of %s got step output %q, want %s", o.ID, req.StepOutput, want))
		}
	}
	return &sdk.Result{Payload: []byte(`{}`)}, nil
}

// record appends one line to $SAGAKIT_EFFECTS: one write, in append mode,
// so that lines from concurrent calls and processes do not interleave.
func record(name, id, messageID string) error {
	path := os.Getenv("SAGAKIT_EFFECTS")
	if path == "" {
		return errors.New("sagakit: SAGAKIT_EFFECTS is not set")
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s %s\n", name, id, messageID)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
