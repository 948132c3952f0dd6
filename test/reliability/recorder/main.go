// Command recorder is the reliability suite's step handler. Its handler
// record writes every call it receives, and every effect it completes, to a
// ledger in PostgreSQL (the URL in LEDGER_URL, whose search_path names the
// suite's schema), so that a checker can count what happened against what
// was sent:
//
//   - calls(run_id, step, attempt, n, at): one row per delivery attempt of
//     a run at a step, n the times that attempt was seen;
//   - effects(run_id, step, n, first_at, last_at): one row per run and step
//     that returned successfully, n the times it did (n > 1 is a duplicated
//     effect);
//   - effect_ids(run_id, step, message_id, n): the same per message id, so
//     that a step run again for the same message (a redelivery) can be
//     told from a second message for the same step (a duplicate publish).
//
// The run is the message's correlation id; the step is the queue it was
// consumed from. The payload chooses a fault, per message:
//
//	{"fail": true}            fails retryably on every attempt (poison)
//	{"fatal": true}           fails fatally
//	{"fatal_step": Q}         fails fatally at the step consuming queue Q only
//	{"slow_ms": N}            waits N ms before the effect
//	{"slow_ms": N, "slow_step": Q}  only at the step consuming queue Q
//	{"hang": true}            waits until the call's context ends
//	{"crash_attempts": N}     exits the process mid-call on attempts ≤ N
//
// Any other payload is an effect that succeeds and is echoed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/acemq-flow/plugins/sdk"
)

func main() {
	sdk.Serve(map[string]sdk.Handler{"record": {Func: record}})
}

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

func ledger(ctx context.Context) (*pgxpool.Pool, error) {
	poolOnce.Do(func() {
		url := os.Getenv("LEDGER_URL")
		if url == "" {
			poolErr = errors.New("recorder: LEDGER_URL is unset; set it in the plugin's env to the ledger's PostgreSQL URL")
			return
		}
		pool, poolErr = pgxpool.New(ctx, url)
	})
	return pool, poolErr
}

type fault struct {
	Fail          bool   `json:"fail"`
	Fatal         bool   `json:"fatal"`
	FatalStep     string `json:"fatal_step"`
	SlowMS        int    `json:"slow_ms"`
	SlowStep      string `json:"slow_step"`
	Hang          bool   `json:"hang"`
	CrashAttempts int    `json:"crash_attempts"`
}

func record(ctx context.Context, req *sdk.Request) (*sdk.Result, error) {
	var f fault
	_ = json.Unmarshal(req.Payload, &f) // a payload that is not an object asks for no fault
	db, err := ledger(ctx)
	if err != nil {
		return nil, sdk.Fatal(err)
	}
	run, step := req.Envelope.CorrelationID, req.Envelope.Queue
	if run == "" {
		run = req.Envelope.MessageID
	}
	if _, err := db.Exec(ctx, `INSERT INTO calls (run_id, step, attempt, n, at) VALUES ($1, $2, $3, 1, now())
		ON CONFLICT (run_id, step, attempt) DO UPDATE SET n = calls.n + 1, at = now()`, run, step, req.Envelope.Attempt); err != nil {
		return nil, fmt.Errorf("recorder: ledger call of run %s at %s: %w", run, step, err)
	}
	switch {
	case f.CrashAttempts >= req.Envelope.Attempt:
		os.Exit(3)
	case f.Fatal || (f.FatalStep != "" && f.FatalStep == step):
		return nil, sdk.Fatal(fmt.Errorf("recorder: fatal on run %s at %s", run, step))
	case f.Fail:
		return nil, fmt.Errorf("recorder: fail on attempt %d of run %s", req.Envelope.Attempt, run)
	case f.Hang:
		<-ctx.Done()
		return nil, fmt.Errorf("recorder: hung until the call ended: %w", context.Cause(ctx))
	case f.SlowMS > 0 && (f.SlowStep == "" || f.SlowStep == step):
		t := time.NewTimer(time.Duration(f.SlowMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("recorder: slow call interrupted: %w", context.Cause(ctx))
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO effects (run_id, step, n, first_at, last_at) VALUES ($1, $2, 1, now(), now())
		ON CONFLICT (run_id, step) DO UPDATE SET n = effects.n + 1, last_at = now()`, run, step); err != nil {
		return nil, fmt.Errorf("recorder: ledger effect of run %s at %s: %w", run, step, err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO effect_ids (run_id, step, message_id, n) VALUES ($1, $2, $3, 1)
		ON CONFLICT (run_id, step, message_id) DO UPDATE SET n = effect_ids.n + 1`, run, step, req.Envelope.MessageID); err != nil {
		return nil, fmt.Errorf("recorder: ledger effect id of run %s at %s: %w", run, step, err)
	}
	return &sdk.Result{Payload: req.Payload}, nil
}
