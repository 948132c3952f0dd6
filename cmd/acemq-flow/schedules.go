package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/runtime/scheduler"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newSchedulesCmd(s streams) *cobra.Command {
	var format, storeURL string
	cmd := &cobra.Command{
		Use:   "schedules [--store URL] [--format text|json] PATH...",
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

The store is the one the runtimes claim ticks in (run --store); the command
only reads it.

Environment: ACEMQ_STORE_URL (--store).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				// The schedules and their ticks are the flows': the store
				// knows only the ticks claimed.
				return usage("name the flow files or folders whose schedules to list: acemq-flow schedules [--store URL] PATH...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usage("--format must be text or json, not %q", format)
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
				return renderSchedules(s.out, format, schedulesView{Schedules: []scheduleView{}})
			}
			set, err := openStore(cmd.Context(), storeURL, 0, false)
			if err != nil {
				if !cmd.Flags().Changed("store") && os.Getenv("ACEMQ_STORE_URL") == "" {
					return failed("%v; no --store or ACEMQ_STORE_URL was given, so the default was read: name the store the runtimes claim ticks in", err)
				}
				return failed("%v", err)
			}
			defer set.Close()
			view, err := scheduleViews(cmd.Context(), set, pl.Schedules, schedulesNow())
			if err != nil {
				return failed("the store %s: %v", redactStore(storeURL), err)
			}
			return renderSchedules(s.out, format, view)
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "text", "output format: text or json")
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store the runtimes claim ticks in: postgres://… or sqlite:PATH (env ACEMQ_STORE_URL)")
	return cmd
}

// schedulesNow is the instant the schedules are read at; tests fix it.
var schedulesNow = time.Now

// schedulesView is what `schedules` shows, and its JSON document.
type schedulesView struct {
	At        string         `json:"at,omitempty"` // when the ticks were read, RFC 3339 UTC
	Schedules []scheduleView `json:"schedules"`
}

// scheduleView is one schedule. Ticks are RFC 3339 UTC, as x-acemq-tick;
// LastTick is null for a schedule never claimed, NextTick for a cron
// expression with no tick within five years.
type scheduleView struct {
	Flow         string  `json:"flow"`
	Name         string  `json:"name"`
	Cron         string  `json:"cron,omitempty"`
	Every        string  `json:"every,omitempty"`
	Timezone     string  `json:"timezone"`
	MissedPolicy string  `json:"missed_policy"`
	MissedWindow string  `json:"missed_window"`
	Send         string  `json:"send"`
	LastTick     *string `json:"last_tick"`
	NextTick     *string `json:"next_tick"`
	Missed       int64   `json:"missed"`
	CatchUp      int64   `json:"missed_fired_on_start"`
	GivenUp      int64   `json:"missed_given_up"`

	last, next time.Time // zero: none
	loc        *time.Location
}

// scheduleViews reads each schedule's last claimed tick from ticks and
// computes the rest at now with the loop's code (scheduler.ScheduleStatus).
func scheduleViews(ctx context.Context, ticks stores.ScheduleTicks, ss []plan.Schedule, now time.Time) (schedulesView, error) {
	v := schedulesView{At: scheduler.TickText(now.Truncate(time.Millisecond)), Schedules: []scheduleView{}}
	for _, s := range ss {
		last, claimed, err := ticks.LastTick(ctx, s.Key())
		if err != nil {
			return v, fmt.Errorf("read the last tick of schedule %q: %w", s.Key(), err)
		}
		st, err := scheduler.ScheduleStatus(s, last, claimed, now)
		if err != nil {
			return v, err
		}
		loc, err := time.LoadLocation(s.Timezone) // ScheduleStatus loaded it: no error
		if err != nil {
			loc = time.UTC
		}
		sv := scheduleView{Flow: s.Flow, Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, MissedPolicy: s.Missed,
			MissedWindow: s.MissedWindow.String(), Send: s.Target, Missed: st.Missed, CatchUp: st.CatchUp, GivenUp: st.GivenUp,
			next: st.Next, loc: loc}
		if s.Cron == "" {
			sv.Every = s.Every.String()
		}
		if claimed {
			sv.last = last
		}
		sv.LastTick, sv.NextTick = tickText(sv.last), tickText(sv.next)
		v.Schedules = append(v.Schedules, sv)
	}
	return v, nil
}

// tickText is t as x-acemq-tick writes it, nil for the zero time.
func tickText(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := scheduler.TickText(t)
	return &s
}

// renderSchedules writes v in format, text or json.
func renderSchedules(w io.Writer, format string, v schedulesView) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	renderSchedulesText(w, v)
	return nil
}

// renderSchedulesText writes a line per schedule, ticks in the schedule's
// own timezone so that a daylight-saving change shows in the offset.
func renderSchedulesText(w io.Writer, v schedulesView) {
	if len(v.Schedules) == 0 {
		fmt.Fprintln(w, "the flows have no schedules")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Flow, s.Name, esc(when), s.Timezone, policy,
			localTick(s.last, s.loc, "never"), localTick(s.next, s.loc, "none within five years"), missed)
	}
	tw.Flush()
}

// localTick writes tick in loc, or none for the zero time.
func localTick(tick time.Time, loc *time.Location, none string) string {
	if tick.IsZero() {
		return none
	}
	return tick.In(loc).Format(time.RFC3339Nano)
}
