package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/ops"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newSagasCmd(s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sagas",
		Short: "Look at saga instances: list, show one, report the unresolved",
		Long: `Read the saga instances in the store (FLOW-FORMAT §5): they work while no
runtime runs.

  sagas list [--saga NAME] [--state S]   the instances, newest first
  sagas show ID                          one instance: its steps and compensations
  sagas unresolved                       the instances a person has to finish; exit 1 when there is any`,
	}
	cmd.AddCommand(newSagasListCmd(s), newSagasShowCmd(s), newSagasUnresolvedCmd(s))
	return cmd
}

// sagaFlags are the flags every sagas subcommand takes.
type sagaFlags struct {
	store, format string
}

func (sf *sagaFlags) add(f *pflag.FlagSet) {
	f.StringVar(&sf.store, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store holding the saga instances: postgres://… or sqlite:PATH (env ACEMQ_STORE_URL)")
	f.StringVar(&sf.format, "format", "text", "output format: text or json")
}

// open checks the flags and opens the store. The memory store is refused:
// it lives inside the process that opened it, so it could only ever be
// empty here.
func (sf *sagaFlags) open(ctx context.Context) (stores.Set, error) {
	if sf.format != "text" && sf.format != "json" {
		return nil, usage("--format must be text or json, not %q", sf.format)
	}
	backend, err := storeurl.Backend(sf.store)
	if err != nil {
		return nil, usage("--store: %v", err)
	}
	if backend == "memory" {
		return nil, usage("--store memory: holds the instances of the process that opened it only; name the store the runtime uses (sqlite:PATH or postgres://…)")
	}
	set, err := openStore(ctx, sf.store, 0, false)
	if err != nil {
		return nil, failed("%v", err)
	}
	return set, nil
}

func newSagasListCmd(s streams) *cobra.Command {
	var (
		sf    sagaFlags
		saga  string
		state string
		limit int
	)
	cmd := &cobra.Command{
		Use:   "list [--saga NAME] [--state S] [--limit N] [--store URL] [--format text|json]",
		Short: "List saga instances, newest first",
		Long: `List the saga instances in the store, newest started first, one line each: id,
saga, state, the step it is at (running: the step whose message is out;
compensating: the step whose compensation is out), when it started and when it
last changed. --state is one of running, compensating, completed, compensated,
unresolved.

Environment: ACEMQ_STORE_URL (--store).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if st := stores.SagaState(state); state != "" && !st.Valid() {
				return usage("--state %q is not a saga state; give running, compensating, completed, compensated or unresolved", state)
			}
			if limit < 0 {
				return usage("--limit must be 0 (all) or more, not %d", limit)
			}
			set, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer set.Close()
			f := stores.SagaFilter{Saga: saga, State: stores.SagaState(state), Newest: true}
			if limit > 0 {
				f.Limit = limit + 1 // one more says whether there are more
			}
			insts, err := set.ListSagas(cmd.Context(), f)
			if err != nil {
				return failed("list the saga instances in %s: %v", redactStore(sf.store), err)
			}
			more := limit > 0 && len(insts) > limit
			if more {
				insts = insts[:limit]
			}
			if sf.format == "json" {
				return writeJSON(s.out, sagaListJSON{Instances: sagaRows(insts), More: more})
			}
			renderSagaList(s.out, insts, f, more)
			return nil
		},
	}
	f := cmd.Flags()
	sf.add(f)
	f.StringVar(&saga, "saga", "", "only the instances of this saga")
	f.StringVar(&state, "state", "", "only the instances in this state")
	f.IntVar(&limit, "limit", 50, "list at most this many instances (0: all)")
	return cmd
}

func newSagasShowCmd(s streams) *cobra.Command {
	var sf sagaFlags
	cmd := &cobra.Command{
		Use:   "show ID [--store URL] [--format text|json]",
		Short: "Show one saga instance: its steps, its compensations, what was not undone",
		Long: `Show the saga instance ID (the id of the message that started it): every step
with its state, attempts, times, the start of its output and its error; the
compensations in the order they ran; and, for an instance that compensated,
the steps that happened and were not undone. --format json prints the
instance's summary (FLOW-FORMAT §5) with each step's output and the
compensations added.

Environment: ACEMQ_STORE_URL (--store).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage("name the instance: acemq-flow sagas show ID (acemq-flow sagas list gives the ids)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer set.Close()
			inst, ok, err := set.GetSaga(cmd.Context(), args[0])
			if err != nil {
				return failed("read saga instance %q in %s: %v", args[0], redactStore(sf.store), err)
			}
			if !ok {
				return failed("no saga instance %q in the store %s; an instance's id is the id of the message that started it, and an ended one is purged after the retention: `acemq-flow sagas list` lists those it holds", args[0], redactStore(sf.store))
			}
			if sf.format == "json" {
				return writeJSON(s.out, sagaDetail(inst))
			}
			renderSagaShow(s.out, inst)
			return nil
		},
	}
	sf.add(cmd.Flags())
	return cmd
}

func newSagasUnresolvedCmd(s streams) *cobra.Command {
	var (
		sf    sagaFlags
		saga  string
		limit int
	)
	cmd := &cobra.Command{
		Use:   "unresolved [--saga NAME] [--limit N] [--store URL] [--format text|json]",
		Short: "Report the unresolved saga instances; exit 1 when there is any",
		Long: `Report the saga instances that ended unresolved, newest first: a compensation
failed for good (or a completed step has no compensate handler), so effects
happened and were not undone, and a person has to undo them. Each is listed
with those steps and why each was not undone; then how many instances are
compensating now, which may end unresolved too.

Exit status: 0 and "no unresolved saga instances" when there is none; 1 when
there is any (after printing them), so that a cron job or a CI step can run it
as an alert; 2 on a usage error. The count is of all unresolved instances, even
when --limit lists fewer.

Environment: ACEMQ_STORE_URL (--store).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usage("--limit must be 0 (all) or more, not %d", limit)
			}
			set, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer set.Close()
			counts, err := set.CountSagas(cmd.Context())
			if err != nil {
				return failed("count the saga instances in %s: %v", redactStore(sf.store), err)
			}
			var total, compensating int64
			for _, c := range counts {
				if saga != "" && c.Saga != saga {
					continue
				}
				switch c.State {
				case stores.SagaUnresolved:
					total += c.Instances
				case stores.SagaCompensating:
					compensating += c.Instances
				}
			}
			insts, err := set.ListSagas(cmd.Context(), stores.SagaFilter{Saga: saga, State: stores.SagaUnresolved, Limit: limit, Newest: true})
			if err != nil {
				return failed("list the unresolved saga instances in %s: %v", redactStore(sf.store), err)
			}
			if sf.format == "json" {
				doc := sagaUnresolvedJSON{Unresolved: total, Compensating: compensating, Instances: []sagaDetailJSON{}}
				for _, inst := range insts {
					doc.Instances = append(doc.Instances, sagaDetail(inst))
				}
				if err := writeJSON(s.out, doc); err != nil {
					return err
				}
			} else {
				renderSagaUnresolved(s.out, insts, total, compensating)
			}
			if total > 0 || len(insts) > 0 {
				return silent1
			}
			return nil
		},
	}
	f := cmd.Flags()
	sf.add(f)
	f.StringVar(&saga, "saga", "", "only the instances of this saga")
	f.IntVar(&limit, "limit", 50, "list at most this many instances (0: all); the count is of all")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// summaryOf is the instance's summary as decide writes it (the saga reply's
// body), so that `sagas show` and the reply never disagree.
func summaryOf(inst stores.SagaInstance) decide.SagaSummary {
	return decide.SummaryOf(runtime.SagaFromStore(inst))
}

// sagaAt is the step an instance that has not ended is at: running, the
// step whose message is out; compensating, the step whose compensation is
// out. An ended instance is at none ("").
func sagaAt(inst stores.SagaInstance) string {
	if inst.State.Ended() || inst.Step < 0 || inst.Step >= len(inst.Steps) {
		return ""
	}
	return inst.Steps[inst.Step].Name
}

// sagaCompensation is one compensation of an instance, in the order they
// ran: the last completed step's first.
type sagaCompensation struct {
	Name          string    `json:"name"`
	State         string    `json:"state"` // compensated, compensation_failed, or running (out now)
	CompensatedAt time.Time `json:"compensated_at,omitzero"`
	Error         string    `json:"error,omitempty"`
}

// sagaCompensations lists the compensations inst ran, in the order they ran,
// and the one out now when it is compensating. Compensations run one at a
// time from the last completed step down (decide's sagaCompensate), so the
// order they ran is the steps' order reversed.
func sagaCompensations(inst stores.SagaInstance) []sagaCompensation {
	out := []sagaCompensation{}
	for i := len(inst.Steps) - 1; i >= 0; i-- {
		st := inst.Steps[i]
		switch {
		case st.State == stores.StepCompensated:
			out = append(out, sagaCompensation{Name: st.Name, State: string(st.State), CompensatedAt: st.CompensatedAt.UTC()})
		case st.State == stores.StepCompensationFailed:
			out = append(out, sagaCompensation{Name: st.Name, State: string(st.State), Error: st.Error})
		case inst.State == stores.SagaCompensating && i == inst.Step && st.State == stores.StepCompleted:
			out = append(out, sagaCompensation{Name: st.Name, State: "running"})
		}
	}
	return out
}

// notUndoneWhy says why step st of an ended instance was not undone.
func notUndoneWhy(st stores.SagaStep) string {
	if st.State == stores.StepCompensationFailed {
		// decide records a compensation's failure as "compensation: why".
		return "its compensation failed for good: " + strings.TrimPrefix(st.Error, "compensation: ")
	}
	return "it has no compensate handler"
}

// sagaRowJSON is one instance in `sagas list --format json`.
type sagaRowJSON struct {
	ID        string    `json:"id"`
	Saga      string    `json:"saga"`
	State     string    `json:"state"`
	Step      string    `json:"step,omitempty"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

type sagaListJSON struct {
	Instances []sagaRowJSON `json:"instances"`
	More      bool          `json:"more"` // more instances than --limit
}

func sagaRows(insts []stores.SagaInstance) []sagaRowJSON {
	out := []sagaRowJSON{}
	for _, inst := range insts {
		out = append(out, sagaRowJSON{ID: inst.ID, Saga: inst.Saga, State: string(inst.State), Step: sagaAt(inst),
			StartedAt: inst.StartedAt.UTC(), UpdatedAt: inst.UpdatedAt.UTC(), EndedAt: utcOrZero(inst.EndedAt)})
	}
	return out
}

// sagaDetailJSON is `sagas show --format json`: the summary of FLOW-FORMAT
// §5, with fields added (which §5 allows): the step the instance is at,
// when it last changed, each step's output, and the compensations in the
// order they ran.
type sagaDetailJSON struct {
	decide.SagaSummary
	Step          string             `json:"step,omitempty"`
	UpdatedAt     time.Time          `json:"updated_at"`
	Steps         []sagaStepJSON     `json:"steps"`
	Compensations []sagaCompensation `json:"compensations"`
}

// sagaStepJSON is a step of the summary with its output: as JSON when it
// is JSON, else as a string.
type sagaStepJSON struct {
	decide.SagaStepSummary
	Output any `json:"output,omitempty"`
}

func sagaDetail(inst stores.SagaInstance) sagaDetailJSON {
	d := sagaDetailJSON{SagaSummary: summaryOf(inst), Step: sagaAt(inst), UpdatedAt: inst.UpdatedAt.UTC(),
		Steps: []sagaStepJSON{}, Compensations: sagaCompensations(inst)}
	for i, st := range d.SagaSummary.Steps {
		sj := sagaStepJSON{SagaStepSummary: st}
		if out := inst.Steps[i].Output; len(out) > 0 {
			if json.Valid(out) {
				sj.Output = json.RawMessage(out)
			} else {
				sj.Output = string(out)
			}
		}
		d.Steps = append(d.Steps, sj)
	}
	return d
}

type sagaUnresolvedJSON struct {
	Unresolved   int64            `json:"unresolved"`   // all of them, --limit or not
	Compensating int64            `json:"compensating"` // not ended yet: they may end unresolved
	Instances    []sagaDetailJSON `json:"instances"`
}

// sagaTime is how the text output writes a time: RFC 3339 UTC, to the
// second; "-" for none.
func sagaTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// renderSagaList writes one line per instance. Every text that came from
// the store is escaped, so that an instance cannot write control sequences
// to the terminal.
func renderSagaList(w io.Writer, insts []stores.SagaInstance, f stores.SagaFilter, more bool) {
	if len(insts) == 0 {
		what := "no saga instances"
		if f.Saga != "" {
			what += fmt.Sprintf(" of saga %q", f.Saga)
		}
		if f.State != "" {
			what += " " + string(f.State)
		}
		fmt.Fprintln(w, what)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSAGA\tSTATE\tSTEP\tSTARTED\tUPDATED")
	for _, inst := range insts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", esc(inst.ID), esc(inst.Saga), inst.State, orDash(esc(sagaAt(inst))),
			sagaTime(inst.StartedAt), sagaTime(inst.UpdatedAt))
	}
	tw.Flush()
	if more {
		fmt.Fprintf(w, "the newest %d shown; --limit 0 lists all\n", len(insts))
	}
}

// sagaOutputPreview is how much of a step's output `sagas show` prints.
const sagaOutputPreview = 60

// renderSagaShow writes an instance as a timeline: its start, each step in
// the order the saga runs them, the compensations in the order they ran,
// its end, and what was not undone.
func renderSagaShow(w io.Writer, inst stores.SagaInstance) {
	sum := summaryOf(inst)
	fmt.Fprintf(w, "saga %s, instance %s: %s\n", esc(inst.Saga), esc(inst.ID), inst.State)
	fmt.Fprintf(w, "started  %s\n", sagaTime(inst.StartedAt))
	if at := sagaAt(inst); at != "" {
		what := "step"
		if inst.State == stores.SagaCompensating {
			what = "compensation of step"
		}
		fmt.Fprintf(w, "at       %s %s, since %s\n", what, esc(at), sagaTime(inst.UpdatedAt))
	}

	fmt.Fprintln(w, "\nsteps:")
	width := 0
	for _, st := range inst.Steps {
		width = max(width, len(esc(st.Name)))
	}
	for i, st := range inst.Steps {
		line := fmt.Sprintf("  %d. %-*s  %-19s", i+1, width, esc(st.Name), st.State)
		if st.Attempts > 0 {
			line += fmt.Sprintf("  attempts %d", st.Attempts)
		}
		if !st.CompletedAt.IsZero() {
			line += "  completed " + sagaTime(st.CompletedAt)
		}
		if !st.CompensatedAt.IsZero() {
			line += "  compensated " + sagaTime(st.CompensatedAt)
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		if len(st.Output) > 0 {
			out, cut := ops.Preview(st.Output, sagaOutputPreview)
			if cut {
				out += "…"
			}
			fmt.Fprintf(w, "     output: %s\n", out)
		}
		if st.Error != "" {
			fmt.Fprintf(w, "     error:  %s\n", esc(st.Error))
		}
	}

	if comps := sagaCompensations(inst); len(comps) > 0 {
		fmt.Fprintln(w, "\ncompensations, in the order they ran:")
		for i, c := range comps {
			line := fmt.Sprintf("  %d. %-*s  %s", i+1, width, esc(c.Name), c.State)
			switch {
			case !c.CompensatedAt.IsZero():
				line += "  " + sagaTime(c.CompensatedAt)
			case c.State == "running":
				line += "  (out now)"
			}
			fmt.Fprintln(w, line)
		}
	}

	if !inst.EndedAt.IsZero() {
		fmt.Fprintf(w, "\nended    %s, %s\n", sagaTime(inst.EndedAt), inst.State)
	}
	if len(sum.NotUndone) == 0 {
		return
	}
	if !inst.State.Ended() {
		fmt.Fprintf(w, "\nnot undone yet: %s\n", esc(strings.Join(sum.NotUndone, ", ")))
		return
	}
	fmt.Fprintln(w, "\nnot undone, a person has to undo these:")
	writeNotUndone(w, inst, sum.NotUndone, "  ")
}

// writeNotUndone writes each step of names with why it was not undone.
func writeNotUndone(w io.Writer, inst stores.SagaInstance, names []string, indent string) {
	for _, name := range names {
		for _, st := range inst.Steps {
			if st.Name == name {
				fmt.Fprintf(w, "%s%s: %s\n", indent, esc(name), esc(notUndoneWhy(st)))
				break
			}
		}
	}
}

// renderSagaUnresolved writes the unresolved instances, each with the
// steps a person has to undo, and how many are compensating still: those
// may end unresolved too.
func renderSagaUnresolved(w io.Writer, insts []stores.SagaInstance, total, compensating int64) {
	if total == 0 && len(insts) == 0 {
		fmt.Fprintln(w, "no unresolved saga instances")
	} else {
		noun := "instances"
		if total == 1 {
			noun = "instance"
		}
		fmt.Fprintf(w, "%d unresolved saga %s: effects happened and were not undone; a person has to undo them\n", total, noun)
		for _, inst := range insts {
			fmt.Fprintf(w, "\n%s  saga %s  ended %s\n", esc(inst.ID), esc(inst.Saga), sagaTime(inst.EndedAt))
			writeNotUndone(w, inst, summaryOf(inst).NotUndone, "  not undone: ")
		}
		if int64(len(insts)) < total {
			fmt.Fprintf(w, "\nthe newest %d shown; --limit 0 lists all\n", len(insts))
		}
		fmt.Fprintln(w, "\n`acemq-flow sagas show ID` shows an instance's steps and compensations")
	}
	switch {
	case compensating == 1:
		fmt.Fprintln(w, "1 instance is compensating now and may end unresolved too: `acemq-flow sagas list --state compensating`")
	case compensating > 1:
		fmt.Fprintf(w, "%d instances are compensating now and may end unresolved too: `acemq-flow sagas list --state compensating`\n", compensating)
	}
}
