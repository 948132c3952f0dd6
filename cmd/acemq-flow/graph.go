package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/plan"
)

func newGraphCmd(io streams) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "graph [--format mermaid|dot] PATH...",
		Short: "Draw the flows: pipelines, itineraries, sagas, schedules and consumers",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			draw, ok := map[string]func(*plan.Plan) string{"mermaid": (*plan.Plan).Mermaid, "dot": (*plan.Plan).DOT}[format]
			if !ok {
				return usage("--format must be mermaid or dot, not %q", format)
			}
			_, p, diags := loadAndCompile(io, args)
			_ = renderDiagText(io.err, diags)
			if diags.HasErrors() {
				return failed("the flows are invalid; fix the errors above")
			}
			_, err := fmt.Fprint(io.out, draw(p))
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", "mermaid", "output format: mermaid or dot")
	return cmd
}
