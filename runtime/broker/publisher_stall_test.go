package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/reliability/harness"
)

// A publish whose confirm never comes fails as indeterminate once it has
// waited ConfirmTimeout, on a channel the publisher closes and reopens,
// instead of holding its slot and its sender forever; the next publish is
// confirmed on the new channel.
func TestPublishWithoutAConfirmFailsAfterConfirmTimeout(t *testing.T) {
	e := newEnv(t)
	q := e.queue("stall", "quorum")
	// The proxy drops the broker's basic.ack frames of the channels open
	// when told, as a broker that lost a quorum queue's publishes across a
	// node's disconnection never sends them, until each is opened again.
	proxy, through := harness.Before(t, e.url, harness.ListenAMQP)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := Open(ctx, through, ConnOptions{Name: e.ns + "-stall", Log: e.log, BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second})
	if err != nil {
		t.Fatalf("Open through the proxy: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	pub, err := OpenPublisher(ctx, conn, PublisherOptions{ConfirmTimeout: 500 * time.Millisecond, Log: e.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })

	if proxy.LoseConfirms() == 0 {
		t.Fatal("the proxy saw no channel open to take the confirms of")
	}
	pd, err := pub.PublishAsync(t.Context(), msg(q, "unconfirmed", []byte(`1`)))
	if err != nil {
		t.Fatalf("PublishAsync: %v", err)
	}
	select {
	case <-pd.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the publish whose confirm was dropped is still pending 30s later (ConfirmTimeout 500ms); stats %+v", pub.Stats())
	}
	var ind *IndeterminateError
	if err := pd.Err(); !errors.As(err, &ind) || ind.MessageID != "unconfirmed" {
		t.Fatalf("the publish whose confirm was dropped: error %v, want an *IndeterminateError for message unconfirmed", err)
	}
	if proxy.ConfirmsLost() == 0 {
		t.Fatal("the proxy dropped no basic.ack: the publish did not wait for a confirm that never came")
	}
	if st := pub.Stats(); st.Stalls != 1 {
		t.Errorf("Stats().Stalls = %d, want 1", st.Stalls)
	}
	if !strings.Contains(e.logs.String(), "no confirm from the broker") {
		t.Errorf("the log does not say why the channel was closed:\n%s", e.logs.String())
	}

	pctx, pcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer pcancel()
	if err := pub.Publish(pctx, msg(q, "confirmed", []byte(`2`))); err != nil {
		t.Fatalf("Publish after the channel's reopening: %v", err)
	}
	if st := pub.Stats(); st.Stalls != 1 || st.Channels < 2 {
		t.Errorf("after a confirmed publish Stats() = %+v, want 1 stall and a reopened channel", st)
	}
}

// The watch counts how long one delivery tag has been the oldest waiting,
// and never while the connection is blocked (the broker reads nothing of
// a blocked connection's, so no confirm can come).
func TestConfirmWatch(t *testing.T) {
	w := confirmWatch{timeout: time.Second}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		tag     uint64
		waiting bool
		blocked bool
		at      time.Duration
		stalled bool
	}{
		{0, false, false, 0, false},                     // nothing waits
		{1, true, false, 100 * time.Millisecond, false}, // tag 1 first seen
		{1, true, false, 1000 * time.Millisecond, false},
		{2, true, false, 1200 * time.Millisecond, false}, // 1 confirmed: 2 is the oldest now
		{2, true, false, 2100 * time.Millisecond, false},
		{2, true, false, 2200 * time.Millisecond, true}, // 2 waited 1s
		{3, true, true, 2300 * time.Millisecond, false}, // blocked
		{3, true, true, 9000 * time.Millisecond, false}, // still blocked: not counted
		{3, true, false, 9100 * time.Millisecond, false},
		{3, true, false, 10100 * time.Millisecond, true},
	}
	for i, s := range steps {
		oldest := entry{tag: s.tag}
		if got, _ := w.check(oldest, s.waiting, s.blocked, at(s.at)); got != s.stalled {
			t.Errorf("step %d (tag %d at %s, blocked %v): stalled = %v, want %v", i, s.tag, s.at, s.blocked, got, s.stalled)
		}
	}
}
