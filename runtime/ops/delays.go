package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// LadderView is what Delays reports about the delay ladder (FLOW-FORMAT §4,
// `acemq-flow delays`).
type LadderView struct {
	// Levels are the 28 levels, 0 first.
	Levels []LevelView `json:"levels"`
	// Due is `acemq.schedule.due`: what is due and waits for a runtime to
	// deliver it; DueConsumers is how many consume it.
	Due          int `json:"due"`
	DueConsumers int `json:"due_consumers"`
	// Unroutable is how many of the messages read were due once and reached
	// no queue at their destination, and wait in the ladder to be tried
	// again (x-acemq-due-retries). They wait in the levels a 10 s delay
	// visits (1 and 3), of which Scanned messages were read; Complete says
	// those levels were read to the end.
	Unroutable int  `json:"unroutable"`
	Scanned    int  `json:"scanned"`
	Complete   bool `json:"complete"`
}

// LevelView is one level of the ladder: its queue, the time a message
// waits in it, how many wait there, and the message at its head.
type LevelView struct {
	Level int    `json:"level"`
	Queue string `json:"queue"`
	Wait  string `json:"wait"`
	Depth int    `json:"depth"`
	// HeadDueAt is the x-acemq-due-at of the message at the head of the
	// level (the one that leaves it first), HeadDestination where it goes
	// ("exchange/routing key"); empty for an empty level.
	HeadDueAt       string `json:"head_due_at,omitempty"`
	HeadDestination string `json:"head_destination,omitempty"`
}

// Delays reads the delay ladder on the broker at url without changing
// it: each level's depth and the due time of the message at its head,
// `.due`'s depth, and, reading up to scan messages of each of the levels
// an unroutable message waits in, how many wait as unroutable. Every
// message read is held unacknowledged and given back when the command's
// channel closes, as the broker does for a consumer that goes away (which
// RabbitMQ 4 does not count as a failed delivery; the levels declare no
// delivery limit). A ladder no runtime has declared is an error saying so.
func Delays(ctx context.Context, url string, scan int) (LadderView, error) {
	view := LadderView{Levels: []LevelView{}}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := broker.Open(octx, url, broker.ConnOptions{Name: "acemq-flow delays"})
	if err != nil {
		return view, fmt.Errorf("read the delay ladder: connect to the broker: %w", err)
	}
	defer conn.Close()
	top := broker.NewTopology(conn, nil)
	// Closing the topology's channel gives back everything read.
	defer top.Close()

	due, err := top.Inspect(ctx, plan.DueQueue)
	if err != nil {
		return view, ladderError(plan.DueQueue, err)
	}
	view.Due, view.DueConsumers = due.Messages, due.Consumers
	// The levels a 10 s delay (decide.UnroutableRetry) visits.
	var retryLevels []int
	for k := range plan.LadderLevels {
		if decide.UnroutableRetry>>k&1 == 1 {
			retryLevels = append(retryLevels, k)
		}
	}
	view.Complete = true
	for k := range plan.LadderLevels {
		q := plan.LadderQueue(k)
		info, err := top.Inspect(ctx, q)
		if err != nil {
			return view, ladderError(q, err)
		}
		lv := LevelView{Level: k, Queue: q, Wait: (plan.LadderUnit << k).String(), Depth: info.Messages}
		read := 1
		if slices.Contains(retryLevels, k) {
			read = max(scan, 1)
		}
		for i := 0; i < min(read, info.Messages); i++ {
			d, err := top.Get(ctx, q)
			if err != nil {
				return view, fmt.Errorf("read the delay ladder: %w", err)
			}
			if d == nil {
				break
			}
			h := decide.Table(d.Headers)
			if i == 0 {
				ex, key, _, ok := decide.Destination(h)
				lv.HeadDueAt = decide.HeaderText(h[plan.HeaderDueAt])
				if ok {
					lv.HeadDestination = ex + "/" + key
				}
			}
			if slices.Contains(retryLevels, k) {
				view.Scanned++
				if n, _ := decide.HeaderInt(h[plan.HeaderDueRetries]); n > 0 {
					view.Unroutable++
				}
			}
		}
		if slices.Contains(retryLevels, k) && info.Messages > read {
			view.Complete = false
		}
		view.Levels = append(view.Levels, lv)
	}
	return view, nil
}

// ladderError words a failure to read one of the ladder's queues.
func ladderError(queue string, err error) error {
	if errors.Is(err, broker.ErrNotFound) {
		return fmt.Errorf("the delay ladder is not declared on this broker (no queue %q); `acemq-flow run` declares it", queue)
	}
	return fmt.Errorf("read the delay ladder: queue %q: %w", queue, err)
}
