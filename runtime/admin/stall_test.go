package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
	"github.com/chromedp/chromedp"
)

// stallFlow has a pipeline whose handler the test holds and one that is
// given nothing to do.
const stallFlow = `version: acemq.flow/v1
name: stall
plugins:
  k: {command: ./not-started}
pipelines:
  - name: held
    steps:
      - {name: wait, handler: k.wait}
  - name: idle
    steps:
      - {name: rest, handler: k.echo}
`

// TestReadyzNamesAStalledConsumer runs a flow on the broker whose handler
// blocks until the test lets it go, with a stall duration of 2 s: while the
// handler holds its delivery past it, /readyz answers 503 naming the
// consumer, its queue and for how long, and /v1/status, /v1/consumers and
// the status page's /v1/flows show it stalled; the consumer with nothing to
// do, idle all along, is never stalled; once the handler returns and its
// delivery is acknowledged, the runtime is ready again.
func TestReadyzNamesAStalledConsumer(t *testing.T) {
	const stallAfter = 2 * time.Second
	url := testenv.VHost(t)
	entered := make(chan time.Time, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	logs := &testenv.Buffer{}
	rt, pl := runtimetest.Start(t, url, stallFlow, runtime.Options{StallAfter: stallAfter, Log: slog.New(slog.NewTextHandler(logs, nil)), Handlers: map[string]runtime.HandlerFunc{
		"k.echo": runtimetest.Echo,
		"k.wait": func(ctx context.Context, req runtime.Request) (decide.Result, error) {
			entered <- time.Now()
			select {
			case <-release:
			case <-ctx.Done():
			}
			return decide.Result{Payload: req.Payload}, nil
		},
	}})
	t.Cleanup(let) // before the runtime drains: cleanups run last first
	addr := runtimetest.AdminWith(t, admin.Options{Token: "tk", Runtime: rt, Plan: pl, Metrics: rt.Metrics()})
	base := "http://" + addr

	// Ready once started: nothing is held, however long the consumers idle.
	testenv.Eventually(t, 30*time.Second, func() error {
		if resp, body := fetch(t, "GET", base+"/readyz", ""); resp.StatusCode != http.StatusOK {
			return testenv.Errorf("/readyz after the start = %d %q, want 200", resp.StatusCode, body)
		}
		return nil
	})

	ch := testenv.ConfirmedChannel(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := decide.FirstMessage(pl, decide.Target{Pipeline: "held"}, []byte(`{"n":1}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := wire.Publishing(m)
	sent := time.Now() // the group cannot hold the delivery before
	c, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.Exchange, p.RoutingKey, true, false, p.Publishing)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish to held: not confirmed (%v)", err)
	}
	var since time.Time
	select {
	case since = <-entered:
	case <-ctx.Done():
		t.Fatal("the held handler was not called within 30 s of the publish")
	}

	// Not ready once the delivery has been held past the stall duration,
	// and not before.
	var body string
	testenv.Eventually(t, 30*time.Second, func() error {
		var resp *http.Response
		resp, body = fetch(t, "GET", base+"/readyz", "")
		if resp.StatusCode != http.StatusServiceUnavailable {
			if time.Since(since) > 5*stallAfter {
				return testenv.Errorf("/readyz %s after the handler took the delivery = %d %q, want 503 naming the stalled consumer", time.Since(since).Round(time.Millisecond), resp.StatusCode, body)
			}
			return testenv.Errorf("still ready")
		}
		return nil
	})
	if held := time.Since(sent); held < stallAfter {
		t.Errorf("/readyz went 503 %s after the delivery was published, before the stall duration of %s: %q", held, stallAfter, body)
	}
	for _, want := range []string{`consumer "held.wait" on queue "held.wait" is stalled`, "holds 1 delivery and has finished none for "} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz while held.wait is stalled = %q, want it to say %q", body, want)
		}
	}
	t.Logf("/readyz while held.wait is stalled: %s", body)
	if strings.Contains(body, "idle.rest") {
		t.Errorf("/readyz names the idle consumer: %q", body)
	}

	resp, sbody := fetch(t, "GET", base+"/v1/status", "tk")
	var st admin.Status
	if err := json.Unmarshal([]byte(sbody), &st); resp.StatusCode != 200 || err != nil {
		t.Fatalf("/v1/status = %d (%v):\n%s", resp.StatusCode, err, sbody)
	}
	if st.Ready || len(st.Stalled) != 1 || st.Stalled[0].Consumer != "held.wait" || st.Stalled[0].Queue != "held.wait" || st.Stalled[0].Held != 1 || st.Stalled[0].After != stallAfter.String() {
		t.Errorf("/v1/status while held.wait is stalled = %s, want not ready and held.wait alone stalled, holding 1", sbody)
	}
	// The group began to hold the delivery after its publish and before
	// the handler took it.
	if len(st.Stalled) == 1 && (st.Stalled[0].Since.After(since) || st.Stalled[0].Since.Before(sent)) {
		t.Errorf("/v1/status: held.wait stalled since %s, want between the publish at %s and the handler taking it at %s", st.Stalled[0].Since, sent, since)
	}

	resp, fbody := fetch(t, "GET", base+"/v1/flows", "")
	var fv admin.FlowsView
	if err := json.Unmarshal([]byte(fbody), &fv); resp.StatusCode != 200 || err != nil {
		t.Fatalf("/v1/flows = %d (%v):\n%s", resp.StatusCode, err, fbody)
	}
	seen := map[string]*runtime.Stall{}
	for _, c := range fv.Consumers {
		seen[c.ID] = c.Stalled
	}
	if s, ok := seen["held.wait"]; !ok || s == nil || s.Held != 1 {
		t.Errorf("/v1/flows: held.wait stalled = %+v, want it stalled holding 1:\n%s", s, fbody)
	}
	if s, ok := seen["idle.rest"]; !ok || s != nil {
		t.Errorf("/v1/flows: idle.rest (listed %v) stalled = %+v, want it listed and not stalled", ok, s)
	}
	if fv.Ready || !strings.Contains(strings.Join(fv.Why, "; "), `consumer "held.wait" on queue "held.wait" is stalled`) {
		t.Errorf("/v1/flows: ready %v, why %q; want not ready naming held.wait", fv.Ready, fv.Why)
	}
	cs, err := rt.Consumer(ctx, "held.wait")
	if err != nil || cs.Stalled == nil {
		t.Errorf("the registry's held.wait = %+v (%v), want it stalled", cs, err)
	}
	_, metrics := fetch(t, "GET", base+"/metrics", "tk")
	for _, want := range []string{`acemq_consumer_stalled{consumer="held.wait",queue="held.wait"} 1`, `acemq_consumer_stalled{consumer="idle.rest",queue="idle.rest"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics while held.wait is stalled lacks %s", want)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), `level=ERROR msg="consumer stalled`) || !strings.Contains(logs.String(), "consumer=held.wait queue=held.wait held=1") {
			return testenv.Errorf("the log does not say held.wait stalled:\n%s", logs.String())
		}
		return nil
	})

	// Released, the delivery is acknowledged: ready again, nothing stalled.
	let()
	testenv.Eventually(t, 30*time.Second, func() error {
		if resp, body := fetch(t, "GET", base+"/readyz", ""); resp.StatusCode != http.StatusOK {
			return testenv.Errorf("/readyz after the handler returned = %d %q, want 200", resp.StatusCode, body)
		}
		return nil
	})
	if cs, err := rt.Consumer(ctx, "held.wait"); err != nil || cs.Stalled != nil || cs.Counters[decide.OutcomeAcknowledged] != 1 || cs.InFlight != 0 {
		t.Errorf("held.wait once released = %+v (%v), want 1 acknowledged, none in flight, not stalled", cs, err)
	}
	if ss := rt.Stalls(); len(ss) != 0 {
		t.Errorf("Stalls once released = %+v, want none", ss)
	}
	if _, metrics := fetch(t, "GET", base+"/metrics", "tk"); !strings.Contains(metrics, `acemq_consumer_stalled{consumer="held.wait",queue="held.wait"} 0`) {
		t.Errorf("/metrics once released does not say held.wait is not stalled")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), `msg="consumer no longer stalled" consumer=held.wait`) {
			return testenv.Errorf("the log does not say held.wait is no longer stalled:\n%s", logs.String())
		}
		return nil
	})
	if strings.Contains(logs.String(), "consumer=idle.rest queue=idle.rest held=") {
		t.Errorf("the log says the idle consumer stalled:\n%s", logs.String())
	}
}

// stalledPageRuntime is a runtime one of whose groups is stalled.
type stalledPageRuntime struct {
	pageRuntime
	stalls []runtime.Stall
}

func (r *stalledPageRuntime) Ready() bool             { return false }
func (r *stalledPageRuntime) Stalls() []runtime.Stall { return r.stalls }

// TestStatusPageShowsAStalledConsumerInChromium opens the status page of a
// runtime whose take-payment group is stalled: its state reads stalled,
// with how many deliveries it holds and since when, its node is marked,
// and the header says not ready, naming it.
func TestStatusPageShowsAStalledConsumerInChromium(t *testing.T) {
	browser := chromium(t)
	pl := loadPlan(t, "../../examples/flows", "place-order.yaml")
	since := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	stall := runtime.Stall{Consumer: "place-order.take-payment", Queue: "place-order.take-payment", Held: 200, Since: since.Add(123456789 * time.Nanosecond), For: "3m0s", After: "1m30s"}
	depth := 0
	rt := &stalledPageRuntime{pageRuntime: pageRuntime{consumers: []runtime.ConsumerStatus{
		{ID: "place-order.take-payment", Kind: "saga-step", State: "running", Queue: "place-order.take-payment", Depth: &depth, Size: 1, InFlight: 200, Counters: map[string]int64{}, Stalled: &stall},
		{ID: "place-order.book-courier", Kind: "saga-step", State: "running", Queue: "place-order.book-courier", Depth: &depth, Size: 1, Counters: map[string]int64{}},
	}}, stalls: []runtime.Stall{stall}}
	addr := runtimetest.AdminWith(t, admin.Options{Token: "tk-never-given", Runtime: rt, Plan: pl})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("open the status page at http://%s/ in %s: %v", addr, browser, err)
	}
	text := func(sel string) string {
		t.Helper()
		var got string
		testenv.Eventually(t, 30*time.Second, func() error {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			s, err := chromedp.Run(qctx, chromedp.Text(chromedp.CSS(sel)))
			got = strings.TrimSpace(s)
			if err != nil || got == "" || got == "–" || got == "connecting…" {
				return testenv.Errorf("the page shows %q at %s (%v)", got, sel, err)
			}
			return nil
		})
		return got
	}
	if got, want := text(`td[data-consumer="place-order.take-payment"][data-field="state"]`), "stalled: 200 held, none finished since 2026-12-03T08:00:00Z"; got != want {
		t.Errorf("take-payment's state on the page = %q, want %q", got, want)
	}
	if got := text(`td[data-consumer="place-order.book-courier"][data-field="state"]`); got != "running" {
		t.Errorf("book-courier's state on the page = %q, want running", got)
	}
	if got := text("#ready"); got != "not ready" {
		t.Errorf("the page's readiness = %q, want not ready", got)
	}
	if got := text("#why"); !strings.Contains(got, `consumer "place-order.take-payment" on queue "place-order.take-payment" is stalled: it holds 200 deliveries and has finished none for 3m0s (since 2026-12-03T08:00:00Z; stalled after 1m30s)`) {
		t.Errorf("the page's why = %q, want it to name the stalled consumer", got)
	}
	marked, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg rect.stalled").length`))
	if err != nil || marked != 1 {
		t.Errorf("stalled nodes drawn = %v (%v), want 1", marked, err)
	}
}
