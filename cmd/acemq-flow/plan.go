package main

import (
	"github.com/spf13/cobra"
)

func newPlanCmd(io streams) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "plan [--format text|json] PATH...",
		Short: "Show the exchanges, queues, bindings and consumers the flows need",
		Long: `Show, without touching a broker, every exchange, queue (retry rungs, .dlq and
.parked included, by full name, with type and arguments), binding and
consumer (prefetch, concurrency, idempotency, retry ladder) the flows need,
and the declaration line of each pipeline.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usage("--format must be text or json, not %q", format)
			}
			_, plan, diags := loadAndCompile(io, args)
			if diags.HasErrors() {
				_ = renderDiagText(io.err, diags)
				return failed("the flows are invalid; fix the errors above (acemq-flow validate shows them too)")
			}
			_ = renderDiagText(io.err, diags)
			if format == "json" {
				return plan.WriteJSON(io.out)
			}
			return plan.WriteText(io.out)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return cmd
}
