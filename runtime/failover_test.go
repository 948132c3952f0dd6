package runtime_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/test/reliability/harness"
	"github.com/acemq/acemq-flow/test/runtimetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// TestRuntimeFollowsItsBrokerURLs runs a consumer given two broker URLs,
// two fault proxies in front of the broker standing for two nodes. Under a
// steady publish the first is cut: the runtime follows to the second. Then
// both are cut: the runtime is not ready while no node answers, and ready
// again, on the first, once that one is back. Every message the broker
// confirmed is handled.
func TestRuntimeFollowsItsBrokerURLs(t *testing.T) {
	vhURL := testenv.VHost(t)
	base, _ := url.Parse(vhURL)
	var proxies []*harness.Proxy
	var urls []string
	for range 2 {
		p, err := harness.Listen(base.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies = append(proxies, p)
		u := *base
		u.Host = p.Addr()
		urls = append(urls, u.String())
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	record := func(_ context.Context, req runtime.Request) (decide.Result, error) {
		mu.Lock()
		handled[req.Envelope.MessageID] = true
		mu.Unlock()
		return decide.Result{}, nil
	}
	rt, _ := runtimetest.Start(t, urls[0], `version: acemq.flow/v1
name: failover
plugins:
  k: {command: ./not-started}
consumers:
  - {id: sink, queue: failover.q, handler: k.record, declare: {type: quorum}}
`, runtime.Options{AMQPURLs: urls[1:], Handlers: map[string]runtime.HandlerFunc{"k.record": record}})
	nodes := func() string {
		var ns []string
		for _, h := range rt.Connections() {
			ns = append(ns, h.Node)
		}
		return strings.Join(ns, ",")
	}
	on := func(p *harness.Proxy) string { return p.Addr() + "," + p.Addr() }
	if got := nodes(); got != on(proxies[0]) {
		t.Fatalf("connected to %s, want both connections on the first URL's node %s", got, proxies[0].Addr())
	}

	// The publisher goes straight to the broker: only the runtime's
	// connections pass the proxies.
	ch := testenv.ConfirmedChannel(t, vhURL)
	var sent []string
	publish := func(n int) {
		t.Helper()
		for range n {
			id := fmt.Sprintf("m-%d", len(sent))
			dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", "failover.q", true, false, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
				t.Fatalf("publish %s: confirmed %v, %v", id, ok, err)
			}
			sent = append(sent, id)
		}
	}
	waitHandled := func() {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			var lost []string
			for _, id := range sent {
				if !handled[id] {
					lost = append(lost, id)
				}
			}
			if len(lost) > 0 {
				return fmt.Errorf("%d of %d confirmed messages not handled, e.g. %v", len(lost), len(sent), lost[:min(5, len(lost))])
			}
			return nil
		})
	}
	waitReadyOn := func(p *harness.Proxy) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() error {
			if !rt.Ready() || nodes() != on(p) {
				return fmt.Errorf("ready %v on %s, want ready on %s", rt.Ready(), nodes(), p.Addr())
			}
			return nil
		})
	}
	cut := func(p *harness.Proxy) {
		p.SetMode(harness.Refuse)
		p.Reset()
	}

	publish(50)
	waitHandled()
	cut(proxies[0])
	publish(50)
	waitReadyOn(proxies[1])
	waitHandled()

	// Both cut: not ready, each connection saying why, naming the node it
	// last had.
	cut(proxies[1])
	testenv.Eventually(t, 30*time.Second, func() error {
		if rt.Ready() {
			return fmt.Errorf("ready with both nodes cut (connections on %s)", nodes())
		}
		for _, h := range rt.Connections() {
			if h.Ready() || !strings.Contains(h.Why(), "last connected to "+proxies[1].Addr()) {
				return fmt.Errorf("connection %s with no node answering: ready %v, why %q; want not ready, naming %s", h.Name, h.Ready(), h.Why(), proxies[1].Addr())
			}
		}
		return nil
	})
	publish(50)
	if rt.Ready() {
		t.Errorf("ready while both nodes refuse (connections on %s)", nodes())
	}
	proxies[0].SetMode(harness.Pass)
	waitReadyOn(proxies[0])
	waitHandled()
}
