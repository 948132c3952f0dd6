package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// vhostEnv is a test's own virtual host (deleted in t.Cleanup) with a
// Topology whose connection reads the management API at mgmt ("" derives
// it from the AMQP URL).
type vhostEnv struct {
	url   string
	vhost string
	topo  *Topology
	logs  *testenv.Buffer
}

func newVHostEnv(t *testing.T, mgmt string) *vhostEnv {
	t.Helper()
	url := testenv.VHost(t)
	e := &vhostEnv{url: url, vhost: testenv.VHostOf(url), logs: &testenv.Buffer{}}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, url, ConnOptions{Name: testenv.Names(t), Log: log, Management: mgmt})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	e.topo = NewTopology(c, log)
	t.Cleanup(func() {
		e.topo.Close()
		c.Close()
		if t.Failed() {
			t.Logf("logs:\n%s", e.logs.String())
		}
	})
	return e
}

// names lists, with rabbitmqctl, the queues or exchanges of the vhost,
// leaving out the exchanges every vhost has.
func (e *vhostEnv) names(t *testing.T, what string) []string {
	t.Helper()
	out := testenv.Rabbitmqctl(t, "list_"+what, "-p", e.vhost, "-q", "--no-table-headers", "name")
	var names []string
	for _, line := range strings.Split(out, "\n") {
		n := strings.TrimSpace(line)
		if n == "" || strings.HasPrefix(n, "amq.") {
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// closedPort returns a local address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// managementModes are the two ways a check reads drift: the management API,
// and (the API at a closed port) the broker's refusals.
func managementModes(t *testing.T) map[string]string {
	return map[string]string{
		"management": "",
		"refusals":   "http://" + closedPort(t),
	}
}

func TestCheckOnAnEmptyVHostDeclaresNothingAndNamesEverything(t *testing.T) {
	t.Parallel()
	for mode, mgmt := range managementModes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newVHostEnv(t, mgmt)
			exchanges := []Exchange{{Name: "orders", Kind: "direct", Durable: true}, {Name: "billing", Kind: "topic", Durable: true}, {Name: ""}}
			queues := []Queue{
				{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 20}},
				{Name: "orders.charge.dlq", Durable: true, Args: map[string]any{"x-queue-type": "quorum"}},
				{Name: "audit.log", Durable: true, Args: map[string]any{"x-queue-type": "classic", "x-message-ttl": 60000}},
			}
			bindings := []Binding{{Queue: "orders.charge", Exchange: "orders", RoutingKey: "charge"}, {Queue: "invoices", Exchange: "billing", RoutingKey: "#"}}

			diffs, err := e.topo.Check(t.Context(), exchanges, queues, bindings)

			var got []string
			for _, d := range diffs {
				if !d.Missing {
					t.Errorf("Check: %s %q reported as %v, want missing", d.Kind, d.Name, d)
				}
				got = append(got, d.Kind+" "+d.Name)
			}
			want := []string{"exchange orders", "exchange billing", "queue orders.charge", "queue orders.charge.dlq", "queue audit.log", "queue invoices"}
			if !slices.Equal(got, want) {
				t.Errorf("Check on an empty vhost reported %q, want %q", got, want)
			}
			var te *TopologyError
			if !errors.As(err, &te) || !errors.Is(err, ErrNotFound) || errors.Is(err, ErrDrift) {
				t.Fatalf("Check = %v, want a *TopologyError of missing things only", err)
			}
			for _, name := range []string{"orders", "billing", "orders.charge", "orders.charge.dlq", "audit.log", "invoices"} {
				if !strings.Contains(err.Error(), fmt.Sprintf("%q does not exist on the broker", name)) {
					t.Errorf("Check's error does not name %q as missing:\n%s", name, err)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(want) {
				t.Errorf("Check's error has %d sentences, want %d:\n%s", n, len(want), err)
			}
			if qs, xs := e.names(t, "queues"), e.names(t, "exchanges"); len(qs) > 0 || len(xs) > 0 {
				t.Errorf("Check declared something: queues %q, exchanges %q", qs, xs)
			}
		})
	}
}

// The case: a classic queue that the flow declares quorum, with
// other arguments besides. The broker's refusal names x-message-ttl alone;
// the check names the type first and then every argument.
func TestCheckNamesTheTypeFirstAndEveryDifferingArgument(t *testing.T) {
	t.Parallel()
	declared := Queue{Name: "orders.charge", Durable: true, Args: map[string]any{
		"x-queue-type":              "quorum",
		"x-dead-letter-exchange":    "acemq.dlx",
		"x-dead-letter-routing-key": "orders.charge.dlq",
		"x-delivery-limit":          20,
		"x-message-ttl":             2000,
		"x-overflow":                "reject-publish",
	}}
	existing := Queue{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "classic", "x-message-ttl": 1000, "x-max-length": 5}}
	all := []Setting{
		{Name: "type", Declared: "quorum", Broker: "classic"},
		{Name: "x-dead-letter-exchange", Arg: true, Declared: "acemq.dlx"},
		{Name: "x-dead-letter-routing-key", Arg: true, Declared: "orders.charge.dlq"},
		{Name: "x-delivery-limit", Arg: true, Declared: "20"},
		{Name: "x-max-length", Arg: true, Broker: "5"},
		{Name: "x-message-ttl", Arg: true, Declared: "2000", Broker: "1000"},
		{Name: "x-overflow", Arg: true, Declared: "reject-publish"},
	}
	// A classic queue ignores x-delivery-limit, so the broker never refuses
	// it: only the management API can name it.
	refused := slices.DeleteFunc(slices.Clone(all), func(s Setting) bool { return s.Name == "x-delivery-limit" })
	wants := map[string][]Setting{"management": all, "refusals": refused}
	sentences := map[string]string{
		"management": `queue "orders.charge" exists on the broker as a classic queue but the flow declares it quorum; arguments {x-dead-letter-exchange=acemq.dlx, x-dead-letter-routing-key=orders.charge.dlq, x-delivery-limit=20, x-message-ttl=2000, x-overflow=reject-publish} here, {x-max-length=5, x-message-ttl=1000} there; delete the queue or declare it as it is`,
		"refusals":   `queue "orders.charge" exists on the broker as a classic queue but the flow declares it quorum; arguments {x-dead-letter-exchange=acemq.dlx, x-dead-letter-routing-key=orders.charge.dlq, x-message-ttl=2000, x-overflow=reject-publish} here, {x-max-length=5, x-message-ttl=1000} there; delete the queue or declare it as it is`,
	}
	for mode, mgmt := range managementModes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newVHostEnv(t, mgmt)
			if err := e.topo.DeclareQueue(t.Context(), existing); err != nil {
				t.Fatal(err)
			}

			diffs, err := e.topo.Check(t.Context(), nil, []Queue{declared}, nil)
			if len(diffs) != 1 {
				t.Fatalf("Check = %+v, %v; want one difference", diffs, err)
			}
			d := diffs[0]
			if d.Kind != "queue" || d.Name != declared.Name || d.Missing || d.Refusal != "" {
				t.Errorf("Check: %+v, want drift of queue %s", d, declared.Name)
			}
			if !slices.Equal(d.Settings, wants[mode]) {
				t.Errorf("Check settings:\n got %+v\nwant %+v", d.Settings, wants[mode])
			}
			if d.Partial != (mode == "refusals") {
				t.Errorf("Check: Partial = %v in mode %s", d.Partial, mode)
			}
			if err == nil || err.Error() != sentences[mode] || !errors.Is(err, ErrDrift) || errors.Is(err, ErrNotFound) {
				t.Errorf("Check error:\n got %v\nwant %s", err, sentences[mode])
			}

			// Declaring it gives the same names, where the refusal alone
			// named one argument.
			err = e.topo.DeclareQueue(t.Context(), declared)
			var de *DriftError
			if !errors.As(err, &de) || !slices.Equal(de.Settings, wants[mode]) || err.Error() != sentences[mode] {
				t.Errorf("DeclareQueue over the classic queue:\n got %v\nwant %s", err, sentences[mode])
			}
			if de != nil && !strings.Contains(de.Reason, "inequivalent arg") {
				t.Errorf("DriftError.Reason = %q, want the broker's reply", de.Reason)
			}

			// Nothing changed: the queue is as it was declared first.
			if diffs, err := e.topo.Check(t.Context(), nil, []Queue{existing}, nil); len(diffs) > 0 || err != nil {
				t.Errorf("Check(the queue as it was declared) = %+v, %v; want no difference", diffs, err)
			}
			if qs := e.names(t, "queues"); !slices.Equal(qs, []string{declared.Name}) {
				t.Errorf("queues after the checks: %q, want only %s", qs, declared.Name)
			}
		})
	}
}

