package runtime_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/test/testenv"
)

// runOnce runs flow until it fails to start or starts; it returns Run's
// error, or nil once the runtime started (and is stopped again).
func runOnce(t *testing.T, url, flow string) error {
	t.Helper()
	rt, err := runtime.New(compileText(t, flow), runtime.Options{AMQPURL: url,
		Handlers: map[string]runtime.HandlerFunc{"k.echo": echo}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-rt.Started():
		cancel()
		return <-done
	case <-time.After(60 * time.Second):
		t.Fatal("Run neither failed nor started within 60s")
		return nil
	}
}

// vhostEntities lists the queues and exchanges of the test's vhost that
// are not the broker's own.
func vhostEntities(t *testing.T, url string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(testenv.Rabbitmqctl(t, "list_queues", "-q", "-p", testenv.VHostOf(url), "name"), "\n") {
		if line = strings.TrimSpace(line); line != "" && line != "name" {
			out = append(out, "queue "+line)
		}
	}
	for _, line := range strings.Split(testenv.Rabbitmqctl(t, "list_exchanges", "-q", "-p", testenv.VHostOf(url), "name"), "\n") {
		if line = strings.TrimSpace(line); line != "" && line != "name" && !strings.HasPrefix(line, "amq.") {
			out = append(out, "exchange "+line)
		}
	}
	slices.Sort(out)
	return out
}

const validateFlow = `version: acemq.flow/v1
name: v
topology:
  apply: validate
  queues:
    - {name: audit.log, type: classic}
plugins:
  k: {command: ./not-started}
pipelines:
  - name: shop
    steps:
      - {name: a, handler: k.echo, retry: {max_attempts: 2, initial_delay: 1s}}
`

// TestValidateCreatesNothingAndNamesEverythingMissing: under
// topology.apply: validate a start on an empty vhost fails naming every
// queue and exchange the flows need, and leaves the vhost as it was.
// Before, it declared the exchanges, step queues, rungs, .dlq and .parked,
// and checked only topology.queues, for existence.
func TestValidateCreatesNothingAndNamesEverythingMissing(t *testing.T) {
	url := testenv.VHost(t)
	err := runOnce(t, url, validateFlow)
	if err == nil {
		t.Fatal("Run under apply: validate on an empty vhost started; want a failure naming what is missing")
	}
	if !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("Run = %v; want it to wrap broker.ErrNotFound", err)
	}
	for _, want := range []string{`queue "audit.log"`, `queue "shop.a"`, `queue "shop.a.retry.1s"`, `queue "shop.a.dlq"`, `queue "shop.a.parked"`,
		`exchange "shop"`, `exchange "acemq.dlx"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error does not name %s:\n%v", want, err)
		}
	}
	if got := vhostEntities(t, url); len(got) != 0 {
		t.Errorf("apply: validate created %v; want nothing", got)
	}
}

// TestValidateStartsOnTheTopologyItChecks: once everything exists, the
// same flow starts, and still creates nothing.
func TestValidateStartsOnTheTopologyItChecks(t *testing.T) {
	url := testenv.VHost(t)
	create := strings.Replace(validateFlow, "apply: validate", "apply: create-only", 1)
	if err := runOnce(t, url, create); err != nil {
		t.Fatalf("Run under create-only: %v", err)
	}
	before := vhostEntities(t, url)
	if err := runOnce(t, url, validateFlow); err != nil {
		t.Fatalf("Run under validate, on what create-only declared: %v", err)
	}
	if after := vhostEntities(t, url); !slices.Equal(before, after) {
		t.Errorf("validate changed the vhost: %v before, %v after", before, after)
	}
}

// TestDriftNamesTheQueueTypeFirstAndDeclaresNothing: a step queue that
// exists as classic while the flow declares quorum fails the start with a
// sentence saying so, the type first, and nothing of that step (its retry
// rungs, .dlq, .parked) is declared first. Before, the error said "exists
// without x-dead-letter-exchange", and the rungs, .dlq and .parked were
// already declared.
func TestDriftNamesTheQueueTypeFirstAndDeclaresNothing(t *testing.T) {
	url := testenv.VHost(t)
	ch := channelOn(t, url)()
	if _, err := ch.QueueDeclare("shop.a", true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatal(err)
	}
	flow := strings.Replace(validateFlow, "apply: validate", "apply: create-only", 1)
	err := runOnce(t, url, flow)
	if err == nil {
		t.Fatal("Run on a classic shop.a that the flow declares quorum started")
	}
	msg := err.Error()
	typeAt, argAt := strings.Index(msg, "classic"), strings.Index(msg, "x-dead-letter-exchange")
	if !strings.Contains(msg, `queue "shop.a"`) || !strings.Contains(msg, "quorum") || typeAt < 0 || (argAt >= 0 && argAt < typeAt) {
		t.Errorf("Run = %v; want the drift of shop.a named, classic against quorum first", err)
	}
	if got := vhostEntities(t, url); !slices.Equal(got, []string{"queue shop.a"}) {
		t.Errorf("a start refused for drift left %v; want only the queue that was there", got)
	}
}
