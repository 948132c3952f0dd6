package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText renders the plan for a person: the declaration line of each
// pipeline, then every exchange, queue (rungs, .dlq and .parked included,
// each by its full name), binding and consumer.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, pl := range p.Pipelines {
		b.WriteString(pl.Declaration + "\n")
	}
	if len(p.Pipelines) > 0 {
		b.WriteString("\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "exchanges (%d)\n", len(p.Exchanges))
	for _, e := range p.Exchanges {
		typ := e.Type
		if typ == "" {
			typ = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Name, typ, e.Mode, e.Purpose)
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "queues (%d)\n", len(p.Queues))
	for _, q := range p.Queues {
		owner := q.Purpose
		switch {
		case q.Owner != "" && (q.Purpose == "declared" || q.Purpose == "consumer"):
			owner += ", consumed by " + q.Owner
		case q.Owner != "":
			owner += " of " + q.Owner
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", q.Name, q.Type, q.Mode, owner, ArgumentsText(q.Arguments))
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "bindings (%d)\n", len(p.Bindings))
	for _, bd := range p.Bindings {
		fmt.Fprintf(tw, "  %s\t-> %s\tkey %s\n", bd.Exchange, bd.Queue, bd.RoutingKey)
	}
	tw.Flush()
	b.WriteString("\n")
	fmt.Fprintf(&b, "consumers (%d)\n", len(p.Consumers))
	for _, c := range p.Consumers {
		handler := "handler " + c.Handler
		if c.Handler == "" {
			handler = "no handler" // a saga's timeout: the runtime acts on it
		}
		fmt.Fprintf(&b, "  %s (%s) on %s: %s, prefetch %d, concurrency %d, idempotent %s, auto_startup %s\n",
			c.ID, c.Kind, c.Queue, handler, c.Prefetch, c.Concurrency, yesNo(c.Idempotent), yesNo(c.AutoStartup))
		if c.Input != "" || c.Output != "" {
			fmt.Fprintf(&b, "    types: %s -> %s\n", orAnyType(c.Input), orAnyType(c.Output))
		}
		if c.Delay > 0 {
			fmt.Fprintf(&b, "    delay: %s after the previous step\n", c.Delay)
		}
		fmt.Fprintf(&b, "    retry: %s\n", c.Retry.Text())
	}
	if len(p.Itineraries) > 0 {
		fmt.Fprintf(&b, "\nitineraries (%d)\n", len(p.Itineraries))
		for _, it := range p.Itineraries {
			var stops []string
			for _, s := range it.Stops {
				st := fmt.Sprintf("%s (%s/%s)", s.Name, s.Exchange, s.RoutingKey)
				if s.When != "" {
					st += " when " + s.When
				}
				stops = append(stops, st)
			}
			fmt.Fprintf(&b, "  %s: %s\n", it.Name, strings.Join(stops, " | "))
		}
	}
	if len(p.Sagas) > 0 {
		fmt.Fprintf(&b, "\nsagas (%d)\n", len(p.Sagas))
		for _, s := range p.Sagas {
			var steps []string
			for _, st := range s.Steps {
				x := st.Name + " " + st.Handler
				if st.Compensate != "" {
					x += " (undo " + st.Compensate + ")"
				}
				if st.When != "" {
					x += " when " + st.When
				}
				steps = append(steps, x)
			}
			name := s.Name
			if s.Timeout > 0 {
				name += fmt.Sprintf(" (timeout %s, on %s)", s.Timeout, s.TimeoutQueue)
			}
			fmt.Fprintf(&b, "  %s: %s\n", name, strings.Join(steps, " | "))
		}
	}
	if len(p.Schedules) > 0 {
		fmt.Fprintf(&b, "\nschedules (%d)\n", len(p.Schedules))
		for _, s := range p.Schedules {
			when := "cron " + s.Cron
			if s.Cron == "" {
				when = "every " + s.Every.String()
			}
			fmt.Fprintf(&b, "  %s: %s (%s), missed: %s within %s -> %s\n", s.Name, when, s.Timezone, s.Missed, s.MissedWindow, s.Target)
		}
	}
	if len(p.Plugins) > 0 {
		fmt.Fprintf(&b, "\nplugins (%d)\n", len(p.Plugins))
		for _, pl := range p.Plugins {
			fmt.Fprintf(&b, "  %s (%s): %s, timeout %s\n", pl.Name, pl.File, pl.Command, pl.Timeout)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON renders the plan as indented JSON.
func (p *Plan) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// Text describes the ladder: "5 attempts, then .dlq; waits 2s, 4s, 8s, 16s (jitter 0.2)".
func (r Retry) Text() string {
	if r.MaxAttempts <= 1 {
		return "1 attempt, no retry, then .dlq"
	}
	var waits []string
	for _, rg := range r.Rungs {
		waits = append(waits, rg.Delay.String())
	}
	s := fmt.Sprintf("%d attempts, then .dlq; waits %s", r.MaxAttempts, strings.Join(waits, ", "))
	if r.Jitter > 0 {
		s += fmt.Sprintf(" (jitter %g)", r.Jitter)
	}
	return s
}

// ArgumentsText renders queue arguments sorted, as k=v pairs.
func ArgumentsText(args map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		v := args[k]
		if s, ok := v.(string); ok && s == "" {
			v = `""`
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	return strings.Join(parts, " ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orAnyType(t string) string {
	if t == "" {
		return "any"
	}
	return t
}
