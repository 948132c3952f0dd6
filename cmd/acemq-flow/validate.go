package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/spec"
)

func newValidateCmd(io streams) *cobra.Command {
	var format string
	var plugins bool
	var blobRetention time.Duration
	cmd := &cobra.Command{
		Use:   "validate [--format text|json|github] [--plugins] [--blob-retention 720h] PATH...",
		Short: "Check flow files and report every problem with file:line:col",
		Long: `Check flow files for CI: YAML, the flow schema, names, handlers, types,
the type flow between steps, and when expressions. Needs no broker, no
database and no plugin binary (--plugins also starts each plugin and checks
that every handler the flows name exists). It warns where a message could
wait longer than the blob store keeps a claim-checked payload (a retry
ladder, a step delay or a queue's x-message-ttl longer than
--blob-retention): give it the retention the runtime runs with. Exit 0 when
valid (warnings allowed), 1 when any file is invalid, 2 on usage errors.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			render, ok := diagRenderers[format]
			if !ok {
				return usage("--format must be text, json or github, not %q", format)
			}
			if blobRetention <= 0 {
				return usage("--blob-retention must be a positive duration (720h, say), not %s", blobRetention)
			}
			set, plan, diags := loadAndCompile(io, args)
			if plan != nil {
				diags = mergeDiags(diags, spec.CheckBlobRetention(set.Flows, blobRetention))
			}
			if plan != nil && plugins {
				diags = mergeDiags(diags, runtime.CheckPlugins(cmd.Context(), plan))
			}
			if err := render(io.out, diags); err != nil {
				return failed("write diagnostics: %w", err)
			}
			if diags.HasErrors() {
				return silent1
			}
			if format == "text" {
				fmt.Fprintf(io.err, "%d path(s) valid\n", len(args))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json or github")
	cmd.Flags().BoolVar(&plugins, "plugins", false, "also start each plugin and check that the handlers the flows name exist")
	cmd.Flags().DurationVar(&blobRetention, "blob-retention", spec.DefaultBlobRetention, "the runtime's --blob-retention: warn where a message could wait longer than a claim-checked payload is kept")
	return cmd
}
