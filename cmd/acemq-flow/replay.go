package main

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/runtime/tracing"
)

func newReplayCmd(s streams) *cobra.Command {
	var (
		opts    ops.ReplayOptions
		amqpURL string
	)
	cmd := &cobra.Command{
		Use:   "replay QUEUE.dlq [--to QUEUE] [--limit N] [--max-replays 3] [--dry-run]",
		Short: "Move dead-lettered messages back to the queue they failed on",
		Long: `Move the messages of a dead-letter queue (or a parked queue) back to the
queue each failed on, or to --to, with the same message id, x-acemq-attempt
reset to 1, x-acemq-replays one more, and the error headers removed. A
message replayed more than --max-replays times goes to <queue>.parked
instead; replaying a parked queue leaves such a message where it is unless
--max-replays is raised. Each message is acknowledged on QUEUE only after the
broker confirmed and routed its publish. Only the messages in QUEUE when the
replay starts are moved.

--dry-run reads every message, prints what would happen, and puts them all
back: a classic queue (.dlq and .parked are classic) keeps them in their
places, while a quorum queue may change their order and counts the look as
one delivery of each message.

Environment: ACEMQ_AMQP_URL (--amqp).

Traces: with the standard OTEL_* environment set (OTEL_TRACES_EXPORTER=otlp,
or OTEL_EXPORTER_OTLP_ENDPOINT), each message moved is a producer span in the
trace the message carries, exported over OTLP.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("name one queue to replay from: acemq-flow replay QUEUE.dlq")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Limit < 0 {
				return usage("--limit must be 0 (every message) or more, not %d", opts.Limit)
			}
			if opts.MaxReplays < 1 {
				return usage("--max-replays must be 1 or more, not %d", opts.MaxReplays)
			}
			opts.From = args[0]
			// With the OTEL_* environment set, each message moved is a
			// producer span in the message's trace (README, Tracing).
			tp, stopTracing, err := startTracing(cmd.Context(), slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: slog.LevelWarn})))
			if err != nil {
				return failed("%v", err)
			}
			defer stopTracing()
			opts.Tracer = tracing.New(tp)
			bar := newProgress(s.err, "replay "+opts.From)
			opts.Progress = bar.set
			sum, err := ops.Replay(cmd.Context(), amqpURL, opts)
			bar.finish(sum)
			renderReplay(s.out, sum, opts)
			if err != nil {
				return failed("%v", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.To, "to", "", "replay every message to this queue (default: the queue each failed on)")
	f.IntVar(&opts.Limit, "limit", 0, "move at most this many messages (0: all)")
	f.IntVar(&opts.MaxReplays, "max-replays", ops.DefaultMaxReplays, "park a message instead once it was replayed this many times")
	f.BoolVar(&opts.DryRun, "dry-run", false, "print what would happen and move nothing")
	amqpFlag(f, &amqpURL)
	return cmd
}

// progress is a progress bar on a terminal; elsewhere it stays silent until
// a final line.
type progress struct {
	w     io.Writer
	desc  string
	tty   bool
	bar   *progressbar.ProgressBar
	done  int
	total int
}

func newProgress(w io.Writer, desc string) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, desc: desc, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progress) set(done, total int) {
	p.done, p.total = done, total
	if !p.tty {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.desc),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish(),
		)
	}
	_ = p.bar.Set(done)
}

func (p *progress) finish(sum ops.ReplaySummary) {
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Exit()
		return
	}
	if !p.tty {
		fmt.Fprintf(p.w, "%s: %d of %d message(s) handled\n", p.desc, p.done, sum.Total)
	}
}

// renderReplay prints what a replay did, or in a dry run would do.
func renderReplay(w io.Writer, sum ops.ReplaySummary, opts ops.ReplayOptions) {
	for _, a := range sum.Actions {
		switch {
		case a.Left != "" && opts.DryRun:
			fmt.Fprintf(w, "would leave message %q in %q: %s\n", a.MessageID, sum.From, a.Left)
		case a.Left != "":
			fmt.Fprintf(w, "left message %q in %q: %s\n", a.MessageID, sum.From, a.Left)
		case a.Parked:
			fmt.Fprintf(w, "would park message %q in %q (replayed %d time(s); --max-replays %d)\n", a.MessageID, a.Queue, a.Replays, opts.MaxReplays)
		default:
			fmt.Fprintf(w, "would move message %q to %q (replay %d)\n", a.MessageID, a.Queue, a.Replays)
		}
	}
	if opts.DryRun {
		fmt.Fprintf(w, "dry run: looked at %d of the %d message(s) in %q; nothing moved\n", sum.Skipped, sum.Left, sum.From)
		return
	}
	for _, q := range slices.Sorted(maps.Keys(sum.MovedTo)) {
		fmt.Fprintf(w, "moved %d message(s) to %q\n", sum.MovedTo[q], q)
	}
	for _, q := range slices.Sorted(maps.Keys(sum.ParkedIn)) {
		fmt.Fprintf(w, "parked %d message(s) in %q\n", sum.ParkedIn[q], q)
	}
	fmt.Fprintf(w, "replayed from %q: %d moved, %d parked, %d left\n", sum.From, sum.Moved, sum.Parked, sum.Left)
}
