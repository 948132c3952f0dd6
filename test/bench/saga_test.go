package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
	"github.com/acemq/acemq-flow/test/testenv"
)

// sagaFlow is a saga of two steps, a and b, with in-process handlers: each
// step a hop (consume, call, publish the next step's message or the
// instance's reply, acknowledge) plus the instance's state in the store.
const sagaFlow = `version: acemq.flow/v1
name: sagabench
defaults: {prefetch: PREFETCH, concurrency: CONC}
plugins:
  bench: {command: ./none}
types:
  Order: {type: object}
sagas:
  - name: SAGA
    input: Order
    steps:
      - {name: a, handler: bench.step}
      - {name: b, handler: bench.step}
`

// sagaConcurrency is each saga step's handlers at once
// (ACEMQ_BENCH_SAGA_CONCURRENCY, 32): a step waits on the store four times
// (claim, read, advance, confirm), so it needs many in flight.
var sagaConcurrency = func() int {
	if n, err := strconv.Atoi(os.Getenv("ACEMQ_BENCH_SAGA_CONCURRENCY")); err == nil && n > 0 {
		return n
	}
	return 32
}()

// sagaInstances is how many instances a saga-step run starts
// (ACEMQ_BENCH_SAGAS; ACEMQ_BENCH_MESSAGES / 20, 1,000, by default): a run
// of seconds, as the raw hop's.
func sagaInstances() int {
	if n, err := strconv.Atoi(os.Getenv("ACEMQ_BENCH_SAGAS")); err == nil && n > 0 {
		return n
	}
	return max(messages/20, 100)
}

// sagaStoreURL is the store of the saga-step runs: ACEMQ_BENCH_SAGA_STORE
// when set (memory:, or a postgres:// URL of your own, to compare), else a
// PostgreSQL schema of the bench's own, its URL's query extended with
// ACEMQ_BENCH_SAGA_STORE_PARAMS (pool_max_conns=4, to compare pool sizes).
func sagaStoreURL(b *testing.B) string {
	if u := os.Getenv("ACEMQ_BENCH_SAGA_STORE"); u != "" {
		return u
	}
	if os.Getenv(testenv.PostgresEnv) == "" {
		b.Skip("saga-step runs on PostgreSQL: set " + testenv.PostgresEnv + " (make services)")
	}
	u := testenv.PostgresSchema(b)
	if p := os.Getenv("ACEMQ_BENCH_SAGA_STORE_PARAMS"); p != "" {
		u += "&" + p
	}
	return u
}

// sagaRun starts n instances of a two-step saga and measures the steps
// they take per second: the start messages are put in step a's queue
// first, the runtime started with step a stopped, and the clock runs from
// step a's start until the n replies (one per completed instance, sent as
// the last step's publish) are in a queue.
func sagaRun(b *testing.B, url, saga string, store stores.Set, n int) float64 {
	flow := sagaFlow
	for k, v := range map[string]string{"SAGA": saga, "CONC": fmt.Sprint(sagaConcurrency), "PREFETCH": fmt.Sprint(max(prefetch/sagaConcurrency, 16))} {
		flow = strings.ReplaceAll(flow, k, v)
	}
	pl := compileFlow(b, flow)
	first := plan.SagaStepConsumerID(saga, "a")
	for i := range pl.Consumers {
		if pl.Consumers[i].ID == first {
			pl.Consumers[i].AutoStartup = false
		}
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	declare(b, ch, pl)
	done := saga + ".done"
	quorum(b, ch, done)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	// 1 KiB of input, as the raw hop's body: every step's message carries it.
	payload := []byte(`{"pad":"` + strings.Repeat("x", len(body)-10) + `"}`)
	var pending []*amqp.DeferredConfirmation
	for range n {
		m, err := decide.FirstMessage(pl, decide.Target{Saga: saga}, payload, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		m.ReplyTo = done
		p := wire.Publishing(m)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), p.Exchange, p.RoutingKey, true, false, p.Publishing)
		if err != nil {
			b.Fatal(err)
		}
		if pending = append(pending, dc); len(pending) == 512 {
			for _, p := range pending {
				p.Wait()
			}
			pending = pending[:0]
		}
	}
	for _, p := range pending {
		p.Wait()
	}
	rt, ctx, stop := runRuntime(b, pl, runtime.Options{AMQPURL: url, Store: store, Sagas: store,
		Handlers: map[string]runtime.HandlerFunc{"bench.step": func(context.Context, runtime.Request) (decide.Result, error) {
			return decide.Result{Payload: []byte(`{}`)}, nil
		}}})
	if err := rt.Start(ctx, first); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	end := waitDepth(b, ch, done, n, 5*time.Minute)
	stop()
	for _, q := range pl.Queues {
		drop(b, ch, q.Name)
	}
	drop(b, ch, done)
	return float64(2*n) / end.Sub(start).Seconds()
}

