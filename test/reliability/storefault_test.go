//go:build chaos

package reliability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/test/reliability/harness"
	"github.com/acemq/acemq-flow/test/runtimetest"
)

// TestChaosS10PostgresRestartDuringRelay runs the runtime with its outbox
// relay (--relay) and idempotent steps on a PostgreSQL cluster of the
// test's own (never the shared one), while an application writes every
// run's first message to the outbox, one transaction each. The cluster is
// crashed (pg_ctl stop -m immediate) and then stopped cleanly (-m fast),
// each for a couple of seconds, under load: the relay publishes again
// within 10 s of each restart, no outbox record is lost, records committed
// twice (a commit whose answer the crash ate) or published twice (a
// publish whose mark the crash ate) are absorbed by the idempotent step,
// the store's outage spends no message's attempts (the consumers pause
// instead) and /readyz names the store meanwhile, all without restarting
// the runtime.
func TestChaosS10PostgresRestartDuringRelay(t *testing.T) {
	r := newRig(t, true)
	pg := harness.StartPostgres(t)
	p := harness.StartRuntime(t, binary, r.s.AMQP, "--store", pg.URL, "--create-schema", "--claim-timeout", "5s", "--drain-timeout", "10s", "--relay", r.flow)
	w := harness.NewOutboxWriter(t, pg.URL, r.gen.Sent, replyQueue)
	// A little slower at work.a (25 ms a call, 4 at once) than the
	// writer's rate: a backlog builds, so deliveries meet each outage.
	msgs := harness.Messages("s10-"+harness.Random(3), "work", "a", `{"slow_ms": 25, "slow_step": "work.a"}`, load(10, 4000))
	written := make(chan error, 1)
	go func() { written <- w.Write(rate(), 2*time.Minute, msgs...) }()
	if !r.replies.WaitCount(50, time.Minute) {
		t.Fatalf("fewer than 50 runs completed through the outbox within a minute; log:\n%s", harness.Tail(p.Log(), 30))
	}
	var worst time.Duration
	var faults, readyz []string
	named := 0
	for _, mode := range []string{"immediate", "fast"} {
		pg.Stop(t, mode)
		stopped := time.Now()
		// While it is down, /readyz names the store once a delivery has met
		// the outage (one that meets none has nothing to say).
		if why, ok := unreadyFor(p, "store unavailable", 2*time.Second); ok {
			readyz = append(readyz, fmt.Sprintf("-m %s: %q", mode, why))
			named++
		} else {
			readyz = append(readyz, fmt.Sprintf("-m %s: no delivery met the outage", mode))
		}
		time.Sleep(time.Until(stopped.Add(2 * time.Second))) // the outage's length
		pg.Start(t)
		restarted := time.Now()
		faults = append(faults, "-m "+mode)
		d, ok := publishedSince(t, pg.URL, restarted, 30*time.Second)
		if !ok {
			t.Errorf("the relay published nothing within 30s of PostgreSQL's restart after pg_ctl stop -m %s; log:\n%s", mode, harness.Tail(p.Log(), 30))
		} else if d > 10*time.Second {
			t.Errorf("the relay resumed %s after PostgreSQL's restart (-m %s), want at most 10s", d.Round(100*time.Millisecond), mode)
		}
		worst = max(worst, d)
		time.Sleep(time.Duration(size(2, 10)) * time.Second) // the plan's spacing between faults
	}
	if err := <-written; err != nil {
		t.Error(err)
	}
	if named == 0 {
		t.Errorf("/readyz never named the store while PostgreSQL was down: %s", strings.Join(readyz, "; "))
	}
	v, _, _ := r.finish(t, 2*time.Minute)
	if v.DupEffects != 0 {
		t.Errorf("dup_effects = %d, want 0: records published twice must be absorbed by the idempotent step", v.DupEffects)
	}
	if v.DeadLettered != 0 {
		t.Errorf("%d runs dead-lettered, want 0: nothing was wrong with them", v.DeadLettered)
	}
	retried := p.Count(`msg="delivery retried"`)
	if retried != 0 {
		t.Errorf("%d deliveries retried, want 0: an outage of the store must not spend the message's attempts", retried)
	}
	twice := harness.PSQL(t, pg.URL, "SELECT count(*) - count(DISTINCT properties->>'message_id') FROM acemq_outbox")
	dups, _ := p.Metric(`acemq_messages_total{consumer="work.a",outcome="duplicate"}`)
	harness.Record(t, harness.Row{Scenario: "S10 PostgreSQL restart during relay", Faults: "private cluster: " + strings.Join(faults, ", then ") + ", 2s each", Verdict: v,
		Recovery: fmt.Sprintf("relay %.1fs", worst.Seconds()),
		Notes: fmt.Sprintf("%d outbox records written twice (commit unknown), %d duplicates absorbed at work.a; %d deliveries held, %d retried; %d claims left held; %d writes retried; /readyz while down: %s",
			atoi(twice), int(dups), heldDeliveries(p), retried, atoi(heldClaims(t, pg.URL)), w.Retries, strings.Join(readyz, "; "))})
}