// Differences the broker does not compare, and bindings, are seen only
// through the management API: with it answering, each one is reported.
func TestCheckThroughManagementReportsWhatRefusalsCannot(t *testing.T) {
	t.Parallel()
	e := newVHostEnv(t, "")
	ctx := t.Context()
	if err := e.topo.Declare(ctx,
		[]Exchange{{Name: "orders", Kind: "direct", Durable: true, Args: map[string]any{"alternate-exchange": "orders.unrouted"}}},
		[]Queue{
			{Name: "audit.log", Durable: true, Args: map[string]any{"x-queue-type": "classic", "x-message-ttl": 1000, "x-custom": "a"}},
			{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "quorum"}},
		},
		[]Binding{{Queue: "orders.charge", Exchange: "orders", RoutingKey: "charge"}},
	); err != nil {
		t.Fatal(err)
	}
	queues := []Queue{
		// The broker compares neither an argument it does not know nor,
		// on a classic queue, x-delivery-limit.
		{Name: "audit.log", Durable: true, Args: map[string]any{"x-queue-type": "classic", "x-message-ttl": 1000, "x-custom": "b", "x-delivery-limit": 20}},
		{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "quorum"}},
	}
	diffs, err := e.topo.Check(ctx,
		[]Exchange{{Name: "orders", Kind: "direct", Durable: true, Args: map[string]any{"alternate-exchange": "orders.lost"}}},
		queues,
		[]Binding{
			{Queue: "orders.charge", Exchange: "orders", RoutingKey: "charge"},
			{Queue: "orders.charge", Exchange: "orders", RoutingKey: "refund"},
		},
	)
	want := []Difference{
		{Kind: "exchange", Name: "orders", Settings: []Setting{{Name: "alternate-exchange", Arg: true, Declared: "orders.lost", Broker: "orders.unrouted"}}},
		{Kind: "queue", Name: "audit.log", Settings: []Setting{{Name: "x-custom", Arg: true, Declared: "b", Broker: "a"}, {Name: "x-delivery-limit", Arg: true, Declared: "20"}}},
		{Kind: "binding", Name: "orders.charge", Binding: Binding{Queue: "orders.charge", Exchange: "orders", RoutingKey: "refund"}, Missing: true},
	}
	if len(diffs) != len(want) {
		t.Fatalf("Check reported %d differences, want %d:\n%v", len(diffs), len(want), err)
	}
	for i := range want {
		g, w := diffs[i], want[i]
		if g.Kind != w.Kind || g.Name != w.Name || g.Missing != w.Missing || g.Binding.RoutingKey != w.Binding.RoutingKey || g.Partial || !slices.Equal(g.Settings, w.Settings) {
			t.Errorf("Check difference %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	for _, s := range []string{
		`exchange "orders" exists on the broker with other settings than the flow declares: arguments {alternate-exchange=orders.lost} here, {alternate-exchange=orders.unrouted} there`,
		`queue "audit.log" exists on the broker with other settings than the flow declares: arguments {x-custom=b, x-delivery-limit=20} here, {x-custom=a} there`,
		`queue "orders.charge" is not bound to exchange "orders" with routing key "refund"`,
	} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Check's error does not say %q:\n%v", s, err)
		}
	}

	// The broker itself accepts the queue as declared: what was reported
	// above came from the management API alone.
	if err := e.topo.DeclareQueue(ctx, queues[0]); err != nil {
		t.Errorf("DeclareQueue(audit.log with x-custom b) = %v; the broker was expected to accept it", err)
	}
}

