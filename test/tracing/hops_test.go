package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/relay"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/postgres"
	"github.com/acemq/acemq-flow/stores/sqlite"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// traced serves an OTLP receiver, points the OTEL_* environment at it
// (inherited by the processes the test starts) and returns the provider
// the environment configures, shut down when the test ends.
func traced(t *testing.T) (*sdktrace.TracerProvider, *receiver) {
	t.Helper()
	rc := &receiver{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "acemq-flow-tracing-test")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tp, err := tracing.FromEnv(t.Context(), "test")
	if err != nil || tp == nil {
		t.Fatalf("tracing.FromEnv with OTEL_EXPORTER_OTLP_ENDPOINT set = %v, %v; want a provider", tp, err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rc
}

// await returns the spans received once ready says they are all there
// (its error says what is missing), failing the test after 60s.
func await(t *testing.T, tp *sdktrace.TracerProvider, rc *receiver, ready func([]span) error) []span {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		_ = tp.ForceFlush(t.Context())
		spans := rc.snapshot()
		err := ready(spans)
		if err == nil {
			return spans
		}
		select {
		case <-rc.got:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("spans missing after 60s: %v\ngot:\n%s", err, dump(spans))
		}
	}
}

// where returns the spans for which ok is true.
func where(spans []span, ok func(span) bool) []span {
	var out []span
	for _, s := range spans {
		if ok(s) {
			out = append(out, s)
		}
	}
	return out
}

// counts is a ready func for await: at least n spans named name, for each.
func counts(want map[string]int) func([]span) error {
	return func(spans []span) error {
		var missing []string
		for name, n := range want {
			if got := len(named(spans, name)); got < n {
				missing = append(missing, fmt.Sprintf("%s: %d of %d", name, got, n))
			}
		}
		if len(missing) > 0 {
			return errors.New(strings.Join(missing, "; "))
		}
		return nil
	}
}

// checker reports a failed expectation with every span received.
func checker(t *testing.T, spans *[]span) func(what string, ok bool) {
	return func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s; spans:\n%s", what, dump(*spans))
		}
	}
}

