package main

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/test/testenv"
)

// TestDiffReadsQueueDepths runs diff --amqp against a broker of its own
// (a vhost): a removed step whose queues hold nothing is a warning, a
// removed pipeline with a message in a .dlq stays an error, and a change
// the broker refuses at the redeclare stays an error whatever the depths.
func TestDiffReadsQueueDepths(t *testing.T) {
	url := testenv.VHost(t)
	ch := testenv.ConfirmedChannel(t, url)
	// orders.charge exists and is empty; its ladder was never declared
	// (missing counts as empty). legacy.export.dlq holds a dead letter.
	for _, q := range []string{"orders.charge", "legacy.export", "legacy.export.dlq"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "legacy.export.dlq", true, false, amqp.Publishing{Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish to legacy.export.dlq: confirmed %t, %v", ok, err)
	}

	out, errOut, code := cli(t, "diff", "--amqp", url, "testdata/diff/steps/old", "testdata/diff/steps/new")
	if code != 1 {
		t.Fatalf("diff --amqp steps: exit %d, want 1 (the removed pipeline holds a dead letter)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		`old/shop.yaml:10:10: warning: step "charge" of pipeline "orders" is removed; the broker holds no ready message in queues "orders.charge",`,
		`old/shop.yaml:21:5: error: pipeline "legacy" is removed`,
		`new/shop.yaml:15:5: warning: the steps of pipeline "billing" are reordered`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff --amqp steps: stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "1 breaking change(s), 3 breaking with nothing in flight now (warnings)") {
		t.Errorf("diff --amqp steps: stderr %q, want 1 breaking and 3 warnings", errOut)
	}

	if _, err := ch.QueuePurge("legacy.export.dlq", false); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = cli(t, "diff", "--amqp", url, "testdata/diff/steps/old", "testdata/diff/steps/new")
	if code != 0 || strings.Contains(out, "error:") {
		t.Errorf("diff --amqp steps with every queue empty: exit %d, want 0 and warnings only\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	out, _, code = cli(t, "diff", "--amqp", url, "testdata/diff/queues/old", "testdata/diff/queues/new")
	if code != 1 || !strings.Contains(out, `error: queue "orders.validate" of step "validate" of pipeline "orders" changes type`) ||
		!strings.Contains(out, `warning: consumer "fax" of queue "fax.out" is removed`) {
		t.Errorf("diff --amqp queues: exit %d, want 1 with the type change an error and the removed consumer a warning:\n%s", code, out)
	}

	_, errOut, code = cli(t, "diff", "--amqp", "amqp://guest:secret@127.0.0.1:1/", "testdata/diff/steps/old", "testdata/diff/steps/new")
	if code != 1 || !strings.Contains(errOut, "read queue depths: connect to the broker") || strings.Contains(errOut, "secret") {
		t.Errorf("diff --amqp to nothing: exit %d, stderr %q; want exit 1 naming the broker without its password", code, errOut)
	}
}
