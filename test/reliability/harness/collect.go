package harness

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Replies is what came back on the reply queue: each run (correlation id)
// with its outcome header and when its first reply arrived.
type Replies struct {
	mu      sync.Mutex
	outcome map[string]string
	at      map[string]time.Time
	dups    int
	changed chan struct{}
}

// Collect declares queue and consumes it on a connection of its own until
// the test ends.
func Collect(t testing.TB, url, queue string) *Replies {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "reliability collector"}})
	if err != nil {
		t.Fatalf("collector: dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &Replies{outcome: map[string]string{}, at: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	go func() {
		for d := range dels {
			r.mu.Lock()
			if _, ok := r.outcome[d.CorrelationId]; ok {
				r.dups++
			} else {
				r.outcome[d.CorrelationId] = fmt.Sprint(d.Headers["x-acemq-outcome"])
				r.at[d.CorrelationId] = time.Now()
			}
			r.mu.Unlock()
			select {
			case r.changed <- struct{}{}:
			default:
			}
		}
	}()
	return r
}

// Outcomes returns a copy of run → outcome.
func (r *Replies) Outcomes() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]string, len(r.outcome))
	for k, v := range r.outcome {
		m[k] = v
	}
	return m
}

// Len is how many distinct runs replied.
func (r *Replies) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.outcome)
}

// Duplicates is how many replies repeated a run already seen.
func (r *Replies) Duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dups
}

// WaitFor waits until every id has replied or d passes; it returns how
// many are still missing.
func (r *Replies) WaitFor(ids []string, d time.Duration) int {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		missing := 0
		r.mu.Lock()
		for _, id := range ids {
			if _, ok := r.outcome[id]; !ok {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return 0
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			return missing
		}
	}
}

// WaitCount waits until at least n runs replied or d passes.
func (r *Replies) WaitCount(n int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for r.Len() < n {
		select {
		case <-r.changed:
		case <-deadline.C:
			return r.Len() >= n
		}
	}
	return true
}

// Latencies returns the publish-to-reply latency of every replied run
// that sent recorded, sorted.
func (r *Replies) Latencies(sent *Sent) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ls []time.Duration
	for id, at := range r.at {
		if p := sent.At(id); !p.IsZero() {
			ls = append(ls, at.Sub(p))
		}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	return ls
}

// Percentile is the q-quantile (0–1) of sorted ds, 0 when empty.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q * float64(len(ds)-1))
	return ds[i]
}

// QueueDepth is one queue's depth on the broker.
type QueueDepth struct {
	Name           string
	Ready, Unacked int
	Arguments      string
}

// Queues lists the queues of vhost with their depths and arguments.
func Queues(t testing.TB, vhost string) []QueueDepth {
	t.Helper()
	return QueuesOn(t, "", vhost)
}

// QueuesOn is Queues asking the broker node node ("" for rabbitmqctl's
// default).
func QueuesOn(t testing.TB, node, vhost string) []QueueDepth {
	t.Helper()
	args := []string{"list_queues", "-p", vhost, "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged", "arguments"}
	if node != "" {
		args = append([]string{"-n", node}, args...)
	}
	out := Rabbitmqctl(t, args...)
	var qs []QueueDepth
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		r, _ := strconv.Atoi(f[1])
		u, _ := strconv.Atoi(f[2])
		qs = append(qs, QueueDepth{Name: f[0], Ready: r, Unacked: u, Arguments: strings.Join(f[3:], " ")})
	}
	return qs
}

// Drain waits until every id in ok has replied, or until the work and
// ladder queues of vhost (all but the reply queue, .dlq and .parked) are
// empty and no reply came for 3 s (the rest is for the checker to find in
// .dlq and .parked, or to call lost), or d passes. It returns what was not
// drained ("" when drained).
func Drain(t testing.TB, r *Replies, vhost, replyQueue string, ok []string, d time.Duration) string {
	t.Helper()
	return DrainOn(t, "", r, vhost, replyQueue, ok, d)
}

// DrainOn is Drain asking the broker node node ("" for rabbitmqctl's
// default) for the queues' depths.
func DrainOn(t testing.TB, node string, r *Replies, vhost, replyQueue string, ok []string, d time.Duration) string {
	t.Helper()
	end := time.Now().Add(d)
	last, quietSince := -1, time.Now()
	for {
		missing := r.WaitFor(ok, time.Second)
		var busy []string
		for _, q := range QueuesOn(t, node, vhost) {
			if q.Name == replyQueue || strings.HasSuffix(q.Name, ".dlq") || strings.HasSuffix(q.Name, ".parked") {
				continue
			}
			if q.Ready+q.Unacked > 0 {
				busy = append(busy, fmt.Sprintf("%s %d+%d", q.Name, q.Ready, q.Unacked))
			}
		}
		if n := r.Len(); n != last {
			last, quietSince = n, time.Now()
		}
		switch {
		case len(busy) == 0 && missing == 0:
			return ""
		case len(busy) == 0 && time.Since(quietSince) > 3*time.Second:
			return ""
		case time.Now().After(end):
			return fmt.Sprintf("%d of %d ok runs had not replied after %s; queues not empty: %s", missing, len(ok), d, strings.Join(busy, ", "))
		}
		time.Sleep(200 * time.Millisecond) // a depth on the broker has no event to wait on
	}
}

// DeadLetter is one message read from a .dlq or .parked queue.
type DeadLetter struct {
	Run, Queue, Kind, Error string
	Attempt                 int
	Headers                 amqp.Table
}

// DeadLetters reads (and acknowledges) every message of every .dlq and
// .parked queue of vhost.
func DeadLetters(t testing.TB, url, vhost string) []DeadLetter {
	t.Helper()
	return DeadLettersOn(t, "", url, vhost)
}

// DeadLettersOn is DeadLetters asking the broker node node ("" for
// rabbitmqctl's default) for the list of queues.
func DeadLettersOn(t testing.TB, node, url, vhost string) []DeadLetter {
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
	var out []DeadLetter
	for _, q := range QueuesOn(t, node, vhost) {
		if !strings.HasSuffix(q.Name, ".dlq") && !strings.HasSuffix(q.Name, ".parked") {
			continue
		}
		for {
			m, ok, err := ch.Get(q.Name, true)
			if err != nil {
				t.Fatalf("basic.get %s: %v", q.Name, err)
			}
			if !ok {
				break
			}
			run := m.CorrelationId
			if run == "" {
				run = m.MessageId
			}
			att, _ := strconv.Atoi(fmt.Sprint(m.Headers["x-acemq-attempt"]))
			out = append(out, DeadLetter{Run: run, Queue: q.Name, Kind: fmt.Sprint(m.Headers["x-acemq-error-kind"]),
				Error: fmt.Sprint(m.Headers["x-acemq-error"]), Attempt: att, Headers: m.Headers})
		}
	}
	return out
}
