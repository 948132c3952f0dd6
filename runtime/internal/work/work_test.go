package work

import (
	"sync"
	"testing"
	"time"
)

// TestWorkWaitsForRunningWork: Wait returns only once the work started
// before it has returned.
func TestWorkWaitsForRunningWork(t *testing.T) {
	var w Work
	release := make(chan struct{})
	finished := make(chan struct{})
	w.Go(func() {
		<-release
		close(finished)
	})
	waited := make(chan struct{})
	go func() {
		w.Wait()
		close(waited)
	}()
	// Wait is blocked once it has made its idle channel; it must not have
	// returned, then or before.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		select {
		case <-waited:
			t.Fatal("Wait returned while work was running")
		default:
		}
		w.mu.Lock()
		blocked := w.idle != nil
		w.mu.Unlock()
		if blocked {
			break
		}
		if time.Now().After(end) {
			t.Fatal("Wait neither returned nor blocked within 10s")
		}
	}
	select {
	case <-waited:
		t.Fatal("Wait returned while work was running")
	default:
	}
	close(release)
	<-waited
	select {
	case <-finished:
	default:
		t.Fatal("Wait returned before the work did")
	}
}

// TestWorkStartedDuringWait is what a late confirm does: work starts while
// another goroutine waits, over and over. A sync.WaitGroup used this way
// may panic ("WaitGroup is reused before previous Wait has returned") and
// is reported by the race detector; work must do neither.
func TestWorkStartedDuringWait(t *testing.T) {
	var w Work
	var producers sync.WaitGroup
	for range 4 {
		producers.Go(func() {
			for range 500 {
				w.Go(func() {})
			}
		})
	}
	done := make(chan struct{})
	go func() {
		producers.Wait()
		close(done)
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			w.Wait()
		}
	}
	w.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n != 0 {
		t.Fatalf("%d pieces of work still counted after all returned", w.n)
	}
}
