package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestExchangeCacheAsksOnceAndTrustsEachAnswerForItsTime(t *testing.T) {
	var asked atomic.Int64
	exists := map[string]bool{"there": true}
	var fail atomic.Bool
	c := NewExchangeCache(func(_ context.Context, name string) (bool, error) {
		asked.Add(1)
		if fail.Load() {
			return false, errors.New("broker unreachable")
		}
		return exists[name], nil
	}, time.Hour, 0)
	ctx := context.Background()

	if ok, err := c.Exists(ctx, ""); !ok || err != nil || asked.Load() != 0 {
		t.Fatalf(`Exists("") = %v, %v after %d questions; want true without asking`, ok, err, asked.Load())
	}
	for range 3 {
		if ok, err := c.Exists(ctx, "there"); !ok || err != nil {
			t.Fatalf("Exists(there) = %v, %v; want true", ok, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("three lookups of an exchange found to exist asked %d times, want 1 (trusted for an hour)", n)
	}
	for range 2 {
		if ok, _ := c.Exists(ctx, "gone"); ok {
			t.Fatal("Exists(gone) = true")
		}
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("two lookups of a missing exchange, trusted for 0, asked %d times in all, want 3", n)
	}
	fail.Store(true)
	if _, err := c.Exists(ctx, "other"); err == nil {
		t.Error("Exists with the broker unreachable returned no error")
	}
	fail.Store(false)
	if ok, err := c.Exists(ctx, "other"); ok || err != nil {
		t.Errorf("after a failed question, Exists(other) = %v, %v; want it asked again: false, nil", ok, err)
	}
	before := asked.Load()
	c.Forget()
	if ok, _ := c.Exists(ctx, "there"); !ok || asked.Load() != before+1 {
		t.Errorf("after Forget, Exists(there) asked %d more times, want 1", asked.Load()-before)
	}
}

// Lookups of one name while its question is out wait for its answer: with
// the broker slow to answer, sixteen at once ask once (a lookup after the
// answer finds it kept; one that asked again would show here).
func TestExchangeCacheLookupsOfOneNameShareOneQuestion(t *testing.T) {
	release := make(chan struct{})
	askedFirst := make(chan struct{})
	var asked atomic.Int64
	c := NewExchangeCache(func(context.Context, string) (bool, error) {
		if asked.Add(1) == 1 {
			close(askedFirst)
		}
		<-release
		return true, nil
	}, time.Hour, time.Hour)
	const lookups = 16
	var wg sync.WaitGroup
	lookup := func() {
		if ok, err := c.Exists(context.Background(), "x"); !ok || err != nil {
			t.Errorf("Exists(x) = %v, %v; want true", ok, err)
		}
	}
	wg.Go(lookup)
	<-askedFirst // the question is out, and its answer held back
	for range lookups - 1 {
		wg.Go(lookup)
	}
	close(release)
	wg.Wait()
	if n := asked.Load(); n != 1 {
		t.Errorf("%d lookups of one name, the first question still out, asked %d times; want 1", lookups, n)
	}
}
