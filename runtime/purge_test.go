package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/stores"
)

// Every store is a Purger.
var _ runtime.Purger = stores.Set(nil)

// fakePurger answers purge n (1 first) with answer(n), then reports n on
// calls.
type fakePurger struct {
	answer func(n int) (stores.Purged, error)
	calls  chan int

	mu sync.Mutex
	n  int
}

func newFakePurger(answer func(n int) (stores.Purged, error)) *fakePurger {
	return &fakePurger{answer: answer, calls: make(chan int, 100)}
}

func (f *fakePurger) Purge(ctx context.Context) (stores.Purged, error) {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	p, err := f.answer(n)
	select {
	case f.calls <- n:
	default: // a hundred calls nobody waited for: the test has what it wants
	}
	return p, err
}

// wait returns once purge n has been called, failing the test after a
// deadline.
func (f *fakePurger) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-f.calls:
			if got >= n {
				return
			}
		case <-deadline:
			t.Fatalf("RunPurges did not call Purge a %dth time within 10s", n)
		}
	}
}

// logRecords keeps every record logged through it.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

// logged returns the records logged so far, each as its level, message
// and attributes.
func (l *logRecords) logged() []loggedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loggedRecord
	for _, r := range l.records {
		lr := loggedRecord{level: r.Level, msg: r.Message, attrs: map[string]any{}}
		r.Attrs(func(a slog.Attr) bool {
			lr.attrs[a.Key] = a.Value.Any()
			return true
		})
		out = append(out, lr)
	}
	return out
}

type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// runPurges starts RunPurges and returns a function that cancels it and
// waits for it to return.
func runPurges(t *testing.T, p runtime.Purger, every time.Duration, log *slog.Logger) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.RunPurges(ctx, p, every, log)
	}()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("RunPurges did not return within 10s of its context ending")
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestRunPurgesPurgesAtStart(t *testing.T) {
	f := newFakePurger(func(int) (stores.Purged, error) { return stores.Purged{}, nil })
	// An interval no test waits for: the first purge cannot be the ticker's.
	stop := runPurges(t, f, time.Hour, nil)
	f.wait(t, 1)
	stop()
}

func TestRunPurgesPurgesAgainAndLogsTheCounts(t *testing.T) {
	cut := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFakePurger(func(n int) (stores.Purged, error) {
		return stores.Purged{Expired: int64(10 * n), Published: int64(n), PublishedBefore: cut}, nil
	})
	logs := &logRecords{}
	stop := runPurges(t, f, time.Millisecond, slog.New(logs))
	f.wait(t, 3)
	stop()
	got := logs.logged()
	if len(got) < 2 {
		t.Fatalf("RunPurges logged %d records after three purges, want one per finished purge", len(got))
	}
	for i, r := range got {
		n := int64(i + 1)
		if r.level != slog.LevelInfo || r.msg != "store purged" || r.attrs["expired"] != 10*n || r.attrs["published"] != n ||
			r.attrs["published_before"] != cut || r.attrs["duration"] == nil {
			t.Errorf("record %d = %v %q %v; want Info \"store purged\" with expired %d, published %d, published_before %v and a duration",
				i+1, r.level, r.msg, r.attrs, 10*n, n, cut)
		}
	}
}

func TestRunPurgesGoesOnAfterAFailure(t *testing.T) {
	lock := errors.New("purge expired idempotency rows (2 purged before the failure): lock timeout")
	f := newFakePurger(func(n int) (stores.Purged, error) {
		if n == 1 {
			return stores.Purged{Expired: 2}, lock
		}
		return stores.Purged{}, nil
	})
	logs := &logRecords{}
	runPurges(t, f, time.Millisecond, slog.New(logs))
	f.wait(t, 2) // purged again after the failure
	r := logs.logged()[0]
	if r.level != slog.LevelWarn || r.msg != "store purge failed" || r.attrs["error"] != lock || r.attrs["expired"] != int64(2) {
		t.Errorf("first record = %v %q %v; want Warn \"store purge failed\" with the error and the 2 rows deleted before it", r.level, r.msg, r.attrs)
	}
}

func TestRunPurgesLogsNoFailureWhenStopped(t *testing.T) {
	entered := make(chan struct{})
	f := purgerFunc(func(ctx context.Context) (stores.Purged, error) {
		close(entered)
		<-ctx.Done() // a purge cut short by the shutdown
		return stores.Purged{}, ctx.Err()
	})
	logs := &logRecords{}
	stop := runPurges(t, f, time.Hour, slog.New(logs))
	<-entered
	stop()
	if got := logs.logged(); len(got) != 0 {
		t.Errorf("RunPurges logged %v for a purge its own shutdown cancelled, want nothing", got)
	}
}

func TestRunPurgesOff(t *testing.T) {
	for _, every := range []time.Duration{0, -time.Second} {
		f := newFakePurger(func(int) (stores.Purged, error) { return stores.Purged{}, nil })
		logs := &logRecords{}
		// It returns at once, without waiting for its context.
		runtime.RunPurges(t.Context(), f, every, slog.New(logs))
		if len(f.calls) != 0 {
			t.Errorf("RunPurges(every %s) purged; want purging off", every)
		}
		if got := logs.logged(); len(got) != 1 || got[0].msg != "store purges off" {
			t.Errorf("RunPurges(every %s) logged %v, want \"store purges off\"", every, got)
		}
	}
}

type purgerFunc func(ctx context.Context) (stores.Purged, error)

func (f purgerFunc) Purge(ctx context.Context) (stores.Purged, error) { return f(ctx) }