// unreadyFor polls /readyz until it answers not ready with a reason
// containing sub, for up to d, and returns that reason.
func unreadyFor(p *harness.Runtime, sub string, d time.Duration) (string, bool) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		body, code, err := p.Get("/readyz")
		if err == nil && code == 503 && strings.Contains(body, sub) {
			return strings.TrimSpace(body), true
		}
		time.Sleep(50 * time.Millisecond) // readiness has no event outside the runtime
	}
	return "", false
}

// publishedSince waits until the relay has marked an outbox record
// published after since and returns how long after since that was.
func publishedSince(t *testing.T, store string, since time.Time, d time.Duration) (time.Duration, bool) {
	t.Helper()
	end := time.Now().Add(d)
	at := since.UTC().Format("2006-01-02 15:04:05.000000+00")
	for time.Now().Before(end) {
		out := harness.PSQL(t, store, "SELECT coalesce(extract(epoch from min(published_at))::text, '') FROM acemq_outbox WHERE published_at > '"+at+"'")
		if out != "" {
			var secs float64
			fmt.Sscan(out, &secs)
			return time.Duration(secs*float64(time.Second)) - time.Duration(since.UnixNano()), true
		}
		time.Sleep(100 * time.Millisecond) // the outbox has no event to wait on
	}
	return 0, false
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestChaosS13LeaseExpiryRace runs two runtimes on one store with a 2 s
// claim lease, while 1% of the runs are slow at the first step (3 s, past
// the lease) and published twice: the second copy finds the claim in
// progress, comes round until the lease has expired and takes it over.
// The first claimant's late confirm is refused (its token fenced off by
// the takeover), both outputs carry the same derived message id, and the
// next idempotent step handles each run exactly once. At the slow step
// both handlers ran: the lease was shorter than the handler, which is the
// at-least-once window --claim-timeout must cover; it is counted, not
// failed.
func TestChaosS13LeaseExpiryRace(t *testing.T) {
	r := newRig(t, true)
	args := []string{"--store", r.store, "--create-schema", "--claim-timeout", "2s", "--drain-timeout", "10s", r.flow}
	p1 := harness.StartRuntime(t, binary, r.s.AMQP, args...)
	p2 := harness.StartRuntime(t, binary, r.s.AMQP, args...)
	n := load(5, 2000)
	msgs := plain("s13", n)
	var slow []harness.Message
	for i := range msgs {
		if i%100 == 50 {
			msgs[i].Body = `{"slow_ms": 3000, "slow_step": "work.a"}`
			slow = append(slow, msgs[i])
		}
	}
	// Each slow run's second copy goes half a second of the rate after
	// its first: its first claim is held by then.
	lag := max(rate()/2, 1)
	var sent []harness.Message
	for i, m := range msgs {
		sent = append(sent, m)
		if j := i - lag; j >= 0 && j%100 == 50 {
			sent = append(sent, msgs[j])
		}
	}
	for j := max(len(msgs)-lag, 0); j < len(msgs); j++ {
		if j%100 == 50 {
			sent = append(sent, msgs[j])
		}
	}
	publishInBackground(t, r, sent)()
	v, _, _ := r.finish(t, 2*time.Minute)
	effects := r.ledger.Effects(t)
	isSlow := map[string]bool{}
	for _, m := range slow {
		isSlow[m.ID] = true
	}
	twiceAtA := 0
	for run, steps := range effects {
		if n := steps["work.b"]; n != 1 {
			t.Errorf("run %s: the effect at work.b happened %d times, want exactly once", run, n)
		}
		switch a := steps["work.a"]; {
		case a == 2 && isSlow[run]:
			twiceAtA++
		case a != 1:
			t.Errorf("run %s (slow %v): the effect at work.a happened %d times, want once (twice at most for a slow run)", run, isSlow[run], a)
		}
	}
	refused := p1.Count("claim taken over before the handler finished") + p2.Count("claim taken over before the handler finished")
	if refused < twiceAtA {
		t.Errorf("%d late confirms refused, want one for each of the %d runs handled twice at work.a: the first claimant's confirm must be fenced off", refused, twiceAtA)
	}
	harness.Record(t, harness.Row{Scenario: "S13 lease expiry race", Faults: fmt.Sprintf("%d of %d runs 3s at work.a with a 2s lease, a second copy +500ms; 2 runtimes", len(slow), n), Verdict: v,
		Notes: fmt.Sprintf("%d late confirms refused (fenced); work.b exactly once for every run; dup effects = the %d slow runs whose handler outlived the lease at work.a, both ran", refused, twiceAtA)})
}

// ambiguousStore is the store with Temporal's ambiguous commits: a claim
// batch, a confirm batch or a saga advance is committed, and then, on p of the calls
// (seeded), answered as if the connection had dropped before the answer
// came back. The saga consumers' claims that read their instances
// (stores.SagaClaims) are lost the same way, counted as claims, and so is
// an advance that confirms its claim (which the runtime does not make),
// counted as an advance.
type ambiguousStore struct {
	*postgres.Store
	mu       sync.Mutex
	rnd      *rand.Rand
	p        float64
	claims   atomic.Int64 // claim batches whose answer was lost
	confirms atomic.Int64 // confirm batches whose answer was lost
	advances atomic.Int64 // saga advances whose answer was lost
}

var errLostAnswer = &stores.UnavailableError{Backend: "postgres", Err: errors.New("the connection dropped after the commit, before its answer (injected by S12)")}

func (a *ambiguousStore) lose() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rnd.Float64() < a.p
}

