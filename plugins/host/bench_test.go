package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkCall measures the plugin transport with 1 KiB payloads through
// testkit's echo handler, from 1 caller and from 16 concurrent callers, and
// the same echo called in process, and prints one line per figure:
//
//	bench: plugin-call <msgs/s> msgs/s            16 callers
//	bench: plugin-latency-p50 <µs> us             1 caller (low load)
//	bench: plugin-latency-p99 <µs> us             1 caller
//	bench: plugin-call-1 <msgs/s> msgs/s          1 caller
//	bench: plugin-latency-p50-16 <µs> us          16 callers
//	bench: plugin-latency-p99-16 <µs> us          16 callers
//	bench: inprocess-call <msgs/s> msgs/s         ... and the same for in process
//
// Each configuration runs for ACEMQ_BENCH_DURATION (default 2s); run it
// once: go test -run '^$' -bench BenchmarkCall -benchtime 1x ./plugins/host
func BenchmarkCall(b *testing.B) {
	d := 2 * time.Second
	if v := os.Getenv("ACEMQ_BENCH_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatalf("ACEMQ_BENCH_DURATION=%q: %v", v, err)
		}
	}
	p, err := Start(b.Context(), Config{Name: "testkit", Command: testkitBin})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()

	payload := bytes.Repeat([]byte("x"), 1024)
	req := Request{Handler: "echo", Envelope: Envelope{MessageID: "m", Attempt: 1}, Payload: payload}
	viaPlugin := func(ctx context.Context) error {
		res, err := p.Call(ctx, req)
		if err == nil && len(res.Payload) != len(payload) {
			err = fmt.Errorf("echo returned %d bytes, want %d", len(res.Payload), len(payload))
		}
		return err
	}
	// The same handler, called in process: what a step costs without the
	// transport.
	echo := func(_ context.Context, r Request) (Result, error) { return Result{Payload: r.Payload}, nil }
	inProcess := func(ctx context.Context) error {
		res, err := echo(ctx, req)
		if err == nil && len(res.Payload) != len(payload) {
			err = fmt.Errorf("echo returned %d bytes", len(res.Payload))
		}
		return err
	}

	// Warm up connections, buffers and the plugin's goroutines.
	if _, err := measure(b.Context(), viaPlugin, 16, d/4); err != nil {
		b.Fatal(err)
	}
	for _, target := range []struct {
		name string
		call func(context.Context) error
	}{{"plugin", viaPlugin}, {"inprocess", inProcess}} {
		one, err := measure(b.Context(), target.call, 1, d)
		if err != nil {
			b.Fatal(err)
		}
		many, err := measure(b.Context(), target.call, 16, d)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("bench: %s-call %.0f msgs/s\n", target.name, many.rate)
		fmt.Printf("bench: %s-latency-p50 %.2f us\n", target.name, micros(one.p50))
		fmt.Printf("bench: %s-latency-p99 %.2f us\n", target.name, micros(one.p99))
		fmt.Printf("bench: %s-call-1 %.0f msgs/s\n", target.name, one.rate)
		fmt.Printf("bench: %s-latency-p50-16 %.2f us\n", target.name, micros(many.p50))
		fmt.Printf("bench: %s-latency-p99-16 %.2f us\n", target.name, micros(many.p99))
		if target.name == "plugin" {
			b.ReportMetric(many.rate, "msgs/s")
			b.ReportMetric(micros(one.p50), "p50-us")
		}
	}
}

type figures struct {
	rate     float64 // calls per second
	p50, p99 time.Duration
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// measure runs call from callers goroutines for d and returns the rate and
// the latency percentiles of every call.
func measure(ctx context.Context, call func(context.Context) error, callers int, d time.Duration) (figures, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
		firstErr error
	)
	start := time.Now()
	deadline := start.Add(d)
	for range callers {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1<<16)
			for {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				if err := call(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					break
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return figures{}, firstErr
	}
	if len(all) == 0 {
		return figures{}, fmt.Errorf("no call completed in %s", d)
	}
	slices.Sort(all)
	return figures{
		rate: float64(len(all)) / elapsed.Seconds(),
		p50:  all[len(all)/2],
		p99:  all[len(all)*99/100],
	}, nil
}
