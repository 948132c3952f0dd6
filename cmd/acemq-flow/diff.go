package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/acemq/acemq-flow/runtime/flowdiff"
)

func newDiffCmd(io streams) *cobra.Command {
	var (
		format, base, amqpURL string
		all                   bool
	)
	cmd := &cobra.Command{
		Use:   "diff [--format text|json|github] [--all] [--amqp URL] (OLD NEW | --base GIT-REF PATH...)",
		Short: "Name the changes between two versions of the flows that break what is in flight",
		Long: `Compare two versions of the flows, OLD and NEW (files or folders, loaded as
validate loads them), or the flows under each PATH with the same PATH at
GIT-REF (--base origin/main flows/), and report every change that breaks
what is deployed or in flight (FLOW-FORMAT §7): a removed or renamed step,
stop, saga step or consumer whose queue may hold messages, a queue's type or
arguments changed (the broker refuses the redeclare), an input type
narrowed, a reordered route, retry queues the new ladder orphans, a removed
binding, a changed exchange type. Each one says what happens to the
messages in flight and how to deploy it safely, at the new file's
file:line:col (the old file's for a removal). --all also lists the changes
that break nothing, as notices.

With --amqp, the depth of each affected queue is read from that broker
(passive declares, nothing changed): a breaking change whose queues are all
empty is a warning. Exit 1 on a breaking change, 0 otherwise, 2 on usage
errors and flows that do not load.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := diffRenderers[format]; !ok {
				return usage("--format must be text, json or github, not %q", format)
			}
			switch {
			case base == "" && len(args) != 2:
				return usage("diff needs OLD and NEW, or --base GIT-REF and at least one PATH; see `acemq-flow diff --help`")
			case base != "" && len(args) == 0:
				return usage("diff --base %s needs the PATHs whose flows to compare, such as flows/", base)
			}
			old, newer, cleanup, err := diffSides(cmd.Context(), io, format, base, args)
			defer cleanup()
			if err != nil {
				return err
			}
			changes := flowdiff.Compare(old, newer)
			if amqpURL != "" {
				if err := settleOnBroker(cmd.Context(), amqpURL, changes); err != nil {
					return failed("%v", err)
				}
			}
			return reportChanges(io, format, all, changes)
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "text", "output format: text, json or github")
	f.StringVar(&base, "base", "", "compare each PATH with the same PATH at this git ref (a branch, tag or commit)")
	f.BoolVar(&all, "all", false, "also list the changes that break nothing")
	f.StringVar(&amqpURL, "amqp", "", "read the affected queues' depths from this broker: a breaking change whose queues are empty is a warning")
	return cmd
}

// diffSides loads the old and the new flows. A side that does not load
// prints its diagnostics and gives exit 2.
func diffSides(ctx context.Context, io streams, format, base string, args []string) (old, newer flowdiff.Side, cleanup func(), err error) {
	cleanup = func() {}
	newPaths := args
	if base == "" {
		newPaths = args[1:]
		if old, err = loadDiffSide(io, format, "the old flows", args[:1]); err != nil {
			return old, newer, cleanup, err
		}
	} else {
		var g *gitBase
		if g, err = readGitBase(ctx, base, args); err != nil {
			return old, newer, cleanup, usage("%v", err)
		}
		cleanup = g.remove
		if old, err = g.load(io, format); err != nil {
			return old, newer, cleanup, err
		}
	}
	newer, err = loadDiffSide(io, format, "the new flows", newPaths)
	return old, newer, cleanup, err
}

// loadDiffSide loads and compiles flows named by OS paths, as validate
// does.
func loadDiffSide(io streams, format, which string, paths []string) (flowdiff.Side, error) {
	set, pl, diags := loadAndCompile(io, paths)
	if pl == nil {
		return flowdiff.Side{}, loadFailed(io, format, which, diags)
	}
	return flowdiff.Side{Flows: set.Flows, Plan: pl, ReadFile: os.ReadFile}, nil
}

// settleOnBroker reads the depth of every queue a breaking change strands,
// with passive declares on one connection.
func settleOnBroker(ctx context.Context, url string, changes flowdiff.Changes) error {
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := broker.Open(octx, url, broker.ConnOptions{Name: "acemq-flow diff"})
	if err != nil {
		return fmt.Errorf("read queue depths: connect to the broker at %s: %w", redactStore(url), err)
	}
	defer conn.Close()
	top := broker.NewTopology(conn, nil)
	defer top.Close()
	return flowdiff.Settle(changes, func(queue string) (int, bool, error) {
		info, err := top.Inspect(ctx, queue)
		if errors.Is(err, broker.ErrNotFound) {
			return 0, false, nil
		}
		return info.Messages, err == nil, err
	})
}

// reportChanges prints the changes (the breaking ones, or all with --all)
// and gives exit 1 when one breaks.
func reportChanges(io streams, format string, all bool, changes flowdiff.Changes) error {
	var shown flowdiff.Changes
	breaking, warnings, others := 0, 0, 0
	for _, c := range changes {
		switch c.Severity() {
		case "error":
			breaking++
		case "warning":
			warnings++
		default:
			others++
			if !all {
				continue
			}
		}
		shown = append(shown, c)
	}
	if err := diffRenderers[format](io.out, shown); err != nil {
		return failed("write the changes: %w", err)
	}
	if format == "text" {
		more := ""
		if others > 0 && !all {
			more = " (--all lists them)"
		}
		fmt.Fprintf(io.err, "%d breaking change(s), %d breaking with nothing in flight now (warnings), %d that break nothing%s\n",
			breaking, warnings, others, more)
	}
	if changes.Breaking() {
		return silent1
	}
	return nil
}
