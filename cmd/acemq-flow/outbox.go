package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newOutboxCmd(s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Look at the transactional outbox",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usage("name a subcommand: acemq-flow outbox list [--stuck]")
		},
	}
	cmd.AddCommand(newOutboxListCmd(s))
	return cmd
}

func newOutboxListCmd(s streams) *cobra.Command {
	var (
		storeURL string
		stuck    bool
		limit    int
	)
	cmd := &cobra.Command{
		Use:   "list [--stuck] [--store URL] [--limit N]",
		Short: "List the outbox records not yet published, or those stuck",
		Long: `List the outbox records the relay has not published yet, oldest first: id,
exchange, routing key, failed attempts, age, the latest error and the start
of the body, and, when a listed record has one, when it is to be delivered
(DELIVER AT, UTC: the relay puts such a record into the delay ladder, and a
runtime delivers it then). --stuck lists instead the records the relay no longer hands out
because they failed too often (unroutable, say); they stay until someone fixes
the cause and requeues them (see stores/README.md).

Environment: ACEMQ_STORE_URL (--store).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := storeurl.Backend(storeURL); err != nil {
				return usage("--store: %v", err)
			}
			if limit < 0 {
				return usage("--limit must be 0 (all) or more, not %d", limit)
			}
			set, err := openStore(cmd.Context(), storeURL, 0, false)
			if err != nil {
				return failed("%v", err)
			}
			defer set.Close()
			list, what := set.ListPending, "pending"
			if stuck {
				list, what = set.ListStuck, "stuck"
			}
			recs, err := list(cmd.Context(), limit)
			if err != nil {
				return failed("list %s outbox records in %s: %v", what, redactStore(storeURL), err)
			}
			renderOutbox(s.out, what, recs, time.Now())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store holding the outbox: postgres://…, sqlite:PATH or memory: (env ACEMQ_STORE_URL)")
	f.BoolVar(&stuck, "stuck", false, "list the records no longer handed out")
	f.IntVar(&limit, "limit", 50, "list at most this many records (0: all)")
	return cmd
}

// outboxPreview is how much of a body outbox list shows.
const outboxPreview = 40

// renderOutbox writes records as a table. Every text that came from a
// writer (names, errors, body) is escaped, so a record cannot write control
// sequences to the terminal.
func renderOutbox(w io.Writer, what string, recs []stores.OutboxRecord, now time.Time) {
	if len(recs) == 0 {
		fmt.Fprintf(w, "no %s outbox records\n", what)
		return
	}
	// DELIVER AT only when a record is to be delivered later: most
	// outboxes never are.
	delayed := slices.ContainsFunc(recs, func(r stores.OutboxRecord) bool { return !r.DeliverAt.IsZero() })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if delayed {
		fmt.Fprintln(tw, "ID\tEXCHANGE\tROUTING KEY\tATTEMPTS\tAGE\tDELIVER AT\tLAST ERROR\tBODY")
	} else {
		fmt.Fprintln(tw, "ID\tEXCHANGE\tROUTING KEY\tATTEMPTS\tAGE\tLAST ERROR\tBODY")
	}
	for _, r := range recs {
		body, cut := ops.Preview(r.Body, outboxPreview)
		if cut {
			body += "…"
		}
		lastErr := r.LastError
		if r.Invalid != nil && lastErr == "" {
			lastErr = r.Invalid.Error()
		}
		if lastErr == "" {
			lastErr = "-"
		}
		ex := r.Exchange
		if ex == "" {
			ex = "(default)"
		}
		age := outboxAge(now.Sub(r.CreatedAt))
		if delayed {
			age += "\t" + outboxDeliverAt(r.DeliverAt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, esc(ex), esc(r.RoutingKey), r.Attempts,
			age, esc(lastErr), body)
	}
	tw.Flush()
}

// outboxDeliverAt writes a record's deliver_at in UTC to the second, or
// "-" for none.
func outboxDeliverAt(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// outboxAge writes a duration the way a person reads an age: 45s, 12m, 3h, 2d.
func outboxAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