func TestCheckDriftIgnoresMissingAndDeclaresNothing(t *testing.T) {
	t.Parallel()
	for mode, mgmt := range managementModes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newVHostEnv(t, mgmt)
			ctx := t.Context()
			if err := e.topo.DeclareQueue(ctx, Queue{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "classic"}}); err != nil {
				t.Fatal(err)
			}
			err := e.topo.CheckDrift(ctx,
				[]Exchange{{Name: "orders", Kind: "direct", Durable: true}},
				[]Queue{
					{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 20}},
					{Name: "orders.charge.retry.2s", Durable: true, Args: map[string]any{"x-queue-type": "quorum", "x-message-ttl": 2000}},
					{Name: "orders.charge.dlq", Durable: true, Args: map[string]any{"x-queue-type": "quorum"}},
				})
			var te *TopologyError
			if !errors.As(err, &te) || len(te.Differences) != 1 || te.Differences[0].Name != "orders.charge" || errors.Is(err, ErrNotFound) {
				t.Fatalf("CheckDrift = %v, want the drift of orders.charge alone", err)
			}
			if s := te.Differences[0].Settings; len(s) == 0 || s[0] != (Setting{Name: "type", Declared: "quorum", Broker: "classic"}) {
				t.Errorf("CheckDrift settings = %+v, want the type first", s)
			}
			if qs, xs := e.names(t, "queues"), e.names(t, "exchanges"); !slices.Equal(qs, []string{"orders.charge"}) || len(xs) > 0 {
				t.Errorf("CheckDrift declared something: queues %q, exchanges %q", qs, xs)
			}
		})
	}
}

