package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// StatusReads is what the status page reads of the broker beside the
// engine (the admin API's BrokerReads): the delay ladder, as Delays, and
// the dead letters, as DeadLetters, each on a connection of its own to URL
// for the read. Plan is the plan the runtime runs. Decoder, when set, reads
// the dead letters' Avro bodies for their previews (MessageView.Avro), as
// `inspect --registry` does: the runtime's own codec (runtime.Runtime's
// AvroDecoder), safe for concurrent use, as the page's reads may overlap.
type StatusReads struct {
	URL     string
	Plan    *plan.Plan
	Decoder Decoder
}

// Delays reads the delay ladder as `acemq-flow delays` does.
func (s StatusReads) Delays(ctx context.Context) (any, error) {
	return Delays(ctx, s.URL, 1000)
}

// DeadLetters reads the dead letters of the plan's consumer groups.
func (s StatusReads) DeadLetters(ctx context.Context) (any, error) {
	return DeadLettersWith(ctx, s.URL, s.Plan, DeadLetterRead, DeadLetterFirst, InspectOptions{Decoder: s.Decoder})
}

// How much DeadLetters reads by default: the first messages of each `.dlq`,
// and the messages kept of each group.
const (
	DeadLetterRead  = 100
	DeadLetterFirst = 5
)

// DeadLettersView is what DeadLetters reports: the dead letters of every
// consumer group, grouped by (flow, consumer, error), from the first
// messages of each `.dlq`, none taken.
type DeadLettersView struct {
	At     string            `json:"at"` // RFC 3339 UTC
	Groups []DeadLetterGroup `json:"groups"`
	// Queues are the `.dlq` queues read: each one's depth, and how many of
	// its first messages were read; the groups count those.
	Queues []DeadLetterQueue `json:"queues"`
}

// DeadLetterQueue is one `.dlq` as it was read.
type DeadLetterQueue struct {
	Queue    string `json:"queue"`
	Consumer string `json:"consumer"`
	Depth    int    `json:"depth"`
	Read     int    `json:"read"`
}

// DeadLetterGroup is the dead letters of one consumer group that failed
// with the same error: how many among those read, and the first ones as
// Inspect shows them (PreviewBytes of the payload, nothing more). Error is
// the x-acemq-error the runtime wrote, or the broker's reason for one it
// dead-lettered itself.
type DeadLetterGroup struct {
	Flow      string        `json:"flow"`
	Consumer  string        `json:"consumer"`
	Step      string        `json:"step,omitempty"`
	Queue     string        `json:"queue"` // the `.dlq`
	ErrorKind string        `json:"error_kind,omitempty"`
	Error     string        `json:"error"`
	Count     int           `json:"count"`
	First     []MessageView `json:"first"`
}

// DeadLetters reads the first read messages of the `.dlq` of every
// consumer group of pl on the broker at url, puts them back, and groups
// them by consumer and error, keeping the first first of each group. A
// `.dlq` the broker does not have is left out. Groups are sorted by flow
// and consumer, the largest first. A claim-checked dead letter shows its
// reference's key and size (MessageView.ClaimCheck); its blob is never
// fetched.
func DeadLetters(ctx context.Context, url string, pl *plan.Plan, read, first int) (DeadLettersView, error) {
	return DeadLettersWith(ctx, url, pl, read, first, InspectOptions{})
}

// DeadLettersWith is DeadLetters with opts: with opts.Decoder, the
// previews of Avro dead letters are their JSON, or, when that cannot be
// read, their first bytes in hex with the reason.
func DeadLettersWith(ctx context.Context, url string, pl *plan.Plan, read, first int, opts InspectOptions) (DeadLettersView, error) {
	v := DeadLettersView{At: time.Now().UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano), Groups: []DeadLetterGroup{}, Queues: []DeadLetterQueue{}}
	if pl == nil {
		return v, nil
	}
	declared := map[string]bool{}
	for _, q := range pl.Queues {
		declared[q.Name] = true
	}
	byQueue := map[string]plan.Consumer{}
	var queues []string
	for _, c := range pl.Consumers {
		dlq := plan.DeadLetterQueue(c.Queue)
		if _, seen := byQueue[dlq]; seen || !declared[dlq] {
			continue
		}
		byQueue[dlq] = c
		queues = append(queues, dlq)
	}
	if len(queues) == 0 {
		return v, nil
	}
	views, err := InspectManyWith(ctx, url, "acemq-flow status page", queues, read, opts)
	if err != nil {
		return v, fmt.Errorf("read the dead letters: %w", err)
	}
	for _, qv := range views {
		c := byQueue[qv.Queue]
		v.Queues = append(v.Queues, DeadLetterQueue{Queue: qv.Queue, Consumer: c.ID, Depth: qv.Depth, Read: len(qv.Messages)})
		at := map[[2]string]int{}
		for _, m := range qv.Messages {
			why := m.Error
			if why == "" && m.DeathReason != "" {
				why = "dead-lettered by the broker: " + m.DeathReason
			}
			key := [2]string{m.ErrorKind, why}
			i, ok := at[key]
			if !ok {
				i = len(v.Groups)
				at[key] = i
				v.Groups = append(v.Groups, DeadLetterGroup{Flow: c.Flow, Consumer: c.ID, Step: c.Step, Queue: qv.Queue,
					ErrorKind: m.ErrorKind, Error: why, First: []MessageView{}})
			}
			g := &v.Groups[i]
			g.Count++
			if len(g.First) < first {
				g.First = append(g.First, m)
			}
		}
	}
	slices.SortStableFunc(v.Groups, func(a, b DeadLetterGroup) int {
		return cmp.Or(cmp.Compare(a.Flow, b.Flow), cmp.Compare(a.Consumer, b.Consumer), cmp.Compare(b.Count, a.Count))
	})
	return v, nil
}