// firstMessage is the first message of a run sent to target of pl.
func firstMessage(t *testing.T, pl *plan.Plan, target decide.Target, payload string) decide.Message {
	t.Helper()
	msg, err := decide.FirstMessage(pl, target, []byte(payload), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

const laterFlow = `version: acemq.flow/v1
name: later
plugins:
  k: {command: ./not-started}
pipelines:
  - name: later
    steps:
      - {name: a, handler: k.echo}
      - {name: b, handler: k.echo, delay: 1s}
`

// acemq-flow send starts the message's trace with a root producer span,
// and a delay is a link, not a parent: a step with `delay:` gets its input
// as a child of the publish that created it (step a's output, into the
// ladder) and links to the `.due` consumer's publish, under which it does
// not hang; `send --in` makes the send's span the creation context the
// same way. Every span of one send is in the sender's trace.
func TestSendStartsTheTraceAndDelaysAreLinks(t *testing.T) {
	url := testenv.VHost(t)
	tp, rc := traced(t)
	cli := testenv.GoBuild(t, "", "./cmd/acemq-flow")
	runtimetest.Start(t, url, laterFlow, runtime.Options{Tracing: tp, Delays: true,
		Handlers: map[string]runtime.HandlerFunc{"k.echo": runtimetest.Echo}})
	flows := filepath.Join(t.TempDir(), "later.yaml")
	if err := os.WriteFile(flows, []byte(laterFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(args ...string) {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"send", flows, "--pipeline", "later", "--amqp", url}, args...)...)
		cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=sender")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("acemq-flow send %v: %v\n%s", args, err, out)
		}
	}
	send("--data", `{"n":1}`)
	send("--data", `{"n":2}`, "--in", "1s")

	// Per send: its publish; a and b's deliveries; a's output into the
	// ladder; two passes through `.due` (a's output, and the --in send's
	// first message), each a delivery and a publish out of the ladder.
	spans := await(t, tp, rc, counts(map[string]int{"process later.a": 2, "process later.b": 2,
		"process " + plan.DueQueue: 3, "publish later": 3}))
	check := checker(t, &spans)
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.spanID] = s
	}
	roots := where(spans, func(s span) bool { return s.service == "sender" })
	check("each send made one span, a root producer span", len(roots) == 2 &&
		roots[0].parentID == "" && roots[1].parentID == "" && roots[0].kind == tracepb.Span_SPAN_KIND_PRODUCER)
	if len(roots) != 2 {
		return
	}
	var plain, later span // the send without --in, and the one with
	for _, r := range roots {
		switch {
		case r.name == "publish later":
			plain = r
		case strings.HasPrefix(r.name, "publish acemq.schedule."):
			later = r
		}
	}
	check("send publishes to the pipeline's exchange, send --in into the ladder", plain.spanID != "" && later.spanID != "")
	for _, root := range []span{plain, later} {
		check(fmt.Sprintf("the send %s carries the conventions' attributes", root.name), root.attrs["messaging.system"] == "rabbitmq" &&
			root.attrs["messaging.operation.type"] == "send" && root.attrs["messaging.message.id"] != "")
		mine := where(spans, func(s span) bool { return s.traceID == root.traceID })
		as := where(mine, func(s span) bool { return s.name == "process later.a" })
		bs := where(mine, func(s span) bool { return s.name == "process later.b" })
		check(fmt.Sprintf("one delivery of a and of b in the trace of %s", root.name), len(as) == 1 && len(bs) == 1)
		if len(as) != 1 || len(bs) != 1 {
			continue
		}
		a, b := as[0], bs[0]
		// a's output, addressed to b through the ladder: a new message.
		intoLadder := where(mine, func(s span) bool { return s.parentID == a.spanID && s.kind == tracepb.Span_SPAN_KIND_PRODUCER })
		check("a's output into the ladder is a producer span under a's delivery", len(intoLadder) == 1 &&
			strings.HasPrefix(intoLadder[0].name, "publish acemq.schedule."))
		if len(intoLadder) != 1 {
			continue
		}
		check("b's delivery is a child of a's output, its creation context", b.parentID == intoLadder[0].spanID)
		check("b's delivery links to the publish out of the ladder", len(b.links) == 1 && byID[b.links[0]].name == "publish later" &&
			byID[byID[b.links[0]].parentID].name == "process "+plan.DueQueue)
		check("b's delivery hangs under no span of the ladder's", byID[b.parentID].name != "process "+plan.DueQueue)
		if root.spanID == plain.spanID {
			check("a's delivery is a child of the send's span, linking to nothing", a.parentID == plain.spanID && len(a.links) == 0)
			continue
		}
		// send --in: the send's span created the message, the ladder moved it.
		check("after send --in, a's delivery is a child of the send's span", a.parentID == later.spanID)
		check("after send --in, a's delivery links to the publish out of the ladder", len(a.links) == 1 &&
			byID[a.links[0]].name == "publish later" && byID[a.links[0]].parentID != later.spanID &&
			contains(byID[a.links[0]].links, later.spanID))
	}
}

const dlqFlow = `version: acemq.flow/v1
name: dl
plugins:
  k: {command: ./not-started}
pipelines:
  - name: dl
    steps:
      - {name: a, handler: k.picky}
`

