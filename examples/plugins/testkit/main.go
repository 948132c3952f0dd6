// Command testkit is the acemq-flow plugin for tests and demos. Its handlers
// exercise every outcome a step can have:
//
//   - echo returns its input;
//   - stop returns nothing (the run stops);
//   - fail fails retryably; fatal fails fatally;
//   - flaky fails retryably until the attempt number exceeds the payload's
//     fail_attempts, then echoes;
//   - sleep waits the payload's ms (or until the call's context ends), then
//     echoes;
//   - crash exits the process in the middle of the call.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	sdk.Serve(map[string]sdk.Handler{
		"echo":  {Func: echo},
		"stop":  {Func: stop},
		"fail":  {Func: fail},
		"fatal": {Func: fatal},
		"flaky": {Func: flaky},
		"sleep": {Func: sleep},
		"crash": {Func: crash},
	})
}

func echo(_ context.Context, req *sdk.Request) (*sdk.Result, error) {
	return &sdk.Result{Payload: req.Payload}, nil
}

func stop(context.Context, *sdk.Request) (*sdk.Result, error) {
	return nil, sdk.ErrStop
}

func fail(_ context.Context, req *sdk.Request) (*sdk.Result, error) {
	return nil, fmt.Errorf("testkit: fail on attempt %d", req.Envelope.Attempt)
}

func fatal(context.Context, *sdk.Request) (*sdk.Result, error) {
	return nil, sdk.Fatal(errors.New("testkit: fatal"))
}

func flaky(_ context.Context, req *sdk.Request) (*sdk.Result, error) {
	var in struct {
		FailAttempts int `json:"fail_attempts"`
	}
	if err := json.Unmarshal(req.Payload, &in); err != nil {
		return nil, sdk.Fatal(fmt.Errorf("testkit: flaky wants {\"fail_attempts\": N}: %w", err))
	}
	if req.Envelope.Attempt <= in.FailAttempts {
		return nil, fmt.Errorf("testkit: flaky fails attempt %d of the first %d", req.Envelope.Attempt, in.FailAttempts)
	}
	return &sdk.Result{Payload: req.Payload}, nil
}

func sleep(ctx context.Context, req *sdk.Request) (*sdk.Result, error) {
	var in struct {
		MS int `json:"ms"`
	}
	if err := json.Unmarshal(req.Payload, &in); err != nil {
		return nil, sdk.Fatal(fmt.Errorf("testkit: sleep wants {\"ms\": N}: %w", err))
	}
	t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return &sdk.Result{Payload: req.Payload}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("testkit: sleep interrupted: %w", context.Cause(ctx))
	}
}

func crash(context.Context, *sdk.Request) (*sdk.Result, error) {
	os.Exit(3)
	return nil, nil
}
