package ops

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/test/queuetest"
)

// inspect shows a claim-checked message's key and size without fetching
// anything (FLOW-FORMAT §6), a broken reference's reason, and nothing of
// the kind for a message whose body travels inline.
func TestInspectShowsAClaimCheckWithoutFetching(t *testing.T) {
	q := queuetest.New(t)
	dlq := q.Queue("scans.read.dlq")
	key := "sha256:" + strings.Repeat("ab", 32)
	ref := decide.ClaimCheck{Key: key, Size: 10 << 20, ContentType: "application/json"}
	q.Put(dlq, "checked", amqp.Table{decide.HeaderClaimCheck: key}, string(ref.Body()))
	q.Put(dlq, "broken", amqp.Table{decide.HeaderClaimCheck: key}, `{"scan":1}`)
	q.Put(dlq, "inline", nil, `{"scan":2}`)

	view, err := Inspect(t.Context(), q.URL, dlq, 10)
	if err != nil {
		t.Fatalf("Inspect(%s) = %v", dlq, err)
	}
	if len(view.Messages) != 3 {
		t.Fatalf("Inspect(%s): %d message(s), want 3", dlq, len(view.Messages))
	}
	c := view.Messages[0]
	if c.ClaimCheck == nil || *c.ClaimCheck != (ClaimCheckView{Key: key, Size: 10 << 20, ContentType: "application/json"}) || c.ClaimCheckError != "" {
		t.Errorf("Inspect: claim-checked message: claim check %+v, error %q; want key %s, 10 MiB, application/json", c.ClaimCheck, c.ClaimCheckError, key)
	}
	if c.Size != len(ref.Body()) {
		t.Errorf("Inspect: claim-checked message size %d, want the reference's %d bytes on the queue", c.Size, len(ref.Body()))
	}
	b := view.Messages[1]
	if b.ClaimCheck != nil || !strings.Contains(b.ClaimCheckError, "malformed claim-check reference") {
		t.Errorf("Inspect: a header on a body that is no reference: claim check %+v, error %q; want the reason", b.ClaimCheck, b.ClaimCheckError)
	}
	if i := view.Messages[2]; i.ClaimCheck != nil || i.ClaimCheckError != "" {
		t.Errorf("Inspect: an inline message shows claim check %+v, error %q; want none", i.ClaimCheck, i.ClaimCheckError)
	}
	q.WaitDepth(dlq, 3)
}
