package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
	"github.com/acemq/acemq-flow/test/testenv"
)

func TestSplitURLs(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string
	}{
		{"one URL is itself", "amqp://u:p@h:5672/", []string{"amqp://u:p@h:5672/"}},
		{"commas separate URLs", "amqp://u:p@a:5681/,amqp://u:p@b:5682/,amqps://u:p@c:5671/",
			[]string{"amqp://u:p@a:5681/", "amqp://u:p@b:5682/", "amqps://u:p@c:5671/"}},
		{"blanks around the commas go", " amqp://a/ , AMQP://b/ ", []string{"amqp://a/", "AMQP://b/"}},
		{"a comma in a password stays in it", "amqp://u:pa,ss@a/,amqp://u:p,@b/", []string{"amqp://u:pa,ss@a/", "amqp://u:p,@b/"}},
		{"a trailing comma adds nothing", "amqp://a/,", []string{"amqp://a/"}},
		{"nothing is no URL", "  ", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SplitURLs(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("SplitURLs(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactURLsRedactsEveryPassword(t *testing.T) {
	got := RedactURLs("amqp://u:s3cret-a@a:5681/,amqp://v:s3cret-b@b:5682/vh")
	if want := "amqp://u:xxxxx@a:5681/,amqp://v:xxxxx@b:5682/vh"; got != want {
		t.Errorf("RedactURLs = %q, want %q", got, want)
	}
}

// TestOpenURLsRefusesOnlyWhenEveryURLRefuses: a first connection fails at
// once only when every URL refuses it (a wrong password); a URL that does
// not answer among them is retried, and one that answers is used.
func TestOpenURLsRefusesOnlyWhenEveryURLRefuses(t *testing.T) {
	base := testenv.AMQP(t)
	u, _ := url.Parse(base)
	wrong := *u
	wrong.User = url.UserPassword("guest", "not-the-password")
	down := *u
	down.Host = harness.FreeAddr(t)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := OpenURLs(ctx, []string{wrong.String(), wrong.String()}, ConnOptions{Name: testenv.Names(t), BackoffMin: 50 * time.Millisecond})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "refused the user name and password") {
		t.Errorf("OpenURLs(two refusing) = %v (context %v), want the refusal at once", err, ctx.Err())
	}

	c, err := OpenURLs(ctx, []string{down.String(), wrong.String(), base}, ConnOptions{Name: testenv.Names(t), BackoffMin: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("OpenURLs(down, refusing, good) = %v, want connected to the third", err)
	}
	defer c.Close()
	if c.Node() != u.Host || c.Nodes() != 3 {
		t.Errorf("connected to node %s of %d, want %s of 3", c.Node(), c.Nodes(), u.Host)
	}
}

// TestConnFollowsTheURLList puts two fault proxies in front of the broker,
// as two nodes of a cluster, and gives a publishing and a consuming
// connection both. Under a steady publish, the proxy connected to is cut
// (new connections refused, open ones reset): both connections follow to
// the other, say so in the log naming the node, are unready meanwhile and
// ready after, and every message the broker confirmed is consumed. Then
// the other is cut with the first one back: they follow back to it.
func TestConnFollowsTheURLList(t *testing.T) {
	e := newEnv(t)
	q := e.queue("failover", "quorum")
	base, _ := url.Parse(e.url)
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
	open := func(role string) *Conn {
		c, err := OpenURLs(t.Context(), urls, ConnOptions{Name: e.ns + "-" + role, Log: e.log, BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second})
		if err != nil {
			t.Fatalf("OpenURLs(%s): %v", role, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	pc, cc := open("publish"), open("consume")
	for _, c := range []*Conn{pc, cc} {
		if c.Node() != proxies[0].Addr() {
			t.Fatalf("%s connected to %s, want the first URL's node %s", c.Name(), c.Node(), proxies[0].Addr())
		}
	}
	pub := e.publisher(pc, 32)

	var mu sync.Mutex
	got := map[string]bool{}
	cons := NewConsumer(cc, ConsumerOptions{Queue: q, Prefetch: 50, Log: e.log})
	runConsumer(t, cons, func(_ context.Context, d *Delivery) {
		mu.Lock()
		got[d.MessageId] = true
		mu.Unlock()
		_ = d.Ack()
	})

	// The publisher retries a publish whose outcome is unknown with the
	// same id, as the runtime does; confirmed holds what the broker has.
	var confirmed []string
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("m-%d", i)
			for try := 1; ; try++ {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := pub.Publish(ctx, msg(q, id, nil))
				cancel()
				if err == nil {
					mu.Lock()
					confirmed = append(confirmed, id)
					mu.Unlock()
					break
				}
				var ind *IndeterminateError
				if try == 20 || (!errors.As(err, &ind) && !errors.Is(err, context.DeadlineExceeded)) {
					t.Errorf("publish %s, try %d: %v", id, try, err)
					return
				}
			}
			time.Sleep(5 * time.Millisecond) // a steady trickle, not a flood
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	waitMore := func(n int) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() error {
			if c := count(); c < n {
				return fmt.Errorf("%d messages consumed, want at least %d", c, n)
			}
			return nil
		})
	}
	waitMore(20)

	for _, step := range []struct{ cut, to int }{{0, 1}, {1, 0}} {
		proxies[step.to].SetMode(harness.Pass)
		proxies[step.cut].SetMode(harness.Refuse)
		proxies[step.cut].Reset()
		want := proxies[step.to].Addr()
		testenv.Eventually(t, 30*time.Second, func() error {
			for _, c := range []*Conn{pc, cc} {
				if h := c.Health(); !h.Ready() || h.Node != want {
					return fmt.Errorf("%s: state %s on node %s, ready %v; want ready on %s", c.Name(), h.State, h.Node, h.Ready(), want)
				}
			}
			return nil
		})
		waitMore(count() + 20)
	}
	close(stop)
	<-published

	mu.Lock()
	want := slices.Clone(confirmed)
	mu.Unlock()
	testenv.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		var lost []string
		for _, id := range want {
			if !got[id] {
				lost = append(lost, id)
			}
		}
		if len(lost) > 0 {
			return fmt.Errorf("lost %d of %d confirmed messages, e.g. %v", len(lost), len(want), lost[:min(5, len(lost))])
		}
		return nil
	})
	logs := e.logs.String()
	for _, node := range []string{proxies[0].Addr(), proxies[1].Addr()} {
		found := false
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `msg="connection re-established on another node"`) && strings.Contains(l, e.ns+"-consume") && strings.Contains(l, " node="+node) {
				found = true
			}
		}
		if !found {
			t.Errorf("the log never says the consuming connection was re-established on node %s", node)
		}
	}
	if strings.Contains(logs, "guest:guest") {
		t.Error("the log carries the password")
	}
	t.Logf("%d messages confirmed and consumed across two cuts; %d reconnects", len(want), pc.Reconnects()+cc.Reconnects())
}
