package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/wire"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// pageFlow is a two-step pipeline whose second step dead-letters an order
// marked bad.
const pageFlow = `version: acemq.flow/v1
name: shop
plugins:
  k: {command: ./not-started}
pipelines:
  - name: orders
    steps:
      - {name: check, handler: k.echo}
      - {name: charge, handler: k.charge, concurrency: 2}
`

// chromium finds Debian's headless Chromium (make services installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("chromium is not installed: make services installs it (apt-get install chromium); the status page is not tested in a browser")
	return ""
}

// TestStatusPageInChromium runs a flow with its admin API (behind a token
// the page is never given) and opens the status page in headless
// Chromium: the pipeline is drawn with its steps' live numbers, which
// change as orders are sent (the page polls every 2 s); a dead-lettered
// order shows up as a group by step and error, and its first message's
// preview is shown without the message leaving its `.dlq`. A screenshot of
// the page is kept as the test's artifact ($ACEMQ_ARTIFACTS, or the test's
// artifact directory: go test -artifacts keeps it).
func TestStatusPageInChromium(t *testing.T) {
	browser := chromium(t)
	url := testenv.VHost(t)
	rt, pl := runtimetest.Start(t, url, pageFlow, runtime.Options{Delays: true, Handlers: map[string]runtime.HandlerFunc{
		"k.echo": echo,
		"k.charge": func(ctx context.Context, req runtime.Request) (decide.Result, error) {
			if bytes.Contains(req.Payload, []byte(`"bad":true`)) {
				return decide.Result{}, fmt.Errorf("%w: card declined", decide.ErrFatal)
			}
			return echo(ctx, req)
		},
	}})
	addr := runtimetest.AdminWith(t, admin.Options{Token: "tk-never-given", Runtime: rt, Plan: pl, Metrics: rt.Metrics(),
		Broker: ops.StatusReads{URL: url, Plan: pl}})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 1100))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	const acked = `td[data-consumer="orders.charge"][data-field="acknowledged"]`
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("open the status page at http://%s/ in %s: %v", addr, browser, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(acked)))
	wcancel()
	if err != nil {
		dom, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("the status page at http://%s/ shows no numbers for orders.charge within a minute (%v); it shows:\n%s", addr, err, dom)
	}
	text := func(sel string) (string, error) {
		// A selector nothing matches waits: not longer than 10 s.
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(qctx, chromedp.Text(chromedp.CSS(sel)))
		return strings.TrimSpace(s), err
	}
	waitText := func(what, sel, want string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() error {
			got, err := text(sel)
			if err != nil {
				return err
			}
			if got != want {
				return testenv.Errorf("the page shows %s = %q, want %q", what, got, want)
			}
			return nil
		})
	}
	// The first answer drew the numbers: nothing settled yet.
	waitText("orders.charge acknowledged before any order", acked, "0")
	for _, want := range []string{"check", "k.echo", "charge", "k.charge"} {
		svgText, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`[data-cluster] svg`)))
		if err != nil || !strings.Contains(svgText, want) {
			t.Errorf("the drawn flow lacks %q (%v): %q", want, err, svgText)
		}
	}

	ch := testenv.ConfirmedChannel(t, url)
	send := func(payload string) string {
		t.Helper()
		m, err := decide.FirstMessage(pl, decide.Target{Pipeline: "orders"}, []byte(payload), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p := wire.Publishing(m)
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.Exchange, p.RoutingKey, true, false, p.Publishing)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish %s: not confirmed (%v)", payload, err)
		}
		return m.MessageID
	}
	for i := range 5 {
		send(fmt.Sprintf(`{"order":%d}`, i))
	}
	send(`{"order":99,"bad":true,"note":"declined at the till"}`)

	// The live numbers change without a reload.
	waitText("orders.charge acknowledged after 5 good orders", acked, "5")
	waitText("orders.check acknowledged after 6 orders", `td[data-consumer="orders.check"][data-field="acknowledged"]`, "6")
	waitText("orders.charge dead-lettered", `td[data-consumer="orders.charge"][data-field="dead_lettered"]`, "1")
	waitText("orders.charge consumers", `td[data-consumer="orders.charge"][data-field="size"]`, "2")

	// The dead letter, grouped by step and error, and its preview.
	waitText("the dead-letter group's count", `tr[data-group] td[data-field="count"]`, "1")
	errText, err := text(`tr[data-group] td[data-field="error"]`)
	if err != nil || !strings.Contains(errText, "card declined") {
		t.Errorf("the dead-letter group's error = %q (%v), want the handler's card declined", errText, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-group]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-first] [data-message] pre`))); err != nil {
		t.Fatalf("show the group's first messages: %v", err)
	}
	preview, err := text(`[data-first] [data-message] pre`)
	if err != nil || !strings.Contains(preview, `"note":"declined at the till"`) {
		t.Errorf("the first message's preview = %q (%v), want the dead-lettered order's payload", preview, err)
	}
	// Looking did not take it: the .dlq still holds it (ready again once
	// the page's read, every 5 s, has put it back).
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := queueDepth(t, url, plan.DeadLetterQueue("orders.charge")); n != 1 {
			return testenv.Errorf("orders.charge.dlq holds %d ready messages after the page looked, want 1", n)
		}
		return nil
	})
	// Delays and schedules answer too (no store: no schedules, no sagas).
	waitText("the schedules section", `#schedules p`, "the runtime's flows have no schedules")
	summary, err := text(`[data-field="delays-summary"]`)
	if err != nil || !strings.Contains(summary, "waiting in the levels") {
		t.Errorf("the delay ladder's summary = %q (%v)", summary, err)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("ACEMQ_ARTIFACTS")
	if dir == "" {
		dir = t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "status-page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(shot, []byte("\x89PNG")) {
		t.Errorf("the screenshot at %s is not a PNG", path)
	}
	t.Logf("screenshot of the status page: %s", path)
}

// queueDepth asks the broker how many messages queue holds.
func queueDepth(t *testing.T, url, queue string) int {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	return q.Messages
}
