package harness

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Verdict is the checker's finding for one scenario, in Jepsen's
// vocabulary.
type Verdict struct {
	OK, Failed, Info int // the generator's outcomes
	Completed        int // runs that replied completed or stopped
	DeadLettered     int // runs found in a .dlq or .parked queue
	Lost             []string
	DupEffects       int // Σ(n − 1) over every run and step of the ledger
	Recovered        int // info ∩ completed
	Unexpected       []string
}

// Check compares what was sent with the replies, the dead letters and the
// ledger. steps is how many recorder steps a completed run passes; a
// completed run whose ledger lacks one of them counts as lost (its effect
// never happened).
func Check(t testing.TB, sent *Sent, replies *Replies, dead []DeadLetter, ledger *Ledger) Verdict {
	t.Helper()
	var v Verdict
	ok, info := set(sent.IDs(OK)), set(sent.IDs(Info))
	v.OK, v.Failed, v.Info = len(ok), len(sent.IDs(Fail)), len(info)
	done := map[string]bool{}
	for run, outcome := range replies.Outcomes() {
		switch outcome {
		case "completed", "stopped":
			done[run] = true
			v.Completed++
		case "dead-lettered", "compensated", "unresolved":
			// Ended, each as it must be told: a saga's instance ends
			// compensated or unresolved when a step fails for good.
			done[run] = true
		}
	}
	deadRuns := map[string]bool{}
	for _, d := range dead {
		deadRuns[d.Run] = true
		done[d.Run] = true
	}
	v.DeadLettered = len(deadRuns)
	for id := range ok {
		if !done[id] {
			v.Lost = append(v.Lost, id)
		}
	}
	for id := range done {
		if info[id] {
			v.Recovered++
		}
		if !ok[id] && !info[id] {
			v.Unexpected = append(v.Unexpected, id)
		}
	}
	if ledger != nil {
		for _, steps := range ledger.Effects(t) {
			for _, n := range steps {
				v.DupEffects += n - 1
			}
		}
	}
	sort.Strings(v.Lost)
	sort.Strings(v.Unexpected)
	return v
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Row is one line of the suite's table.
type Row struct {
	Scenario string
	Faults   string // what was injected, with counts
	Verdict  Verdict
	Recovery string // seconds to recover, or "-"
	Leaks    string // "" for none
	Notes    string
	Status   string // pass, FAIL, skip (with why)
}

var (
	tableMu sync.Mutex
	table   []Row
)

// Record adds the scenario's row to the table (printed by PrintTable) and
// logs it; status follows from t's state unless set.
func Record(t testing.TB, r Row) {
	t.Helper()
	if r.Status == "" {
		r.Status = "pass"
		if t.Failed() {
			r.Status = "FAIL"
		}
	}
	if r.Recovery == "" {
		r.Recovery = "-"
	}
	tableMu.Lock()
	table = append(table, r)
	tableMu.Unlock()
	t.Logf("%s", rowText(r))
}

const header = "| scenario | faults injected | messages (ok/fail/info) | lost | dup effects | recovered | unexpected | dead-lettered | recovery | leaks | status | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"

func rowText(r Row) string {
	v := r.Verdict
	leaks := r.Leaks
	if leaks == "" {
		leaks = "none"
	}
	return fmt.Sprintf("| %s | %s | %d/%d/%d | %d | %d | %d | %d | %d | %s | %s | %s | %s |",
		r.Scenario, r.Faults, v.OK, v.Failed, v.Info, len(v.Lost), v.DupEffects, v.Recovered, len(v.Unexpected), v.DeadLettered,
		r.Recovery, leaks, r.Status, strings.ReplaceAll(r.Notes, "|", "/"))
}

// PrintTable writes the table of every recorded row (Markdown) to stdout
// and, when ACEMQ_RELIABILITY_TABLE names a file, to that file. TestMain
// calls it after the scenarios ran.
func PrintTable(header0 string) {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString(header0 + "\n\n" + header)
	for _, r := range table {
		b.WriteString(rowText(r) + "\n")
	}
	fmt.Print("\n" + b.String())
	if path := os.Getenv("ACEMQ_RELIABILITY_TABLE"); path != "" {
		_ = os.WriteFile(path, []byte(b.String()), 0o644)
	}
}