func TestCheckPassesWhatTheBrokerHas(t *testing.T) {
	t.Parallel()
	for mode, mgmt := range managementModes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newVHostEnv(t, mgmt)
			xs := []Exchange{{Name: "orders", Kind: "topic", Durable: true}}
			qs := []Queue{
				{Name: "orders.charge", Durable: true, Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 20, "x-dead-letter-exchange": "acemq.dlx"}},
				{Name: "audit.log", Durable: true, Args: map[string]any{"x-message-ttl": 60000}},
			}
			bs := []Binding{{Queue: "orders.charge", Exchange: "orders", RoutingKey: "order.*"}}
			if err := e.topo.Declare(t.Context(), xs, qs, bs); err != nil {
				t.Fatal(err)
			}
			// audit.log was declared without a type: it is classic, and
			// declaring classic is the same.
			qs[1].Args["x-queue-type"] = "classic"
			if diffs, err := e.topo.Check(t.Context(), xs, qs, bs); len(diffs) > 0 || err != nil {
				t.Errorf("Check of what was declared = %+v, %v; want nothing", diffs, err)
			}
		})
	}
}

func TestCheckReadsExchangeDriftBothWays(t *testing.T) {
	t.Parallel()
	for mode, mgmt := range managementModes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newVHostEnv(t, mgmt)
			if err := e.topo.DeclareExchange(t.Context(), Exchange{Name: "orders", Kind: "direct", Durable: true}); err != nil {
				t.Fatal(err)
			}
			diffs, err := e.topo.Check(t.Context(), []Exchange{{Name: "orders", Kind: "topic", Durable: false}}, nil, nil)
			want := []Setting{{Name: "type", Declared: "topic", Broker: "direct"}, {Name: "durable", Declared: "false", Broker: "true"}}
			if len(diffs) != 1 || !slices.Equal(diffs[0].Settings, want) {
				t.Fatalf("Check = %+v, %v; want settings %+v", diffs, err, want)
			}
			const sentence = `exchange "orders" exists on the broker as a direct exchange but the flow declares it topic; durable false here, true there; delete the exchange or declare it as it is`
			if err == nil || err.Error() != sentence {
				t.Errorf("Check error:\n got %v\nwant %s", err, sentence)
			}
		})
	}
}