// splitSagas is the bench's store with its saga consumers' claims, reads,
// advances and confirms each a round trip of its own (four waits on the
// store a step), as they were before the claim read the instance: it
// hides stores.SagaClaims and keeps the batch forms the saga consumers
// coalesce with.
type splitSagas struct {
	stores.Set
	batch interface {
		GetSagaBatch(ctx context.Context, ids []string) ([]stores.SagaInstance, error)
		AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]error, error)
		CreateSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]stores.SagaInstance, []bool, error)
	}
}

func (s splitSagas) GetSagaBatch(ctx context.Context, ids []string) ([]stores.SagaInstance, error) {
	return s.batch.GetSagaBatch(ctx, ids)
}

func (s splitSagas) AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]error, error) {
	return s.batch.AdvanceSagaBatch(ctx, insts)
}

func (s splitSagas) CreateSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]stores.SagaInstance, []bool, error) {
	return s.batch.CreateSagaBatch(ctx, insts)
}

// BenchmarkSaga prints saga-step: the steps per second of a two-step saga
// on PostgreSQL (each step its claim with the instance's read, its advance,
// a publish and the claim's confirm), 1,000 instances a run
// (sagaInstances) of 1 KiB inputs, each step's handlers 32 at once
// (ACEMQ_BENCH_SAGA_CONCURRENCY), against hop-raw on fresh queues just
// before it, moving ACEMQ_BENCH_MESSAGES: medians of five rounds after a
// warm-up round. In each round it also runs saga-step-split, the same saga
// with the four round trips apart (splitSagas), in turn first and second,
// so that the two compare under the same conditions. ACEMQ_BENCH_ONLY=saga
// runs it alone.
func BenchmarkSaga(b *testing.B) {
	if only := os.Getenv("ACEMQ_BENCH_ONLY"); only != "" && only != "saga" {
		b.Skip("ACEMQ_BENCH_ONLY=" + only)
	}
	storeURL := sagaStoreURL(b)
	url := testenv.VHost(b)
	st, err := storeurl.Open(context.Background(), storeURL, stores.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	instances := sagaInstances()
	var split stores.Set
	if b4, ok := st.(interface {
		GetSagaBatch(ctx context.Context, ids []string) ([]stores.SagaInstance, error)
		AdvanceSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]error, error)
		CreateSagaBatch(ctx context.Context, insts []stores.SagaInstance) ([]stores.SagaInstance, []bool, error)
	}); ok {
		split = splitSagas{Set: st, batch: b4}
	}
	var raw []float64
	f, fs := &figure{}, &figure{}
	for r := range rounds + 1 {
		warm := r == 0
		src, dst := fmt.Sprintf("sagaraw%d.src", r), fmt.Sprintf("sagaraw%d.dst", r)
		quorum(b, ch, src)
		quorum(b, ch, dst)
		fill(b, ch, "", src, messages)
		rv := rawHop(b, url, src, dst, messages, false)
		drop(b, ch, src)
		drop(b, ch, dst)
		// The split run goes second in even rounds and first in odd ones.
		var v, vs float64
		runSplit := func() {
			if split != nil {
				vs = sagaRun(b, url, fmt.Sprintf("sagasplit%d", r), split, instances)
			}
		}
		if r%2 == 1 {
			runSplit()
		}
		v = sagaRun(b, url, fmt.Sprintf("saga%d", r), st, instances)
		if r%2 == 0 {
			runSplit()
		}
		if verbose {
			fmt.Printf("bench: round %d saga-step %.0f steps/s raw=%.0f ratio=%.2f saga-step-split %.0f ratio=%.2f warm-up=%v\n", r, v, rv, v/rv, vs, vs/rv, warm)
		}
		if warm {
			continue
		}
		raw = append(raw, rv)
		f.values = append(f.values, v)
		f.ratios = append(f.ratios, v/rv)
		fs.values = append(fs.values, vs)
		fs.ratios = append(fs.ratios, vs/rv)
	}
	fmt.Printf("bench: saga-step %.0f steps/s raw=%.0f ratio=%.2f spread=%.2f–%.2f\n", median(f.values), median(raw), median(f.ratios), slices.Min(f.ratios), slices.Max(f.ratios))
	if split != nil {
		fmt.Printf("bench: saga-step-split %.0f steps/s raw=%.0f ratio=%.2f spread=%.2f–%.2f\n", median(fs.values), median(raw), median(fs.ratios), slices.Min(fs.ratios), slices.Max(fs.ratios))
	}
}