// InspectMany is Inspect for several queues on one connection: each
// queue's depth and a view of its first limit messages, in the order of
// queues, each queue's messages put back (basic.nack with requeue) before
// the next is read. A queue the broker does not have is left out. The
// queues are meant to be classic ones (`.dlq`, `.parked`), where a requeue
// keeps the order and counts nothing; see Inspect for what it does on a
// quorum queue.
//
// InspectMany opens its own connection to url, named name, and closes it
// before it returns.
func InspectMany(ctx context.Context, url, name string, queues []string, limit int) ([]QueueView, error) {
	return InspectManyWith(ctx, url, name, queues, limit, InspectOptions{})
}

// InspectManyWith is InspectMany with opts, as InspectWith is Inspect.
func InspectManyWith(ctx context.Context, url, name string, queues []string, limit int, opts InspectOptions) ([]QueueView, error) {
	views := []QueueView{}
	if limit < 0 {
		return views, fmt.Errorf("inspect queues: the limit must not be negative, not %d", limit)
	}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := broker.Open(octx, url, broker.ConnOptions{Name: name})
	if err != nil {
		return views, fmt.Errorf("connect to the broker: %w", err)
	}
	defer conn.Close()
	top := broker.NewTopology(conn, nil)
	defer top.Close()
	dec := opts.Decoder
	if dec != nil {
		dec = &unavailableOnce{Decoder: dec}
	}
	for _, q := range queues {
		view, err := inspectOn(ctx, top, q, limit, dec)
		if errors.Is(err, broker.ErrNotFound) {
			continue
		}
		if err != nil {
			return views, err
		}
		views = append(views, view)
	}
	return views, nil
}

// inspectOn reads queue's first limit messages on top and puts them back;
// dec, when not nil, reads the bodies in its framing (viewMessage).
func inspectOn(ctx context.Context, top *broker.Topology, queue string, limit int, dec Decoder) (QueueView, error) {
	view := QueueView{Queue: queue, Messages: []MessageView{}}
	depth, err := top.Depth(ctx, queue)
	if err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return view, err
		}
		return view, queueError("inspect", queue, err)
	}
	view.Depth = depth
	var held []*broker.Delivery
	defer func() {
		if isLadderLevel(queue) {
			// Given back by closing the channel (top.Close), as Delays
			// does: RabbitMQ 4 counts a nack toward a quorum queue's
			// delivery limit, which would dead-letter a waiting message to
			// the next level, early, and not a return on a closed channel.
			return
		}
		for _, d := range held {
			_ = d.Nack(true) // a failed nack means a closed channel: the broker requeues it too
		}
	}()
	for len(held) < min(limit, depth) {
		d, err := top.Get(ctx, queue)
		if err != nil {
			return view, fmt.Errorf("inspect: %w", err)
		}
		if d == nil {
			break
		}
		held = append(held, d)
		view.Messages = append(view.Messages, viewMessage(ctx, d.Delivery, dec))
	}
	return view, nil
}

// unavailableOnce is a Decoder for one read of several messages: once the
// decoder says its registry could not be asked (an error with an
// Unavailable() bool method reporting true), the messages after it are
// not tried, each getting that reason, so that a registry that is down
// costs one wait, not one for each message read.
type unavailableOnce struct {
	Decoder
	down error
}

func (u *unavailableOnce) Decode(ctx context.Context, body []byte) ([]byte, error) {
	if u.down != nil {
		return nil, u.down
	}
	js, err := u.Decoder.Decode(ctx, body)
	var un interface{ Unavailable() bool }
	if errors.As(err, &un) && un.Unavailable() {
		u.down = err
	}
	return js, err
}
