package runtime_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"testing/fstest"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// A Go program embeds the runtime and serves a step in process, next to
// (or instead of) plugin handlers.
func ExampleNew() {
	fsys := fstest.MapFS{"flows/greet.yaml": {Data: []byte(`version: acemq.flow/v1
name: greet
plugins:
  words: {command: ./words}
pipelines:
  - name: greet
    steps:
      - {name: shout, handler: words.shout}
`)}}
	set, err := spec.Load(fsys, "flows")
	if err != nil {
		log.Fatal(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		log.Fatal(err)
	}
	rt, err := runtime.New(pl, runtime.Options{
		AMQPURL: "amqp://guest:guest@localhost:5672/",
		Handlers: map[string]runtime.HandlerFunc{
			"words.shout": func(_ context.Context, req runtime.Request) (decide.Result, error) {
				return decide.Result{Payload: req.Payload}, nil
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := rt.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
