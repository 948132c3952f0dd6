package runtime

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
)

// flakyPublisher answers the first fail publishes of each routing key with
// an unknown outcome (the channel closed before the confirm), then
// confirms; it counts the publishes of each key.
type flakyPublisher struct {
	mu    sync.Mutex
	fail  int
	calls map[string]int
}

func (f *flakyPublisher) PublishFunc(_ context.Context, m broker.Message, done func(error)) error {
	f.mu.Lock()
	f.calls[m.RoutingKey]++
	n := f.calls[m.RoutingKey]
	f.mu.Unlock()
	// As the publisher does: the outcome comes later, on another goroutine.
	go func() {
		if n <= f.fail {
			done(&broker.IndeterminateError{RoutingKey: m.RoutingKey, Err: errors.New("channel closed")})
			return
		}
		done(nil)
	}()
	return nil
}

// A reply whose outcome is unknown is published again, up to replyAttempts
// times in all, and the delivery is settled once, after the last attempt.
// Before, it was logged and dropped, and the run's requester never heard.
func TestAReplyOfUnknownOutcomeIsPublishedAgain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fail      int
		cancelled bool
		want      int
	}{
		{"one unknown outcome, then confirmed", 1, false, 2},
		{"unknown every time: given up after the last attempt", 10, false, replyAttempts},
		{"unknown while the runtime stops: not published again", 10, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := &flakyPublisher{fail: tc.fail, calls: map[string]int{}}
			g := &group{log: slog.New(slog.DiscardHandler), publisher: func(string) publisher { return pub }}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			settled := make(chan struct{}, 2)
			reply := decide.Publish{BestEffort: true, Message: decide.Message{RoutingKey: "client.q", MessageID: "r-1"}}
			g.sendReplies(ctx, decide.Inbound{}, []decide.Publish{reply}, replyAttempts, func() { settled <- struct{}{} })
			select {
			case <-settled:
			case <-time.After(10 * time.Second):
				t.Fatal("the delivery was not settled")
			}
			g.bg.Wait()
			if len(settled) != 0 {
				t.Error("the delivery was settled twice")
			}
			pub.mu.Lock()
			defer pub.mu.Unlock()
			if n := pub.calls["client.q"]; n != tc.want {
				t.Errorf("the reply was published %d times, want %d", n, tc.want)
			}
		})
	}
}