func (a *ambiguousStore) TryClaimBatch(ctx context.Context, reqs []stores.ClaimRequest) ([]stores.Claim, error) {
	out, err := a.Store.TryClaimBatch(ctx, reqs)
	if err == nil && a.lose() {
		a.claims.Add(1)
		return nil, errLostAnswer
	}
	return out, err
}

func (a *ambiguousStore) AdvanceSaga(ctx context.Context, inst stores.SagaInstance) (stores.SagaInstance, error) {
	out, err := a.Store.AdvanceSaga(ctx, inst)
	if err == nil && a.lose() {
		a.advances.Add(1)
		return stores.SagaInstance{}, errLostAnswer
	}
	return out, err
}

func (a *ambiguousStore) AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]error, error) {
	refused, err := a.Store.AdvanceSagaBatch(ctx, insts)
	if err == nil && a.lose() {
		a.advances.Add(1)
		return nil, errLostAnswer
	}
	return refused, err
}

func (a *ambiguousStore) ClaimSagaBatch(ctx context.Context, reqs []stores.SagaClaimRequest) ([]stores.SagaClaim, error) {
	out, err := a.Store.ClaimSagaBatch(ctx, reqs)
	if err == nil && a.lose() {
		a.claims.Add(1)
		return nil, errLostAnswer
	}
	return out, err
}

func (a *ambiguousStore) ConfirmBatch(ctx context.Context, held []stores.Held) ([]error, error) {
	refused, err := a.Store.ConfirmBatch(ctx, held)
	if err == nil && a.lose() {
		a.confirms.Add(1)
		return nil, errLostAnswer
	}
	return refused, err
}

// syncBuffer is a log the runtime writes from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