// A message dead-lettered and replayed stays in its trace: the `.dlq`
// publish is under the failed delivery and links to the message's
// creation; replay's publish is in the same trace and links to the
// dead-lettering; the replayed delivery is again a child of the creation
// context, linked to replay's publish. The first message's span is
// ops.SendTraced's, acemq-flow send's.
func TestDeadLetterAndReplayKeepTheTrace(t *testing.T) {
	url := testenv.VHost(t)
	tp, rc := traced(t)
	var failing atomic.Bool
	failing.Store(true)
	picky := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		if failing.Load() {
			return decide.Result{}, fmt.Errorf("%w: picky refuses everything for now", decide.ErrFatal)
		}
		return decide.Result{Payload: req.Payload}, nil
	}
	_, pl := runtimetest.Start(t, url, dlqFlow, runtime.Options{Tracing: tp,
		Handlers: map[string]runtime.HandlerFunc{"k.picky": picky}})
	tr := tracing.New(tp)
	msg := firstMessage(t, pl, decide.Target{Pipeline: "dl"}, `{"n":1}`)
	if _, err := ops.SendTraced(t.Context(), url, msg, 0, tr); err != nil {
		t.Fatal(err)
	}
	spans := await(t, tp, rc, counts(map[string]int{"publish dl": 1, "process dl.a": 1, "publish dl.a.dlq": 1}))
	failing.Store(false)
	sum, err := ops.Replay(t.Context(), url, ops.ReplayOptions{From: "dl.a.dlq", Tracer: tr})
	if err != nil || sum.MovedTo["dl.a"] != 1 {
		t.Fatalf("replay dl.a.dlq = %+v, %v; want the message moved to dl.a", sum, err)
	}
	spans = await(t, tp, rc, counts(map[string]int{"publish dl": 1, "process dl.a": 2, "publish dl.a.dlq": 1, "publish dl.a": 1}))
	check := checker(t, &spans)
	root := named(spans, "publish dl")[0]
	for _, s := range spans {
		check(fmt.Sprintf("span %s is in the sender's trace", s), s.traceID == root.traceID)
	}
	check("the send's span is a root", root.parentID == "" && root.kind == tracepb.Span_SPAN_KIND_PRODUCER)
	deliveries := named(spans, "process dl.a")
	var failed, replayed span
	for _, d := range deliveries {
		switch d.attrs["acemq.outcome"] {
		case "dead_lettered":
			failed = d
		case "acknowledged":
			replayed = d
		}
	}
	dlq := named(spans, "publish dl.a.dlq")[0]
	rp := named(spans, "publish dl.a")[0]
	check("the first delivery is dead-lettered, a child of the send", failed.spanID != "" && failed.parentID == root.spanID &&
		failed.status == tracepb.Status_STATUS_CODE_ERROR)
	check("the .dlq publish is under the failed delivery and links to the message's creation", dlq.parentID == failed.spanID &&
		contains(dlq.links, root.spanID))
	check("replay's publish is in the message's trace and links to the dead-lettering", rp.parentID == root.spanID &&
		contains(rp.links, dlq.spanID))
	check("the replayed delivery is a child of the message's creation and links to replay's publish", replayed.spanID != "" &&
		replayed.parentID == root.spanID && len(replayed.links) == 1 && replayed.links[0] == rp.spanID)
}

const slipSagaFlow = `version: acemq.flow/v1
name: ss
plugins:
  k: {command: ./not-started}
itineraries:
  - name: route
    stops:
      - {name: check, exchange: ss, routing_key: check}
      - {name: ship,  exchange: ss, routing_key: ship}
consumers:
  - {id: ss-check, queue: ss.check, handler: k.echo, bind: [{exchange: ss, routing_key: check}], declare: {type: quorum}}
  - {id: ss-ship,  queue: ss.ship,  handler: k.echo, bind: [{exchange: ss, routing_key: ship}], declare: {type: quorum}}
sagas:
  - name: order
    steps:
      - {name: charge, handler: k.echo, compensate: k.refund}
      - {name: book,   handler: k.book}
topology:
  exchanges:
    - {name: ss, type: topic}
`

