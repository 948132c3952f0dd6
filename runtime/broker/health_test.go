package broker

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// A read that returns bytes proves the socket alive; a read that fails
// without any does not.
func TestBatchConnStampsReadsThatReturnBytes(t *testing.T) {
	b, _, peer := pipe(t)
	before := b.lastRead()
	go peer.Write([]byte("frame"))
	buf := make([]byte, 16)
	if n, err := b.Read(buf); n != 5 || err != nil {
		t.Fatalf("Read = %d, %v; want 5 bytes", n, err)
	}
	got := b.lastRead()
	if got <= before {
		t.Fatalf("lastRead = %s after a read of 5 bytes, want later than %s", got, before)
	}
	b.SetReadDeadline(time.Now().Add(-time.Second))
	if n, err := b.Read(buf); n != 0 || !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
		t.Fatalf("Read past the deadline = %d, %v; want a timeout", n, err)
	}
	if b.lastRead() != got {
		t.Fatalf("a failed read moved lastRead from %s to %s", got, b.lastRead())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestLivenessUnproven(t *testing.T) {
	const hb = 2 * time.Second
	base := time.Hour
	for _, tc := range []struct {
		name string
		l    liveness
		want string // a part of the reason; "" for proven alive
	}{
		{"a frame just read", liveness{now: base, lastRead: base - 100*time.Millisecond, lastTick: base - 400*time.Millisecond, heartbeat: hb}, ""},
		{"a frame a heartbeat ago", liveness{now: base, lastRead: base - hb, lastTick: base - 100*time.Millisecond, heartbeat: hb}, ""},
		{"quiet for more than two heartbeats", liveness{now: base, lastRead: base - 2*hb - time.Millisecond, lastTick: base - 100*time.Millisecond, heartbeat: hb}, "more than two heartbeats"},
		{"the watcher has not ticked for a heartbeat: frozen, not yet noticed", liveness{now: base, lastRead: base - 10*time.Second, lastTick: base - 10*time.Second, heartbeat: hb}, "did not run for 10s"},
		{"frozen, and a stale frame read before the watcher noticed", liveness{now: base, lastRead: base - time.Millisecond, lastTick: base - 10*time.Second, heartbeat: hb}, "did not run for 10s"},
		{"resumed, no frame since", liveness{now: base, lastRead: base - 20*time.Millisecond, lastTick: base - 10*time.Millisecond, resumed: base - 10*time.Millisecond, heartbeat: hb}, "since the process resumed"},
		{"resumed, a frame read since", liveness{now: base, lastRead: base - 5*time.Millisecond, lastTick: base - 10*time.Millisecond, resumed: base - 10*time.Millisecond, heartbeat: hb}, ""},
		{"heartbeats off: no quiet limit", liveness{now: base, lastRead: base - time.Minute, lastTick: base - time.Second, heartbeat: 0}, ""},
		{"heartbeats off: a stall of more than 5s", liveness{now: base, lastRead: base - time.Minute, lastTick: base - 6*time.Second, heartbeat: 0}, "did not run for 6s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.l.unproven()
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("unproven() = %q, want %q", got, tc.want)
			}
		})
	}
}

// Health names the alarm and since when the broker blocks a connection,
// and forgets both on connection.unblocked.
func TestHealthSaysSinceWhenTheBrokerBlocks(t *testing.T) {
	c := &Conn{closing: make(chan struct{}), opts: ConnOptions{Name: "shop publish"}}
	open := make(chan struct{})
	close(open)
	c.unblocked.Store(&open)
	c.state.Store(int32(StateConnected))
	if h := c.Health(); h.Blocked || h.BlockedSince != nil {
		t.Fatalf("a new connection's health = %+v, want not blocked", h)
	}
	at := time.Now()
	if changed, _ := c.setBlocked(true, "low on memory"); !changed {
		t.Fatal("setBlocked(true) on an unblocked connection reports no change")
	}
	if changed, _ := c.setBlocked(true, "low on memory"); changed {
		t.Fatal("a repeated connection.blocked reports a change: it would be logged twice")
	}
	h := c.Health()
	if !h.Blocked || h.BlockedReason != "low on memory" || h.BlockedSince == nil || h.BlockedSince.Before(at.Add(-time.Second)) || h.BlockedSince.After(time.Now().Add(time.Second)) {
		t.Fatalf("health while blocked = %+v, want blocked since about %s for low on memory", h, at)
	}
	if h.Ready() || !strings.Contains(h.Why(), `connection "shop publish" is blocked by the broker since`) || !strings.Contains(h.Why(), "low on memory") {
		t.Fatalf("Ready() = %v, Why() = %q while blocked", h.Ready(), h.Why())
	}
	changed, lasted := c.setBlocked(false, "")
	if !changed || lasted <= 0 {
		t.Fatalf("setBlocked(false) = %v, %s; want a change and how long it lasted", changed, lasted)
	}
	if h := c.Health(); h.Blocked || h.BlockedSince != nil || h.BlockedReason != "" {
		t.Fatalf("health after connection.unblocked = %+v, want not blocked", h)
	}
}

// On the broker: a connection is proven alive by the frames it reads; once
// the process counts as resumed from a stall it is not, until the broker's
// next heartbeat arrives.
func TestConnHealthAfterAStallWaitsForTheBroker(t *testing.T) {
	url := testenv.AMQP(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, url+sep+"heartbeat=1", ConnOptions{Name: testenv.Names(t) + "-health"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.Health()
	if !h.Ready() || h.Heartbeat != "1s" || h.LastRead == nil {
		t.Fatalf("health of a fresh connection = %+v, want ready with the URL's heartbeat 1s", h)
	}
	resumed := mono()
	c.resumed.Store(int64(resumed)) // as the watcher records a late tick
	if h := c.Health(); h.Ready() || !strings.Contains(h.Why(), "since the process resumed") {
		t.Fatalf("health right after a stall = %+v (%s), want not proven alive", h, h.Why())
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if h := c.Health(); !h.Ready() {
			return testenv.Errorf("still not ready 5s after the stall, with a 1s heartbeat: %s", h.Why())
		}
		return nil
	})
	if h := c.Health(); h.LastRead.Before(monoEpoch.Add(resumed).Round(time.Millisecond)) {
		t.Fatalf("ready again with the last frame read at %s, before the resume", h.LastRead)
	}
	if c.Reconnects() != 0 {
		t.Fatalf("the connection was redialled %d times; a stall alone must not redial it", c.Reconnects())
	}
}
