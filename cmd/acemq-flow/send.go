package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/tracing"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newSendCmd(s streams) *cobra.Command {
	var (
		t         decide.Target
		data      string
		amqpURL   string
		adminAddr string
		token     string
		in, at    string
		wait      time.Duration
		blobsURL  string
		registry  string
	)
	cmd := &cobra.Command{
		Use:   "send [PATH...] (--pipeline|--itinerary|--saga NAME | --exchange X --routing-key K) [--data @file|-|JSON] [--in DURATION | --at TIME] [--wait DURATION]",
		Short: "Send a message into a pipeline, an itinerary, a saga or an exchange",
		Long: `Send a message into a pipeline (its first step, with the declared route), an
itinerary (a slip holding only the stops whose when holds for this payload),
a saga (a new instance, whose id is the message's), or an exchange and
routing key. The flows are read from PATH; without PATH,
the running runtime at --admin builds the message from the flows it runs.

--in and --at deliver it later, through the broker's delay ladder
(acemq.schedule.*): never early, about a second late at most. A running
runtime (acemq-flow run) delivers it when due; the ladder exists once one
has run on the broker.

--wait is request/reply: it waits for the run's reply and prints its payload;
exit 0 when the run completed or stopped, 1 when it was dead-lettered or no
reply came in time. A saga's reply comes when its instance ends, its summary
as payload: exit 0 when it completed, 1 when it was compensated or is
unresolved. With --in or --at, the wait includes the delay.

A payload whose input type is Avro is sent as Avro (FLOW-FORMAT §6): in the
Confluent framing, with the schema id the registry has for the type's
subject, looked up (never registered) in --registry or, by default, in the
registry the running runtime serves at --admin; without PATH the runtime
encodes it.

A payload above the input type's claim_check.above (64 KiB by default; from
the running runtime or to an exchange, the default) goes by claim check: it
is put in the blob store --blobs names, the one the runtime uses, and the
message carries its reference.

Environment: ACEMQ_AMQP_URL (--amqp), ACEMQ_ADMIN_ADDR (--admin),
ACEMQ_ADMIN_TOKEN (--admin-token), ACEMQ_BLOBS_URL (--blobs),
ACEMQ_SCHEMA_REGISTRY_URL (--registry).

Traces: with the standard OTEL_* environment set (OTEL_TRACES_EXPORTER=otlp,
or OTEL_EXPORTER_OTLP_ENDPOINT), the publish is the root span of the message's
trace, exported over OTLP, and its context travels in the traceparent header.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			delay, err := parseWhen(in, at)
			if err != nil {
				return err
			}
			// The target is checked before the payload is read: --data - may
			// wait on standard input.
			if err := checkTarget(t, data); err != nil {
				return err
			}
			payload, err := readData(cmd.Context(), s, data)
			if err != nil {
				return err
			}
			if err := checkSendBlobs(blobsURL); err != nil {
				return err
			}
			var msg decide.Message
			var above int64 // the default threshold, unless the flows say
			if len(args) > 0 {
				_, pl, ds := loadAndCompile(s, args)
				if ds.HasErrors() {
					_ = renderDiagText(s.err, ds)
					return failed("the flows are invalid; fix the errors above")
				}
				if msg, err = decide.FirstMessage(pl, t, payload, time.Now()); err != nil {
					return failed("%v", err)
				}
				above = ops.FirstClaimCheckAbove(pl, t)
				if msg, err = sendAvro(cmd.Context(), registry, adminAddr, token, runtime.FirstInputType(pl, t), msg); err != nil {
					return err
				}
			} else if t.Exchange != "" || t.RoutingKey != "" {
				if msg, err = decide.FirstMessage(&plan.Plan{}, t, payload, time.Now()); err != nil {
					return failed("%v", err)
				}
			} else {
				// No flow files: the running runtime knows the flows.
				if msg, err = admin.NewClient(adminAddr, token).FirstMessage(cmd.Context(), t, payload); err != nil {
					return failed("%v", err)
				}
			}
			if msg, err = sendClaimCheck(cmd.Context(), blobsURL, msg, above); err != nil {
				return err
			}
			dest := msg
			if delay != nil {
				now := time.Now()
				if _, _, err := decide.Delay(&msg, msg.Exchange, msg.RoutingKey, delay(now), now); err != nil {
					return failed("%v", err)
				}
			}
			// With the OTEL_* environment set, the publish is the root span
			// of the message's trace (README, Tracing).
			tp, stopTracing, err := startTracing(cmd.Context(), slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: slog.LevelWarn})))
			if err != nil {
				return failed("%v", err)
			}
			defer stopTracing()
			reply, err := ops.SendTraced(cmd.Context(), amqpURL, msg, wait, tracing.New(tp))
			if err != nil {
				return failed("%v", err)
			}
			if delay != nil {
				fmt.Fprintf(s.err, "sent message %s into the delay ladder, due at %s, for exchange %q with key %q\n",
					msg.MessageID, decide.HeaderText(msg.Headers[plan.HeaderDueAt]), dest.Exchange, dest.RoutingKey)
			} else {
				fmt.Fprintf(s.err, "sent message %s to exchange %q with key %q\n", msg.MessageID, msg.Exchange, msg.RoutingKey)
			}
			if reply == nil {
				return nil
			}
			fmt.Fprintf(s.err, "outcome: %s\n", reply.Outcome)
			if route := reply.Route(); route != "" {
				fmt.Fprintf(s.err, "route: %s\n", route)
			}
			if reply.StoppedAt != "" {
				fmt.Fprintf(s.err, "stopped at: %s\n", reply.StoppedAt)
			}
			if reply.Error != "" {
				fmt.Fprintf(s.err, "error: %s\n", reply.Error)
			}
			payload, err = replyPayload(cmd.Context(), blobsURL, reply)
			if err != nil {
				fmt.Fprintf(s.err, "the reply's payload is claim-checked and could not be fetched: %v; printed is its reference\n", err)
			}
			if len(payload) > 0 {
				fmt.Fprintf(s.out, "%s\n", payload)
			}
			switch reply.Outcome {
			case "dead-lettered", decide.SagaCompensated, decide.SagaUnresolved:
				return silent1
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&t.Pipeline, "pipeline", "", "send into this pipeline's first step")
	f.StringVar(&t.Itinerary, "itinerary", "", "send with this itinerary's slip")
	f.StringVar(&t.Saga, "saga", "", "start an instance of this saga")
	f.StringVar(&t.Exchange, "exchange", "", "publish to this exchange")
	f.StringVar(&t.RoutingKey, "routing-key", "", "with this routing key")
	f.StringVar(&data, "data", "", "the payload: JSON text, @file, or - for standard input")
	f.StringVar(&in, "in", "", "deliver after this delay (1h30m, 90s: up to 2^28-1 s, about 8.5 years)")
	f.StringVar(&at, "at", "", "deliver at this time (RFC 3339: 2026-09-09T14:00:00Z)")
	f.DurationVar(&wait, "wait", 0, "wait this long for the reply (request/reply)")
	f.StringVar(&blobsURL, "blobs", os.Getenv("ACEMQ_BLOBS_URL"), "the runtime's claim-check blob store, for a payload above its claim_check.above: file:DIR, sqlite:PATH or postgres://…, which must exist (env ACEMQ_BLOBS_URL)")
	f.StringVar(&registry, "registry", os.Getenv("ACEMQ_SCHEMA_REGISTRY_URL"), "with PATH, the schema registry an Avro input type's id is looked up in: http(s)://[user:password@]host[:port][/path] (env ACEMQ_SCHEMA_REGISTRY_URL; default: the runtime's admin listener at --admin)")
	f.Lookup("registry").DefValue = stores.Redact(registry)
	amqpFlag(f, &amqpURL)
	f.StringVar(&adminAddr, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "without PATH, the running runtime's admin address, which knows the flows (env ACEMQ_ADMIN_ADDR)")
	f.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "without PATH, the bearer token of the runtime's admin API, when it was started with one: every endpoint but /healthz and /readyz needs it (env ACEMQ_ADMIN_TOKEN)")
	return cmd
}

// checkTarget returns a usage error unless t names exactly one target:
// a pipeline, an itinerary, a saga, or an exchange and routing key. A
// pipeline or an itinerary also needs a payload.
func checkTarget(t decide.Target, data string) error {
	var named, kinds []string
	for _, f := range []struct{ flag, kind, value string }{{"--pipeline", "pipeline", t.Pipeline}, {"--itinerary", "itinerary", t.Itinerary}, {"--saga", "saga", t.Saga}} {
		if f.value != "" {
			named, kinds = append(named, f.flag), append(kinds, f.kind)
		}
	}
	direct := t.Exchange != "" || t.RoutingKey != ""
	switch {
	case len(named) == 0 && !direct:
		return usage("say where to send: --pipeline NAME, --itinerary NAME, --saga NAME, or --exchange X with --routing-key K")
	case len(named) > 1:
		return usage("%s cannot be used together; name one target", strings.Join(named, " and "))
	case len(named) == 1 && direct:
		return usage("%s cannot be used with --exchange or --routing-key; send either to the %s or to an exchange and routing key", named[0], kinds[0])
	}
	if data != "" {
		return nil
	}
	switch {
	case t.Pipeline != "":
		return usage("--pipeline %s needs a payload: give --data with JSON text, @file or - (standard input)", t.Pipeline)
	case t.Itinerary != "":
		return usage("--itinerary %s needs a payload: give --data with JSON text, @file or - (standard input)", t.Itinerary)
	}
	return nil
}

func readData(ctx context.Context, s streams, data string) ([]byte, error) {
	var raw []byte
	var err error
	switch {
	case data == "":
		return nil, nil
	case data == "-":
		// Read beside the wait for Ctrl-C: a pipe that never ends must not
		// hold the command.
		type read struct {
			b   []byte
			err error
		}
		got := make(chan read, 1)
		go func() {
			b, err := io.ReadAll(s.in)
			got <- read{b, err}
		}()
		select {
		case r := <-got:
			raw, err = r.b, r.err
		case <-ctx.Done():
			return nil, failed("read --data -: %v", ctx.Err())
		}
	case data[0] == '@':
		raw, err = os.ReadFile(strings.TrimPrefix(data, "@"))
	default:
		raw = []byte(data)
	}
	if err != nil {
		return nil, failed("read --data %s: %v", data, err)
	}
	if !json.Valid(raw) {
		return nil, failed("--data %s is not JSON", data)
	}
	return raw, nil
}

// parseWhen reads --in and --at: nil when neither is given, otherwise the
// due time as a function of the time of sending.
func parseWhen(in, at string) (func(now time.Time) time.Time, error) {
	switch {
	case in != "" && at != "":
		return nil, usage("--in and --at cannot be used together; give the delay or the time")
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil || d < 0 {
			return nil, usage("--in %q is not a delay; write it as 90s, 15m or 4h30m", in)
		}
		return func(now time.Time) time.Time { return now.Add(d) }, nil
	case at != "":
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, usage("--at %q is not a time; write it in RFC 3339, as 2026-09-09T14:00:00Z or 2026-09-09T16:00:00+02:00", at)
		}
		return func(time.Time) time.Time { return t }, nil
	}
	return nil, nil
}

// checkSendBlobs refuses a --blobs URL of no known scheme, and memory:,
// before anything is read or sent.
func checkSendBlobs(blobsURL string) error {
	if blobsURL == "" {
		return nil
	}
	backend, err := storeurl.BlobsBackend(blobsURL)
	if err != nil {
		return usage("--blobs: %v", err)
	}
	if backend == "memory" {
		return usage("--blobs memory: keeps blobs in this process only, where no runtime can read them; give the --blobs the runtime uses: file:DIR, sqlite:PATH or postgres://…")
	}
	return nil
}

// sendClaimCheck returns msg as it is sent: by claim check when its body is
// above the threshold (FLOW-FORMAT §6), put in the blob store blobsURL
// names, which must then be given; unchanged otherwise.
func sendClaimCheck(ctx context.Context, blobsURL string, msg decide.Message, above int64) (decide.Message, error) {
	if !decide.ShouldClaimCheck(len(msg.Body), above) {
		return msg, nil
	}
	var blobs ops.BlobPutter
	if blobsURL != "" {
		b, err := openRuntimeBlobs(ctx, blobsURL)
		if err != nil {
			return msg, err
		}
		defer b.Close()
		blobs = b
	}
	out, _, err := ops.ClaimCheck(ctx, blobs, msg, above)
	if err != nil {
		return msg, failed("%v", err)
	}
	return out, nil
}

// openRuntimeBlobs opens the blob store blobsURL names, which must be a
// runtime's: send puts in it and reads from it what a runtime reads and
// puts, and never makes one. A file: directory or a SQLite file that does
// not exist, or a SQLite or PostgreSQL database without the blob table,
// is refused, naming it, and nothing is created.
func openRuntimeBlobs(ctx context.Context, blobsURL string) (stores.BlobStore, error) {
	where := redactStore(blobsURL)
	switch backend, _ := storeurl.BlobsBackend(blobsURL); backend {
	case "file":
		if fi, err := os.Stat(storeurl.FilePath(blobsURL)); err != nil || !fi.IsDir() {
			return nil, failed("the blob store %s does not exist (no such directory); give the --blobs the runtime uses", where)
		}
	case "sqlite":
		if fi, err := os.Stat(storeurl.SQLitePath(blobsURL)); err != nil || fi.IsDir() {
			return nil, failed("the blob store %s does not exist (no such file); give the --blobs the runtime uses", where)
		}
	}
	b, err := storeurl.OpenBlobs(ctx, blobsURL, stores.Options{})
	if err != nil {
		return nil, failed("open the blob store %s: %v", where, err)
	}
	if err := b.CheckSchema(ctx); err != nil {
		b.Close()
		var se *stores.SchemaError
		switch {
		case errors.As(err, &se) && se.Have < 0:
			return nil, failed("the blob store %s has no acemq_blobs table, so no runtime keeps its blobs there; give the --blobs the runtime uses (`run --create-schema` or `migrate` makes the table)", where)
		case errors.As(err, &se):
			return nil, failed("%v", schemaError(blobsURL, se))
		}
		return nil, failed("check the blob store %s: %v", where, err)
	}
	return b, nil
}

// replyPayload returns the payload of a reply, fetched from the blob store
// blobsURL names when the reply carries a claim-check reference; on an
// error, the reference as it came.
func replyPayload(ctx context.Context, blobsURL string, r *ops.Reply) ([]byte, error) {
	ref, checked, err := decide.ReadClaimCheck(decide.Message{Headers: r.Headers, Body: r.Payload})
	switch {
	case err != nil:
		return r.Payload, err
	case !checked:
		return r.Payload, nil
	case blobsURL == "":
		return r.Payload, fmt.Errorf("blob %s: give --blobs naming the runtime's blob store", ref.Key)
	}
	b, err := openRuntimeBlobs(ctx, blobsURL)
	if err != nil {
		return r.Payload, err
	}
	defer b.Close()
	body, err := b.GetBlob(ctx, ref.Key)
	if err != nil {
		return r.Payload, err
	}
	return body, nil
}
