package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/ops"
)

func newDelaysCmd(s streams) *cobra.Command {
	var (
		format  string
		amqpURL string
		scan    int
	)
	cmd := &cobra.Command{
		Use:   "delays [--amqp URL] [--format text|json]",
		Short: "Show the delay ladder: each level's depth and the due time at its head",
		Long: `Show the broker's delay ladder (acemq.schedule.0 to acemq.schedule.27): how
many messages wait in each level, the due time (x-acemq-due-at) and
destination of the message at each level's head, how many are due in
acemq.schedule.due and how many runtimes consume it, and how many wait as
unroutable: due once, their destination took nothing, back in the ladder to
be tried again every 10 s.

Messages are read with basic.get and given back when the command ends,
nothing acknowledged. The unroutable count reads up to --scan messages of
each level an unroutable message waits in (1 and 3) and says when it did not
read them all.

Environment: ACEMQ_AMQP_URL (--amqp).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usage("--format must be text or json, not %q", format)
			}
			if scan < 1 {
				return usage("--scan must be 1 or more, not %d", scan)
			}
			view, err := ops.Delays(cmd.Context(), amqpURL, scan)
			if err != nil {
				return failed("%v", err)
			}
			if format == "json" {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(view)
			}
			renderDelaysText(s.out, view)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "text", "output format: text or json")
	f.IntVar(&scan, "scan", 1000, "read at most this many messages of each level unroutable messages wait in, to count them")
	amqpFlag(f, &amqpURL)
	return cmd
}

// renderDelaysText writes the ladder for a person: one line per level,
// then `.due` and the unroutable count.
func renderDelaysText(w io.Writer, v ops.LadderView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "level\tqueue\twait\tdepth\thead due at\thead goes to")
	waiting := 0
	for _, l := range v.Levels {
		waiting += l.Depth
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", l.Level, l.Queue, l.Wait, l.Depth, orDash(esc(l.HeadDueAt)), orDash(esc(l.HeadDestination)))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d message(s) waiting in the levels\n", waiting)
	fmt.Fprintf(w, "acemq.schedule.due: %d message(s) due, %d consumer(s)", v.Due, v.DueConsumers)
	if v.DueConsumers == 0 {
		fmt.Fprint(w, " (no runtime delivers what is due: start acemq-flow run)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "unroutable: %d", v.Unroutable)
	if !v.Complete {
		fmt.Fprintf(w, " among the first %d messages read of levels 1 and 3 (raise --scan to read more)", v.Scanned)
	}
	fmt.Fprintln(w)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
