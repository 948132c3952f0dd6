package harness

import (
	"strconv"
	"strings"
	"testing"
)

// Ledger is the recorder plugin's tables in a schema of the test's own.
type Ledger struct {
	URL string // with search_path at the schema; the recorder's LEDGER_URL
}

// OpenLedger creates the recorder's tables at url (a URL from Schema).
func OpenLedger(t testing.TB, url string) *Ledger {
	t.Helper()
	PSQL(t, url, `CREATE TABLE calls (run_id text NOT NULL, step text NOT NULL, attempt int NOT NULL, n int NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (run_id, step, attempt));
CREATE TABLE effects (run_id text NOT NULL, step text NOT NULL, n int NOT NULL, first_at timestamptz NOT NULL, last_at timestamptz NOT NULL, PRIMARY KEY (run_id, step));
CREATE TABLE effect_ids (run_id text NOT NULL, step text NOT NULL, message_id text NOT NULL, n int NOT NULL, PRIMARY KEY (run_id, step, message_id))`)
	return &Ledger{URL: url}
}

// Effects returns run → step → how many times its effect was applied.
func (l *Ledger) Effects(t testing.TB) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, row := range l.rows(t, "SELECT run_id, step, n FROM effects") {
		n, _ := strconv.Atoi(row[2])
		if out[row[0]] == nil {
			out[row[0]] = map[string]int{}
		}
		out[row[0]][row[1]] = n
	}
	return out
}

// EffectIDs returns run → step → the message ids whose effect was applied
// there, each with how many times.
func (l *Ledger) EffectIDs(t testing.TB) map[string]map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]map[string]int{}
	for _, row := range l.rows(t, "SELECT run_id, step, message_id, n FROM effect_ids") {
		n, _ := strconv.Atoi(row[3])
		if out[row[0]] == nil {
			out[row[0]] = map[string]map[string]int{}
		}
		if out[row[0]][row[1]] == nil {
			out[row[0]][row[1]] = map[string]int{}
		}
		out[row[0]][row[1]][row[2]] = n
	}
	return out
}

// Call is one delivery attempt the recorder saw.
type Call struct {
	Run, Step string
	Attempt   int
	N         int
	AtMS      int64 // milliseconds since the epoch
}

// Calls returns every attempt the recorder saw for run, by step then
// attempt.
func (l *Ledger) Calls(t testing.TB, run string) []Call {
	t.Helper()
	var cs []Call
	for _, row := range l.rows(t, "SELECT run_id, step, attempt, n, (extract(epoch from at) * 1000)::bigint FROM calls WHERE run_id = '"+strings.ReplaceAll(run, "'", "''")+"' ORDER BY step, attempt") {
		a, _ := strconv.Atoi(row[2])
		n, _ := strconv.Atoi(row[3])
		ms, _ := strconv.ParseInt(row[4], 10, 64)
		cs = append(cs, Call{Run: row[0], Step: row[1], Attempt: a, N: n, AtMS: ms})
	}
	return cs
}

func (l *Ledger) rows(t testing.TB, sql string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(PSQL(t, l.URL, sql), "\n") {
		if line == "" {
			continue
		}
		rows = append(rows, strings.Split(line, "|"))
	}
	return rows
}
