package decide

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

func TestDelayRoute(t *testing.T) {
	zeros := strings.Repeat("0.", 27)
	cases := []struct {
		name     string
		delay    time.Duration
		exchange string
		key      string
	}{
		{"no delay goes straight to .due", 0, "", plan.DueQueue},
		{"a delay under a second goes straight to .due, whose consumer holds it", 300 * time.Millisecond, "", plan.DueQueue},
		{"one second is digit 0 on level 0", time.Second, "acemq.schedule.0", zeros + "1"},
		{"a second and a bit is rounded up to two: never early", 1001 * time.Millisecond, "acemq.schedule.1", strings.Repeat("0.", 26) + "1.0"},
		{"five seconds are levels 2 and 0", 5 * time.Second, "acemq.schedule.2", strings.Repeat("0.", 25) + "1.0.1"},
		{"four hours start at level 13", 4 * time.Hour, "acemq.schedule.13", DelayKey(14400)},
		{"the longest delay sets every digit", (1<<28 - 1) * time.Second, "acemq.schedule.27", strings.Repeat("1.", 27) + "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ex, key, err := Ladder{}.Route(tc.delay)
			if err != nil || ex != tc.exchange || key != tc.key {
				t.Errorf("Route(%s) = %q, %q, %v; want %q, %q", tc.delay, ex, key, err, tc.exchange, tc.key)
			}
		})
	}
}

func TestDelayKeyHasTwentyEightDigits(t *testing.T) {
	for _, units := range []int64{0, 1, 2, 14400, 1<<28 - 1} {
		words := strings.Split(DelayKey(units), ".")
		if len(words) != plan.LadderLevels {
			t.Fatalf("DelayKey(%d) has %d words, want %d", units, len(words), plan.LadderLevels)
		}
		var back int64
		for _, w := range words {
			back = back<<1 | int64(w[0]-'0')
		}
		if back != units {
			t.Errorf("DelayKey(%d) reads back as %d", units, back)
		}
	}
	if DelayKey(14400) != "0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.1.1.0.0.0.0.1.0.0.0.0.0.0" {
		t.Errorf("DelayKey(14400) = %s", DelayKey(14400))
	}
}

func TestDelayRefusesBeyondTheLadder(t *testing.T) {
	m := Message{Exchange: "x", RoutingKey: "k"}
	now := time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC)
	_, _, err := Delay(&m, "x", "k", now.Add((1<<28)*time.Second), now)
	if !errors.Is(err, ErrDelayTooLong) || !strings.Contains(err.Error(), "longer than the delay ladder holds") {
		t.Fatalf("Delay(2^28 s) = %v, want ErrDelayTooLong with a sentence", err)
	}
	if m.Exchange != "x" || m.Headers != nil {
		t.Errorf("a refused Delay changed the message: %+v", m)
	}
}

func TestDelayWritesTheDestination(t *testing.T) {
	now := time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC)
	orig := Table{"a": "b", "x-death": []any{}, "x-first-death-queue": "q"}
	m := Message{MessageID: "m1", Exchange: "fulfilment", RoutingKey: "check", Expiration: "5000", Body: []byte("{}"), Headers: orig}
	ex, key, err := Delay(&m, "fulfilment", "check", now.Add(15*time.Minute+1500*time.Millisecond), now)
	if err != nil {
		t.Fatal(err)
	}
	if ex != "acemq.schedule.9" || key != DelayKey(902) || m.Exchange != ex || m.RoutingKey != key {
		t.Errorf("Delay(15m1.5s) = %q %q, message to %q %q; want acemq.schedule.9 and the key of 902 s", ex, key, m.Exchange, m.RoutingKey)
	}
	want := Table{"a": "b", plan.HeaderDeliverExchange: "fulfilment", plan.HeaderDeliverRoutingKey: "check", plan.HeaderDueAt: "2026-09-09T14:15:01.500Z"}
	if len(m.Headers) != len(want) {
		t.Errorf("headers = %v, want %v", m.Headers, want)
	}
	for k, v := range want {
		if m.Headers[k] != v {
			t.Errorf("header %s = %v, want %v", k, m.Headers[k], v)
		}
	}
	if m.Expiration != "" {
		t.Errorf("expiration %q kept: it would let the message leave a level early", m.Expiration)
	}
	if _, ok := orig[plan.HeaderDueAt]; !ok && len(orig) != 3 {
		t.Errorf("the caller's headers were changed: %v", orig)
	}
	if m.MessageID != "m1" || string(m.Body) != "{}" {
		t.Errorf("the message changed beyond its headers: %+v", m)
	}
}