// A routing slip's stops and a saga's steps and compensations are process
// spans with acemq.stop, and acemq.saga and acemq.saga.instance, each in
// the trace the sender started: a stop's delivery a child of the publish
// of the stop before.
func TestSlipStopsAndSagaStepsAreInTheSendersTrace(t *testing.T) {
	url := testenv.VHost(t)
	tp, rc := traced(t)
	st, err := postgres.Open(t.Context(), testenv.PostgresSchema(t), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	set, err := spec.Load(testenv.FlowFS(slipSagaFlow), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		t.Fatal(err)
	}
	book := func(context.Context, runtime.Request) (decide.Result, error) {
		return decide.Result{}, fmt.Errorf("%w: no courier today", decide.ErrFatal)
	}
	runtimetest.Run(t, url, pl, runtime.Options{Tracing: tp, Store: st, Sagas: st,
		Handlers: map[string]runtime.HandlerFunc{"k.echo": runtimetest.Echo, "k.refund": runtimetest.Echo, "k.book": book}})
	tr := tracing.New(tp)

	ctx, client := tp.Tracer("client").Start(t.Context(), "client", trace.WithSpanKind(trace.SpanKindInternal))
	slipMsg := firstMessage(t, pl, decide.Target{Itinerary: "route"}, `{"n":1}`)
	if _, err := ops.SendTraced(ctx, url, slipMsg, 60*time.Second, tr); err != nil {
		t.Fatalf("send --itinerary route: %v", err)
	}
	sagaMsg := firstMessage(t, pl, decide.Target{Saga: "order"}, `{"n":2}`)
	if reply, err := ops.SendTraced(ctx, url, sagaMsg, 60*time.Second, tr); err != nil || reply.Outcome != decide.SagaCompensated {
		t.Fatalf("send --saga order = %+v, %v; want it compensated", reply, err)
	}
	client.End()
	traceID := client.SpanContext().TraceID().String()

	sagaSpans := func(spans []span) []span {
		return where(spans, func(s span) bool { return strings.HasPrefix(s.name, "process ") && s.attrs["acemq.saga"] == "order" })
	}
	spans := await(t, tp, rc, func(spans []span) error {
		if err := counts(map[string]int{"client": 1, "process ss.check": 1, "process ss.ship": 1})(spans); err != nil {
			return err
		}
		// charge, book, and charge's compensation.
		if n := len(sagaSpans(spans)); n < 3 {
			return fmt.Errorf("%d process spans of saga order, want 3 at least", n)
		}
		return nil
	})
	check := checker(t, &spans)
	for _, s := range spans {
		check(fmt.Sprintf("span %s is in the client's trace", s), s.traceID == traceID)
	}
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.spanID] = s
	}
	stopCheck, stopShip := named(spans, "process ss.check")[0], named(spans, "process ss.ship")[0]
	check("the slip's first stop says which it is", stopCheck.attrs["acemq.stop"] == "check" && stopCheck.attrs["acemq.consumer"] == "ss-check")
	check("the slip's second stop says which it is", stopShip.attrs["acemq.stop"] == "ship" && stopShip.attrs["acemq.consumer"] == "ss-ship")
	check("the first stop's delivery is a child of the send", byID[stopCheck.parentID].name == "publish ss" &&
		byID[byID[stopCheck.parentID].parentID].name == "client")
	check("the second stop's delivery is a child of the first stop's publish", byID[byID[stopShip.parentID].parentID].spanID == stopCheck.spanID)

	steps := sagaSpans(spans)
	instance := steps[0].attrs["acemq.saga.instance"]
	var compensations int
	for _, s := range steps {
		check(fmt.Sprintf("%s names the saga's instance", s), instance != "" && s.attrs["acemq.saga.instance"] == instance)
		if s.name == "process order.charge.compensate" {
			compensations++
			check("the compensation is a child of the publish of the step that failed", byID[byID[s.parentID].parentID].name == "process order.book")
			check("the compensation names the step it undoes", s.attrs["acemq.step"] == "charge" && s.attrs["acemq.outcome"] == "acknowledged")
		}
	}
	check("charge's compensation is one of the saga's process spans", compensations == 1)
	check("the saga's first step is a child of the send", len(named(spans, "process order.charge")) == 1 &&
		byID[byID[named(spans, "process order.charge")[0].parentID].parentID].name == "client")
}

const relayFlow = `version: acemq.flow/v1
name: rs
plugins:
  k: {command: ./not-started}
pipelines:
  - name: rs
    steps:
      - {name: a, handler: k.echo}
schedules:
  - {name: tick, every: 1s, send: {exchange: rs, routing_key: a, payload: {n: 0}}}
`

