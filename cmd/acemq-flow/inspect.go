package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/stores"
)

func newInspectCmd(s streams) *cobra.Command {
	var (
		limit     int
		format    string
		amqpURL   string
		registry  string
		adminAddr string
		token     string
	)
	cmd := &cobra.Command{
		Use:   "inspect QUEUE [--limit N] [--format text|json] [--registry URL]",
		Short: "Show a queue's depth and its first messages without losing any",
		Long: `Show how many messages a queue holds and a readable view of the first
--limit of them: message id, attempt, replays, error, where it failed, the
route position or the carried slip (done ✓ with times in UTC, the current
stop in brackets, then the rest), and the first 200 bytes of the payload.

A claim-checked message shows its blob's key and size, not fetched. An Avro
message (FLOW-FORMAT §6) is shown as JSON, decoded by its writer's schema,
fetched by the id in its frame from --registry or, by default, from the
registry the running runtime serves at --admin; when that cannot be done
(the registry not reached, an unknown id), its first bytes are shown in hex
with the reason.

The messages are read with basic.get and all put back when the command ends.
A classic queue (.dlq and .parked are classic) keeps them in their places.
On a quorum queue, putting them back may change their order, and each
inspect counts one delivery of each message shown, as a failed delivery
does: a message inspected until its deliveries pass the queue's delivery
limit (x-delivery-limit) is dead-lettered. Use --limit 0 on a quorum queue
to see its depth alone.

Environment: ACEMQ_AMQP_URL (--amqp), ACEMQ_SCHEMA_REGISTRY_URL (--registry),
ACEMQ_ADMIN_ADDR (--admin), ACEMQ_ADMIN_TOKEN (--admin-token).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("name one queue to inspect: acemq-flow inspect QUEUE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usage("--limit must be 0 (the depth only) or more, not %d", limit)
			}
			if format != "text" && format != "json" {
				return usage("--format must be text or json, not %q", format)
			}
			dec, err := newAvroDecoder(registry, adminAddr, token)
			if err != nil {
				return err
			}
			view, err := ops.InspectWith(cmd.Context(), amqpURL, args[0], limit, ops.InspectOptions{Decoder: dec})
			if err != nil {
				return failed("%v", err)
			}
			if format == "json" {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(view)
			}
			renderInspectText(s.out, view)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&limit, "limit", 10, "show at most this many messages (0: the depth only; on a quorum queue each message shown counts one delivery)")
	f.StringVar(&format, "format", "text", "output format: text or json")
	f.StringVar(&registry, "registry", os.Getenv("ACEMQ_SCHEMA_REGISTRY_URL"), "the schema registry Avro messages are decoded by: http(s)://[user:password@]host[:port][/path] (env ACEMQ_SCHEMA_REGISTRY_URL; default: the runtime's admin listener at --admin)")
	f.Lookup("registry").DefValue = stores.Redact(registry)
	f.StringVar(&adminAddr, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "without --registry, the running runtime's admin address, whose registry decodes Avro messages (env ACEMQ_ADMIN_ADDR)")
	f.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "the bearer token of the runtime's admin API, when it was started with one (env ACEMQ_ADMIN_TOKEN)")
	amqpFlag(f, &amqpURL)
	return cmd
}

// renderInspectText writes a queue view for a person. Header values are
// escaped like the payload preview, so a message cannot write control
// sequences to the terminal.
func renderInspectText(w io.Writer, v ops.QueueView) {
	fmt.Fprintf(w, "queue %s: %d message(s)", v.Queue, v.Depth)
	if len(v.Messages) > 0 && len(v.Messages) < v.Depth {
		fmt.Fprintf(w, ", showing the first %d", len(v.Messages))
	}
	fmt.Fprintln(w)
	for i, m := range v.Messages {
		fmt.Fprintf(w, "\n%d. message %s\n", i+1, esc(m.MessageID))
		var about []string
		if m.CorrelationID != "" {
			about = append(about, "correlation "+esc(m.CorrelationID))
		}
		if m.Type != "" {
			about = append(about, "type "+esc(m.Type))
		}
		if m.Timestamp != "" {
			about = append(about, "sent "+m.Timestamp)
		}
		if len(about) > 0 {
			fmt.Fprintf(w, "   %s\n", strings.Join(about, ", "))
		}
		fmt.Fprintf(w, "   attempt %d, replays %d", m.Attempt, m.Replays)
		if m.Deliveries > 0 {
			// Quorum queues count every return, inspects included.
			fmt.Fprintf(w, ", returned to the queue %d time(s) (a quorum queue dead-letters it at its delivery limit)", m.Deliveries)
		}
		fmt.Fprintln(w)
		switch {
		case m.Error != "" || m.ErrorKind != "":
			fmt.Fprintf(w, "   error (%s): %s\n", esc(m.ErrorKind), esc(m.Error))
		case m.DeathReason != "":
			fmt.Fprintf(w, "   dead-lettered by the broker: %s\n", esc(m.DeathReason))
		}
		if m.FailedQueue != "" || m.FailedAt != "" {
			fmt.Fprintf(w, "   failed in %s at %s\n", esc(m.FailedQueue), esc(m.FailedAt))
		}
		if m.Delayed {
			fmt.Fprintf(w, "   delayed: due at %s, for exchange %q with key %q", esc(m.DueAt), m.DeliverExchange, m.DeliverRoutingKey)
			if m.DueRetries > 0 {
				fmt.Fprintf(w, " (due and unroutable %d time(s) so far)", m.DueRetries)
			}
			fmt.Fprintln(w)
		}
		if m.RouteText != "" {
			fmt.Fprintf(w, "   route %s\n", esc(m.RouteText))
		}
		switch {
		case m.SlipText != "":
			fmt.Fprintf(w, "   slip %s\n", esc(m.SlipText))
		case m.SlipError != "":
			fmt.Fprintf(w, "   slip cannot be read: %s\n", esc(m.SlipError))
		}
		switch {
		case m.ClaimCheck != nil:
			fmt.Fprintf(w, "   claim check %s: a payload of %d bytes (%s) in the blob store, not fetched\n", esc(m.ClaimCheck.Key), m.ClaimCheck.Size, esc(m.ClaimCheck.ContentType))
		case m.ClaimCheckError != "":
			fmt.Fprintf(w, "   claim check cannot be read: %s\n", esc(m.ClaimCheckError))
		}
		more := ""
		if m.Truncated {
			more = " …"
		}
		switch {
		case m.Avro != nil && m.Avro.Decoded:
			fmt.Fprintf(w, "   payload (%d bytes, Avro, schema id %d, as JSON): %s%s\n", m.Size, m.Avro.SchemaID, m.Preview, more)
		case m.Avro != nil:
			id := ""
			if m.Avro.SchemaID > 0 {
				id = fmt.Sprintf(", schema id %d", m.Avro.SchemaID)
			}
			fmt.Fprintf(w, "   payload (%d bytes, Avro%s, in hex): %s%s\n", m.Size, id, m.Preview, more)
			fmt.Fprintf(w, "   not decoded: %s\n", esc(m.Avro.Note))
		default:
			fmt.Fprintf(w, "   payload (%d bytes): %s%s\n", m.Size, m.Preview, more)
		}
	}
}

func esc(s string) string {
	out, _ := ops.Preview([]byte(s), len(s))
	return out
}
