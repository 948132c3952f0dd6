package runtime_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
)

// A program that embeds the runtime delivers a message later through the
// delay ladder: here, an invoice reminder to the billing exchange in four
// hours. Options.Delays makes this runtime declare the ladder and deliver
// what is due even though its own flows have no step delay; PublishIn
// returns once the broker has the message in the ladder.
func ExampleRuntime_PublishIn() {
	var pl plan.Plan // the program's flows, compiled as in ExampleNew
	rt, err := runtime.New(&pl, runtime.Options{AMQPURL: "amqp://guest:guest@localhost:5672/", Delays: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	select {
	case <-rt.Started():
	case err := <-done:
		log.Fatal(err)
	}
	err = rt.PublishIn(ctx, decide.Message{
		Exchange:    "billing",
		RoutingKey:  "invoice.remind",
		ContentType: "application/json",
		Body:        []byte(`{"invoice":"INV-1001"}`),
	}, 4*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
}