// Across the outbox relay's batch and a schedule's tick, a link: the
// relay's publish is not a child of the context an outbox row was written
// in but links to it, and the message keeps it, so that the step's
// delivery is a child of the writer's span (and links to the relay's
// publish); each firing of a schedule is the root span of a trace of its
// own, the creation context of its message.
func TestRelayAndScheduleTicksAreLinks(t *testing.T) {
	url := testenv.VHost(t)
	tp, rc := traced(t)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "acemq.db"), stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	runtimetest.Start(t, url, relayFlow, runtime.Options{Tracing: tp, Schedules: st,
		Handlers: map[string]runtime.HandlerFunc{"k.echo": runtimetest.Echo}})
	ctx, cancel := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() {
		relayed <- relay.Run(ctx, url, st, relay.Options{Poll: 20 * time.Millisecond, Tracer: tracing.New(tp)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-relayed; err != nil {
			t.Errorf("relay.Run = %v after shutdown, want nil", err)
		}
	})

	// A writer's transaction, in a span of the writer's.
	wctx, writer := tp.Tracer("writer").Start(t.Context(), "write order", trace.WithSpanKind(trace.SpanKindInternal))
	tx, err := st.DB().BeginTx(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Outbox().Add(wctx, tx, stores.OutboxRecord{Exchange: "rs", RoutingKey: "a", Body: []byte(`{"n":1}`),
		ContentType: "application/json", Properties: stores.Properties{MessageID: "w-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	writer.End()

	spans := await(t, tp, rc, func(spans []span) error {
		if err := counts(map[string]int{"write order": 1, "schedule rs/tick": 2, "process rs.a": 3, "publish rs": 3})(spans); err != nil {
			return err
		}
		// Two firings' deliveries, and the writer's.
		fired := where(spans, func(s span) bool { return s.name == "schedule rs/tick" && s.attrs["acemq.outcome"] == "fired" })
		var done int
		for _, f := range fired {
			done += len(where(spans, func(s span) bool { return s.name == "process rs.a" && s.parentID == f.spanID }))
		}
		if done < 2 {
			return fmt.Errorf("%d firings' deliveries of 2", done)
		}
		return nil
	})
	check := checker(t, &spans)
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.spanID] = s
	}
	w := named(spans, "write order")[0]
	var fromWriter []span
	for _, p := range named(spans, "publish rs") {
		check(fmt.Sprintf("the relay's publish %s is the root of a trace of its own, with its record's id", p),
			p.parentID == "" && p.attrs["acemq.outbox.id"] != "" && p.attrs["acemq.outbox.id"] != "0" && len(p.links) == 1)
		if len(p.links) == 1 && p.links[0] == w.spanID {
			fromWriter = append(fromWriter, p)
		}
	}
	check("one relay publish links to the writer's span", len(fromWriter) == 1)
	ws := where(spans, func(s span) bool { return s.name == "process rs.a" && s.parentID == w.spanID })
	check("the step's delivery of the written record is a child of the writer's span", len(ws) == 1 && ws[0].traceID == w.traceID)
	if len(ws) == 1 && len(fromWriter) == 1 {
		check("and links to the relay's publish", len(ws[0].links) == 1 && ws[0].links[0] == fromWriter[0].spanID)
	}
	fired := where(spans, func(s span) bool { return s.name == "schedule rs/tick" && s.attrs["acemq.outcome"] == "fired" })
	traces := map[string]bool{}
	for _, f := range fired {
		traces[f.traceID] = true
		check(fmt.Sprintf("the firing %s is a root producer span naming its schedule and tick", f), f.parentID == "" &&
			f.kind == tracepb.Span_SPAN_KIND_PRODUCER && f.attrs["acemq.schedule"] == "tick" && f.attrs["acemq.schedule.tick"] != "" &&
			f.attrs["messaging.operation.type"] == "create" && f.attrs["messaging.destination.name"] == "rs")
		for _, d := range where(spans, func(s span) bool { return s.name == "process rs.a" && s.parentID == f.spanID }) {
			check("a firing's delivery links to the relay's publish, which links to the firing", len(d.links) == 1 &&
				byID[d.links[0]].name == "publish rs" && contains(byID[d.links[0]].links, f.spanID))
		}
	}
	check("each firing is a trace of its own", len(traces) == len(fired) && !traces[w.traceID])
}
