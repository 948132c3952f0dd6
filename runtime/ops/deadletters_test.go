package ops

import (
	"slices"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/queuetest"
)

// DeadLetters groups each consumer's dead letters by error, the largest
// group first, keeps each group's first messages with inspect's view,
// leaves out a `.dlq` the broker does not have, and takes nothing: the
// queue holds the same messages in the same order after.
func TestDeadLettersGroupsByConsumerAndError(t *testing.T) {
	q := queuetest.New(t)
	dlq := q.Queue("pay.charge.dlq")
	charge, ship := q.NS+".pay.charge", q.NS+".pay.ship"
	pl := &plan.Plan{
		Consumers: []plan.Consumer{
			{ID: "pay.charge", Flow: "shop", Step: "charge", Queue: charge},
			{ID: "pay.ship", Flow: "shop", Step: "ship", Queue: ship}, // its .dlq is not on the broker
		},
		Queues: []plan.Queue{{Name: dlq}, {Name: plan.DeadLetterQueue(ship)}},
	}
	declined := amqp.Table{plan.HeaderError: "card declined", plan.HeaderErrorKind: "fatal", plan.HeaderFailedQueue: charge}
	slow := amqp.Table{plan.HeaderError: "bank timed out", plan.HeaderErrorKind: "retryable", plan.HeaderFailedQueue: charge}
	q.Put(dlq, "m-1", declined, `{"order":1}`)
	q.Put(dlq, "m-2", slow, `{"order":2}`)
	q.Put(dlq, "m-3", declined, `{"order":3}`)
	q.Put(dlq, "m-4", declined, `{"order":4}`)

	v, err := DeadLetters(t.Context(), q.URL, pl, 100, 2)
	if err != nil {
		t.Fatalf("DeadLetters = %v", err)
	}
	if len(v.Queues) != 1 || v.Queues[0].Queue != dlq || v.Queues[0].Depth != 4 || v.Queues[0].Read != 4 || v.Queues[0].Consumer != "pay.charge" {
		t.Errorf("DeadLetters read %+v, want %s alone (depth 4, 4 read): the missing .dlq left out", v.Queues, dlq)
	}
	if len(v.Groups) != 2 {
		t.Fatalf("DeadLetters: %d groups %+v, want 2", len(v.Groups), v.Groups)
	}
	g := v.Groups[0]
	if g.Flow != "shop" || g.Consumer != "pay.charge" || g.Step != "charge" || g.Error != "card declined" || g.ErrorKind != "fatal" || g.Count != 3 {
		t.Errorf("the first group = %+v, want shop pay.charge's 3 fatal card declined", g)
	}
	if len(g.First) != 2 || g.First[0].MessageID != "m-1" || g.First[1].MessageID != "m-3" || g.First[0].Preview != `{"order":1}` {
		t.Errorf("the first group's first messages = %+v, want m-1 and m-3 with their previews", g.First)
	}
	if v.Groups[1].Error != "bank timed out" || v.Groups[1].Count != 1 {
		t.Errorf("the second group = %+v, want 1 bank timed out", v.Groups[1])
	}

	// A read limit counts among the messages read.
	q.WaitDepth(dlq, 4)
	v, err = DeadLetters(t.Context(), q.URL, pl, 2, 5)
	if err != nil || len(v.Queues) != 1 || v.Queues[0].Read != 2 || v.Queues[0].Depth != 4 || len(v.Groups) != 2 || v.Groups[0].Count+v.Groups[1].Count != 2 {
		t.Errorf("DeadLetters(read 2) = %+v, %v; want 2 of 4 read, in 2 groups of 1", v, err)
	}

	q.WaitDepth(dlq, 4)
	var ids []string
	for _, d := range q.Drain(dlq) {
		ids = append(ids, d.MessageId)
	}
	if want := []string{"m-1", "m-2", "m-3", "m-4"}; !slices.Equal(ids, want) {
		t.Errorf("%s holds %v after DeadLetters, want %v: nothing taken, the order kept", dlq, ids, want)
	}
}