// TestChaosS12AmbiguousCommits runs the runtime in the test's process on a
// store whose claim batches, confirm batches and saga advances are
// committed and then, 5% of them (seeded; the seed is logged), answered
// with a dropped connection, while an application writes each pipeline
// run's first message to the outbox and, 5% of the time, takes its commit
// for lost and writes it again, and saga runs of two steps start beside
// them. Claims taken but never answered hold their messages in progress
// until their lease, confirms are tried again, a saga delivery whose
// advance was lost comes round and finds its instance moved on, records
// written twice are published twice and absorbed: nothing is lost, no
// effect and no saga step happens twice, and no attempt is spent.
func TestChaosS12AmbiguousCommits(t *testing.T) {
	notStar(t)
	r := newRig(t, true)
	rnd := rng(t)
	pgStore, err := postgres.Open(t.Context(), r.store, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgStore.Close() })
	if err := pgStore.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	amb := &ambiguousStore{Store: pgStore, rnd: rand.New(rand.NewPCG(rnd.Uint64(), 1)), p: 0.05}
	// The suite's flow, and a saga of two recorder steps.
	body, err := os.ReadFile(r.flow)
	if err != nil {
		t.Fatal(err)
	}
	flow := filepath.Join(t.TempDir(), "s12.yaml")
	saga := "sagas:\n  - name: order\n    steps:\n      - {name: x, handler: recorder.record, compensate: recorder.record}\n      - {name: y, handler: recorder.record}\n"
	if err := os.WriteFile(flow, append(body, saga...), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := spec.Load(os.DirFS(filepath.Dir(flow)), filepath.Base(flow))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rt := runtimetest.Run(t, r.s.AMQP, pl, runtime.Options{Management: broker.ManagementOff, Store: amb, Sagas: amb, ClaimTimeout: 5 * time.Second, DrainTimeout: 10 * time.Second, Log: log})
	ctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(ctx, r.s.AMQP, pgStore, relay.Options{Log: log}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-relayed; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	w := harness.NewOutboxWriter(t, r.store, r.gen.Sent, replyQueue)
	var wmu sync.Mutex
	wrnd := rand.New(rand.NewPCG(rnd.Uint64(), 2))
	w.LoseCommit = func() bool {
		wmu.Lock()
		defer wmu.Unlock()
		return wrnd.Float64() < 0.05
	}
	msgs := plain("s12", load(8, 4000))
	sagas := publishInBackground(t, r, harness.Messages("s12saga-"+harness.Random(3), plan.SagaExchange("order"), plan.SagaStepKey("x"), `{"k":1}`, len(msgs)/4))
	if err := w.Write(rate(), time.Minute, msgs...); err != nil {
		t.Fatal(err)
	}
	sagas()
	v, _, _ := r.finish(t, 2*time.Minute)
	if v.DupEffects != 0 {
		t.Errorf("dup_effects = %d, want 0: an ambiguous commit must not have a message handled twice", v.DupEffects)
	}
	if v.DeadLettered != 0 {
		t.Errorf("%d runs dead-lettered, want 0", v.DeadLettered)
	}
	retried := logs.count(`msg="delivery retried"`)
	if retried != 0 {
		t.Errorf("%d deliveries retried, want 0: a lost answer is the store's, not the message's", retried)
	}
	if amb.claims.Load() == 0 || amb.confirms.Load() == 0 || amb.advances.Load() == 0 || w.Lost == 0 {
		t.Errorf("injected %d lost claim answers, %d lost confirm answers, %d lost saga advances and %d lost outbox commits: every kind should have been", amb.claims.Load(), amb.confirms.Load(), amb.advances.Load(), w.Lost)
	}
	if claimed := heldClaims(t, r.store); claimed != "0" {
		t.Errorf("%s claims left held after the drain, want 0", claimed)
	}
	held := 0
	for _, c := range rt.Consumers(t.Context()) {
		held += int(c.Counters["held"])
	}
	harness.Record(t, harness.Row{Scenario: "S12 ambiguous commits", Faults: fmt.Sprintf("5%% lost answers (seed %d): %d claim batches, %d confirm batches, %d saga advances, %d outbox commits", seed, amb.claims.Load(), amb.confirms.Load(), amb.advances.Load(), w.Lost), Verdict: v,
		Notes: fmt.Sprintf("pipeline runs through the outbox, %d saga runs of 2 steps; %d deliveries held, %d retried; records written twice published twice and absorbed; no saga step applied twice", len(msgs)/4, held, retried)})
}