func TestDue(t *testing.T) {
	now := time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC)
	dest := func(due time.Time) Table {
		return Table{plan.HeaderDeliverExchange: "orders", plan.HeaderDeliverRoutingKey: "order.charge", plan.HeaderDueAt: FormatDueAt(due),
			"x-death": []any{Table{"queue": "acemq.schedule.0"}}, "x-first-death-reason": "expired", "x-last-death-queue": "acemq.schedule.0", "keep": "me"}
	}
	cases := []struct {
		name    string
		headers Table
		action  string
		ex, key string
		wait    time.Duration
	}{
		{"a due message goes to its destination", dest(now.Add(-300 * time.Millisecond)), DueDeliver, "orders", "order.charge", 0},
		{"one early by less than a unit is held until due", dest(now.Add(400 * time.Millisecond)), DueWait, "orders", "order.charge", 400 * time.Millisecond},
		{"one early by more goes back into the ladder for the rest", dest(now.Add(5 * time.Second)), DueDelay, "acemq.schedule.2", DelayKey(5), 0},
		{"one without a due time is delivered", Table{plan.HeaderDeliverExchange: "", plan.HeaderDeliverRoutingKey: "q"}, DueDeliver, "", "q", 0},
		{"one without a destination is dead-lettered", Table{"keep": "me"}, DueDeadLetter, "", "acemq.schedule.due.dlq", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Message{MessageID: "m1", Exchange: "", RoutingKey: plan.DueQueue, Body: []byte("x"), Headers: tc.headers}
			d := Ladder{}.Due(m, now)
			if d.Action != tc.action || d.Publish.Exchange != tc.ex || d.Publish.RoutingKey != tc.key || d.Wait != tc.wait {
				t.Fatalf("Due = %s to %q %q wait %s; want %s to %q %q wait %s", d.Action, d.Publish.Exchange, d.Publish.RoutingKey, d.Wait, tc.action, tc.ex, tc.key, tc.wait)
			}
			for k := range d.Publish.Headers {
				if k == "x-death" || strings.HasPrefix(k, "x-first-death") || strings.HasPrefix(k, "x-last-death") {
					t.Errorf("header %s kept", k)
				}
			}
			if d.Publish.Headers["keep"] != tc.headers["keep"] || d.Publish.MessageID != "m1" || string(d.Publish.Body) != "x" {
				t.Errorf("the message changed beyond its address: %+v", d.Publish)
			}
			if _, ok := tc.headers["x-death"]; !ok && tc.action == DueDeliver && len(tc.headers) == 5 {
				t.Error("the delivery's headers were changed")
			}
			if tc.action == DueDeadLetter && HeaderText(d.Publish.Headers[plan.HeaderError]) == "" {
				t.Error("dead-lettered without a reason")
			}
		})
	}
}

func TestUnroutableGoesBackForTenSeconds(t *testing.T) {
	m := Message{MessageID: "m1", Headers: Table{plan.HeaderDeliverExchange: "orders", plan.HeaderDeliverRoutingKey: "k", plan.HeaderDueAt: "2026-09-09T14:00:00.000Z", "x-death": []any{}}}
	for try := 1; try <= 2; try++ {
		m = Ladder{}.Unroutable(m)
		if m.Exchange != "acemq.schedule.3" || m.RoutingKey != DelayKey(10) {
			t.Errorf("try %d: to %q %q, want level 3 with the key of 10", try, m.Exchange, m.RoutingKey)
		}
		if n, _ := HeaderInt(m.Headers[plan.HeaderDueRetries]); n != try {
			t.Errorf("try %d: %s = %d", try, plan.HeaderDueRetries, n)
		}
		if _, ok := m.Headers["x-death"]; ok || m.Headers[plan.HeaderDueAt] != "2026-09-09T14:00:00.000Z" || m.Headers[plan.HeaderDeliverExchange] != "orders" {
			t.Errorf("try %d: headers %v", try, m.Headers)
		}
	}
}

func TestLadderUnitScalesTheDelays(t *testing.T) {
	l := Ladder{Unit: time.Millisecond}
	now := time.Date(2026, 9, 9, 14, 0, 0, 0, time.UTC)
	m := Message{}
	ex, key, err := l.Delay(&m, "x", "k", now.Add(4*time.Hour), now)
	if err != nil || ex != "acemq.schedule.13" || key != DelayKey(14400) {
		t.Errorf("Delay(4h) with a 1ms unit = %q %q %v", ex, key, err)
	}
	if m.Headers[plan.HeaderDueAt] != "2026-09-09T14:00:14.400Z" {
		t.Errorf("due at %v, want 14.4 s from now", m.Headers[plan.HeaderDueAt])
	}
	if d := l.Due(m, now.Add(4*time.Second)); d.Action != DueDelay || d.Publish.RoutingKey != DelayKey(10400) {
		t.Errorf("Due 10.4 s early on a 1ms ladder = %s %s, want back into the ladder for 10400 of its seconds", d.Action, d.Publish.RoutingKey)
	}
}
