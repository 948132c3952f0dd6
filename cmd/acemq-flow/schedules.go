package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/admin"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newSchedulesCmd(s streams) *cobra.Command {
	var format, storeURL, adminAddr, token string
	cmd := &cobra.Command{
		Use:   "schedules [PATH...] [--store URL] [--format text|json]",
		Short: "List the flows' schedules with their last and next tick and the ticks missed",
		Long: `List each schedule of the flows: when it fires (cron or every, in its
timezone), its missed policy and window, the last tick claimed in the store
(the one the runtimes fired last), its next tick, and the ticks it missed:
due after the last claimed one, more than a minute ago, and not claimed, so
that no runtime fired them. A running runtime claims each tick when it comes,
so missed ticks mean no runtime ran; of them, the schedule's missed policy
fires some when a runtime starts (latest: one; all: those within
missed_window; skip: none) and gives up the rest, which the runtime counts in
acemq_schedule_missed_ticks_total. Ticks are computed by the runtime's own
schedule code, and shown in each schedule's timezone (UTC in JSON).

With PATH, the schedules are those of the flow files or folders named, and
their ticks are read from --store, the store the runtimes claim ticks in
(run --store); the command only reads it. Without PATH, the running runtime
at --admin answers with the schedules it runs and its own store's ticks
(GET /v1/schedules).

Environment: ACEMQ_STORE_URL (--store), ACEMQ_ADMIN_ADDR (--admin),
ACEMQ_ADMIN_TOKEN (--admin-token).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usage("--format must be text or json, not %q", format)
			}
			if len(args) == 0 {
				// The running runtime knows its schedules and its store.
				if cmd.Flags().Changed("store") {
					return usage("--store reads the ticks of the flows PATH names; without PATH the runtime at --admin answers from its own store: name the flow files, or leave out --store")
				}
				view, err := admin.NewClient(adminAddr, token).Schedules(cmd.Context())
				if err != nil {
					return failed("%v", err)
				}
				return renderSchedules(s.out, format, view, "the runtime's flows have no schedules")
			}
			backend, err := storeurl.Backend(storeURL)
			if err != nil {
				return usage("--store: %v", err)
			}
			if backend == "memory" {
				return usage("the memory store keeps no ticks between runs; name the store the runtimes claim ticks in: --store sqlite:PATH or postgres://… (or ACEMQ_STORE_URL)")
			}
			_, pl, diags := loadAndCompile(s, args)
			_ = renderDiagText(s.err, diags)
			if diags.HasErrors() {
				return failed("the flows are invalid; fix the errors above (acemq-flow validate shows them too)")
			}
			if len(pl.Schedules) == 0 {
				// Nothing to read in a store.
				return renderSchedules(s.out, format, scheduler.View{Schedules: []scheduler.ScheduleView{}}, "the flows have no schedules")
			}
			set, err := openStore(cmd.Context(), storeURL, 0, false)
			if err != nil {
				if !cmd.Flags().Changed("store") && os.Getenv("ACEMQ_STORE_URL") == "" {
					return failed("%v; no --store or ACEMQ_STORE_URL was given, so the default was read: name the store the runtimes claim ticks in", err)
				}
				return failed("%v", err)
			}
			defer set.Close()
			view, err := scheduler.ViewAt(cmd.Context(), set, pl.Schedules, schedulesNow())
			if err != nil {
				return failed("the store %s: %v", redactStore(storeURL), err)
			}
			return renderSchedules(s.out, format, view, "the flows have no schedules")
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "text", "output format: text or json")
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "with PATH, the store the runtimes claim ticks in: postgres://… or sqlite:PATH (env ACEMQ_STORE_URL)")
	f.StringVar(&adminAddr, "admin", envOr("ACEMQ_ADMIN_ADDR", "127.0.0.1:9464"), "without PATH, the running runtime's admin address, which knows its schedules and its store (env ACEMQ_ADMIN_ADDR)")
	f.StringVar(&token, "admin-token", envOr("ACEMQ_ADMIN_TOKEN", ""), "without PATH, the bearer token of the runtime's admin API, when it was started with one (env ACEMQ_ADMIN_TOKEN)")
	return cmd
}

// schedulesNow is the instant the schedules are read at; tests fix it.
var schedulesNow = time.Now

// renderSchedules writes v in format, text or json; none is the text for
// no schedule at all.
func renderSchedules(w io.Writer, format string, v scheduler.View, none string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	renderSchedulesText(w, v, none)
	return nil
}

// renderSchedulesText writes a line per schedule, ticks in the schedule's
// own timezone so that a daylight-saving change shows in the offset.
func renderSchedulesText(w io.Writer, v scheduler.View, none string) {
	if len(v.Schedules) == 0 {
		fmt.Fprintln(w, none)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLOW\tSCHEDULE\tWHEN\tTIMEZONE\tMISSED POLICY\tLAST TICK\tNEXT TICK\tMISSED")
	for _, s := range v.Schedules {
		when := "cron " + s.Cron
		if s.Cron == "" {
			when = "every " + s.Every
		}
		missed := fmt.Sprint(s.Missed)
		if s.Missed > 0 {
			missed += fmt.Sprintf(" (a start fires %d, gives up %d)", s.CatchUp, s.GivenUp)
		}
		policy := s.MissedPolicy
		if policy != scheduler.MissedSkip { // skip looks back at nothing
			policy += " within " + s.MissedWindow
		}
		loc, err := time.LoadLocation(s.Timezone) // the runtime loaded it
		if err != nil {
			loc = time.UTC
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", esc(s.Flow), esc(s.Name), esc(when), esc(s.Timezone), esc(policy),
			localTick(s.LastTick, loc, "never"), localTick(s.NextTick, loc, "none within five years"), missed)
	}
	tw.Flush()
}

// localTick writes tick (RFC 3339, as ScheduleView has it) in loc, or none
// when there is none.
func localTick(tick *string, loc *time.Location, none string) string {
	if tick == nil {
		return none
	}
	t, err := time.Parse(time.RFC3339Nano, *tick)
	if err != nil {
		return esc(*tick)
	}
	return t.In(loc).Format(time.RFC3339Nano)
}
