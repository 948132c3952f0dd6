package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/admin"
)

func newConsumersCmd(s streams) *cobra.Command {
	var adminAddr, token, format string
	cmd := &cobra.Command{
		Use:   "consumers list | start ID | stop ID | scale ID N | prefetch ID N",
		Short: "See and steer the running runtime's consumers",
		Long: `See and steer the consumers of a running runtime, through its admin API
(--admin, env ACEMQ_ADMIN_ADDR; --admin-token, env ACEMQ_ADMIN_TOKEN, when the
runtime was started with one (it must be, beyond loopback): every call then
needs it, list included). stop drains the consumer first; scale and
prefetch restart the group's broker consumer with the new values, as a stop
and a start would: what it prefetched goes back to the queue, and the
command returns once what was in flight has finished (up to the drain
timeout); a group needs at least one consumer.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&adminAddr, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "the runtime's admin address (env ACEMQ_ADMIN_ADDR)")
	pf.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "bearer token of the runtime's admin API, which then guards every endpoint but /healthz and /readyz, reads included: give it when the runtime has one (env ACEMQ_ADMIN_TOKEN)")
	client := func() *admin.Client { return admin.NewClient(adminAddr, token) }
	list := &cobra.Command{
		Use:   "list",
		Short: "List consumers with state, queue, size, prefetch and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := client().Consumers(cmd.Context())
			if err != nil {
				return failed("%v", err)
			}
			if format == "json" {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"consumers": list})
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tQUEUE\tDEPTH\tSIZE\tPREFETCH\tIN-FLIGHT\tCOUNTERS")
			for _, c := range list {
				depth := "-"
				if c.Depth != nil {
					depth = strconv.Itoa(*c.Depth)
				}
				var counters []string
				for _, k := range slices.Sorted(maps.Keys(c.Counters)) {
					if c.Counters[k] > 0 {
						counters = append(counters, fmt.Sprintf("%s=%d", k, c.Counters[k]))
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", c.ID, c.State, c.Queue, depth, c.Size, c.Prefetch, c.InFlight, strings.Join(counters, " "))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&format, "format", "text", "text or json")
	// needID is the usage error of a subcommand called without its consumer
	// id or with the wrong number of arguments.
	needID := func(use string, n int) cobra.PositionalArgs {
		return func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usage("name the consumer id: acemq-flow consumers %s; `acemq-flow consumers list` shows the ids", use)
			case len(args) != n:
				return usage("`acemq-flow consumers %s` takes %d argument(s), not %d", use, n, len(args))
			}
			return nil
		}
	}
	simple := func(use, short, verb string) *cobra.Command {
		return &cobra.Command{Use: use + " ID", Short: short, Args: needID(use+" ID", 1), RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().Change(cmd.Context(), args[0], verb); err != nil {
				return failed("%v", err)
			}
			fmt.Fprintf(s.err, "consumer %s: %s done\n", args[0], verb)
			return nil
		}}
	}
	// number is a subcommand that sets param to N, lo ≤ N ≤ hi (hi 0: no
	// upper bound); why says where the range comes from.
	number := func(use, short, verb, param string, lo, hi int, why string) *cobra.Command {
		valid := fmt.Sprintf("%d or more", lo)
		if hi > 0 {
			valid = fmt.Sprintf("from %d to %d", lo, hi)
		}
		return &cobra.Command{Use: use + " ID N", Short: short, Args: needID(use+" ID N", 2), RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return usage("%s %q is not a whole number; give %s", param, args[1], valid)
			}
			if n < lo || (hi > 0 && n > hi) {
				return usage("%s must be %s (%s), not %d", param, valid, why, n)
			}
			if err := client().Set(cmd.Context(), args[0], verb, param, n); err != nil {
				return failed("%v", err)
			}
			fmt.Fprintf(s.err, "consumer %s: %s %d\n", args[0], param, n)
			return nil
		}}
	}
	cmd.AddCommand(list,
		simple("start", "Start a consumer (its queue is checked again)", "start"),
		simple("stop", "Drain and stop a consumer", "stop"),
		number("scale", "Set how many consumers the group runs", "scale", "size", 1, 0,
			runtime.ErrGroupSize.Error()),
		number("prefetch", "Change a consumer's prefetch", "prefetch", "prefetch", 1, runtime.MaxPrefetch,
			"basic.qos counts unacknowledged messages in 16 bits"),
	)
	return cmd
}