// An explicit management URL that does not answer is logged, redacted,
// and the check carries on from the broker's refusals.
func TestUnreachableManagementIsLoggedWithoutItsPassword(t *testing.T) {
	t.Parallel()
	e := newVHostEnv(t, "http://admin:s3cret-pw@"+closedPort(t))
	if got := e.topo.conn.Management(); strings.Contains(got, "s3cret-pw") || !strings.Contains(got, "admin:xxxxx@") {
		t.Errorf("Conn.Management() = %q, want the password redacted", got)
	}
	if err := e.topo.DeclareQueue(t.Context(), Queue{Name: "q", Durable: true}); err != nil {
		t.Fatal(err)
	}
	diffs, err := e.topo.Check(t.Context(), nil, []Queue{{Name: "q", Durable: true, Args: map[string]any{"x-message-ttl": 5}}}, []Binding{{Queue: "q", Exchange: "amq.direct", RoutingKey: "q"}})
	if len(diffs) != 1 || !diffs[0].Partial || !errors.Is(err, ErrDrift) {
		t.Fatalf("Check = %+v, %v; want the ttl read from the refusal", diffs, err)
	}
	logs := e.logs.String()
	if strings.Contains(logs, "s3cret-pw") {
		t.Errorf("the password reached the log:\n%s", logs)
	}
	for _, want := range []string{"management API not answering", "bindings not checked"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
}

func TestManagementURL(t *testing.T) {
	cases := []struct {
		name, amqp, opt         string
		base, user, pass, vhost string
	}{
		{"derived from the AMQP URL", "amqp://u:pw1@rabbit.local:5673/orders", "", "http://rabbit.local:15672", "u", "pw1", "orders"},
		{"amqps gives https on 15671", "amqps://u:pw1@rabbit.local/", "", "https://rabbit.local:15671", "u", "pw1", "/"},
		{"the default vhost is /", "amqp://guest:guest@127.0.0.1:5672/", "", "http://127.0.0.1:15672", "guest", "guest", "/"},
		{"an escaped vhost", "amqp://u:pw1@h/a%2Fb", "", "http://h:15672", "u", "pw1", "a/b"},
		{"an explicit URL keeps the AMQP credentials", "amqp://u:pw1@h/v", "http://mgmt:8080/rabbit/", "http://mgmt:8080/rabbit", "u", "pw1", "v"},
		{"an explicit URL with its own credentials", "amqp://u:pw1@h/v", "https://admin:pw2@mgmt", "https://mgmt", "admin", "pw2", "v"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newManagement(tc.amqp, tc.opt, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if m.base != tc.base || m.user != tc.user || m.pass != tc.pass || m.vhost != tc.vhost {
				t.Errorf("newManagement(%s, %q) = %s %s:%s vhost %q; want %s %s:%s vhost %q", tc.amqp, tc.opt, m.base, m.user, m.pass, m.vhost, tc.base, tc.user, tc.pass, tc.vhost)
			}
			if strings.Contains(m.shown, ":"+tc.pass+"@") || !strings.Contains(m.shown, ":xxxxx@") || strings.Contains(m.base, "@") {
				t.Errorf("newManagement: shown %q, base %q carry the password", m.shown, m.base)
			}
		})
	}
	if m, err := newManagement("amqp://u:p@h/", ManagementOff, time.Second); m != nil || err != nil {
		t.Errorf("newManagement(off) = %v, %v; want nil, nil", m, err)
	}
	if _, err := newManagement("amqp://u:p@h/", "ftp://admin:topsecret@h", time.Second); err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("newManagement(ftp://...) = %v, want an error without the password", err)
	}
}
