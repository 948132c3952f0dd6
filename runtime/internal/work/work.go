// Package work counts goroutines started for follow-up work, so that the
// engine's groups and the scheduler's .due consumer can wait for them.
package work

import "sync"

// Work counts goroutines started for follow-up work (a confirm callback's
// continuation), so that stopping a group can wait for them. Unlike a
// sync.WaitGroup, starting work while another goroutine waits is allowed:
// a confirm can arrive at any time, even after a drain that gave up on its
// delivery, and a WaitGroup's Add racing its Wait may panic. Wait returns
// once no work is running; work started after that is not waited for.
type Work struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while nobody waits
}

// Go runs f on a goroutine of its own, counted until it returns.
func (w *Work) Go(f func()) {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
	go func() {
		defer w.done()
		f()
	}()
}

func (w *Work) done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n--; w.n == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// Wait blocks until no work is running.
func (w *Work) Wait() {
	w.mu.Lock()
	if w.n == 0 {
		w.mu.Unlock()
		return
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	idle := w.idle
	w.mu.Unlock()
	<-idle
}
