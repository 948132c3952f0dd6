package ops

import (
	"context"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/test/queuetest"
)

// downDecoder frames every body starting with 0x00 and fails every
// Decode as a registry that cannot be asked, counting them.
type downDecoder struct{ calls int }

type downError struct{}

func (downError) Error() string     { return "the registry is down" }
func (downError) Unavailable() bool { return true }

func (d *downDecoder) Framed(_ string, body []byte) (int, bool) {
	return 7, len(body) > 0 && body[0] == 0
}

func (d *downDecoder) Decode(context.Context, []byte) ([]byte, error) {
	d.calls++
	return nil, downError{}
}

// A registry that cannot be asked is asked once per read of the dead
// letters, not once per message: the others get the same reason, and
// every one is shown in hex.
func TestDeadLettersAskADownRegistryOnce(t *testing.T) {
	q := queuetest.New(t)
	dlq := q.Queue("avro.work.dlq")
	pl := &plan.Plan{
		Consumers: []plan.Consumer{{ID: "avro.work", Flow: "avro", Queue: q.NS + ".avro.work"}},
		Queues:    []plan.Queue{{Name: dlq}},
	}
	for _, id := range []string{"a-1", "a-2", "a-3"} {
		q.Put(dlq, id, amqp.Table{plan.HeaderError: "refused"}, "\x00\x00\x00\x00\x07\x02")
	}
	dec := &downDecoder{}
	v, err := DeadLettersWith(t.Context(), q.URL, pl, 100, 5, InspectOptions{Decoder: dec})
	if err != nil {
		t.Fatalf("DeadLettersWith = %v", err)
	}
	if dec.calls != 1 {
		t.Errorf("DeadLettersWith asked the down registry %d times, want once", dec.calls)
	}
	if len(v.Groups) != 1 || len(v.Groups[0].First) != 3 {
		t.Fatalf("DeadLettersWith = %+v, want one group of 3", v.Groups)
	}
	for _, m := range v.Groups[0].First {
		if m.Avro == nil || m.Avro.Decoded || m.Avro.SchemaID != 7 || !strings.Contains(m.Avro.Note, "the registry is down") || !strings.HasPrefix(m.Preview, "00 00 00 00 07") {
			t.Errorf("dead letter %s shows %q (avro %+v); want hex and the registry's reason", m.MessageID, m.Preview, m.Avro)
		}
	}
}
