package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
	"github.com/acemq/acemq-flow/test/testenv"
)

// sagaBackends are the stores the sagas commands are tested on; postgres
// skips without ACEMQ_TEST_POSTGRES_URL.
var sagaBackends = []struct {
	name string
	open func(t *testing.T, opts stores.Options) (url string, set stores.Set)
}{
	{"sqlite", func(t *testing.T, opts stores.Options) (string, stores.Set) {
		st := storetest.OpenSQLite(t, opts)
		return "sqlite:" + st.Path(), st
	}},
	{"postgres", func(t *testing.T, opts stores.Options) (string, stores.Set) {
		st, url := storetest.OpenPostgresSchema(t, opts)
		return url, st
	}},
}

// sagaWriter writes instances through the store API as the runtime's saga
// wrapper does: created running, then advanced a step at a time, the clock
// moving between writes so that every time in the output is fixed.
type sagaWriter struct {
	t     *testing.T
	set   stores.Set
	clock *testenv.Clock
}

func (w sagaWriter) start(saga, id string, steps ...string) stores.SagaInstance {
	w.t.Helper()
	inst := stores.SagaInstance{Saga: saga, ID: id, State: stores.SagaRunning, Input: []byte(`{"order_id":"` + id + `"}`)}
	for _, s := range steps {
		inst.Steps = append(inst.Steps, stores.SagaStep{Name: s, State: stores.StepPending})
	}
	got, created, err := w.set.CreateSaga(w.t.Context(), inst)
	if err != nil || !created {
		w.t.Fatalf("CreateSaga(%s) = %v, %v; want it created", id, created, err)
	}
	w.clock.Advance(time.Second)
	return got
}

// advance applies change to inst at the clock's time and writes it.
func (w sagaWriter) advance(inst stores.SagaInstance, change func(inst *stores.SagaInstance, now time.Time)) stores.SagaInstance {
	w.t.Helper()
	inst.Steps = slices.Clone(inst.Steps)
	change(&inst, w.clock.Now())
	got, err := w.set.AdvanceSaga(w.t.Context(), inst)
	if err != nil {
		w.t.Fatalf("AdvanceSaga(%s to %s): %v", inst.ID, inst.State, err)
	}
	w.clock.Advance(time.Second)
	return got
}

func (w sagaWriter) completed(inst stores.SagaInstance, i int, output string, next int) stores.SagaInstance {
	return w.advance(inst, func(in *stores.SagaInstance, now time.Time) {
		in.Steps[i].State, in.Steps[i].Attempts, in.Steps[i].CompletedAt = stores.StepCompleted, 1, now
		if output != "" {
			in.Steps[i].Output = []byte(output)
		}
		in.Step = next
		if next >= len(in.Steps) {
			in.State = stores.SagaCompleted
		}
	})
}

func (w sagaWriter) failed(inst stores.SagaInstance, i, attempts int, reason string, compensate int) stores.SagaInstance {
	return w.advance(inst, func(in *stores.SagaInstance, now time.Time) {
		in.Steps[i].State, in.Steps[i].Attempts, in.Steps[i].Error = stores.StepFailed, attempts, reason
		in.State, in.Step = stores.SagaCompensating, compensate
	})
}

func (w sagaWriter) compensated(inst stores.SagaInstance, i int, failure string, next int, end stores.SagaState) stores.SagaInstance {
	return w.advance(inst, func(in *stores.SagaInstance, now time.Time) {
		if failure == "" {
			in.Steps[i].State, in.Steps[i].CompensatedAt = stores.StepCompensated, now
		} else {
			in.Steps[i].State, in.Steps[i].Error = stores.StepCompensationFailed, "compensation: "+failure
		}
		in.Step = next
		if end != "" {
			in.State = end
		}
	})
}

// writeSagaFixture writes an instance in every state: place-order (take-payment,
// reserve-stock, book-courier) completed with a skipped step, running,
// compensated after book-courier's retries ran out, unresolved after the
// refund failed, and compensating; and refund-order unresolved because its
// completed step has no compensate handler.
func writeSagaFixture(t *testing.T, set stores.Set, clock *testenv.Clock) {
	w := sagaWriter{t: t, set: set, clock: clock}
	steps := []string{"take-payment", "reserve-stock", "book-courier"}

	done := w.start("place-order", "ord-1001", steps...)
	done = w.completed(done, 0, `{"payment_id":"pay-1001","amount":84.5}`, 2)
	done = w.advance(done, func(in *stores.SagaInstance, now time.Time) { in.Steps[1].State = stores.StepSkipped })
	w.completed(done, 2, `{"tracking":"TRK-1001"}`, 3)

	comp := w.start("place-order", "ord-1003", steps...)
	comp = w.completed(comp, 0, `{"payment_id":"pay-1003","amount":12}`, 1)
	comp = w.completed(comp, 1, `{"reservation":"res-1003"}`, 2)
	comp = w.failed(comp, 2, 8, "shipping.book: the courier API answered 503 Service Unavailable (8 attempts, the retries are exhausted)", 1)
	comp = w.compensated(comp, 1, "", 0, "")
	w.compensated(comp, 0, "", 0, stores.SagaCompensated)

	unres := w.start("place-order", "ord-1004", steps...)
	unres = w.completed(unres, 0, `{"payment_id":"pay-1004","amount":230,"card":"visa-4242","note":"a long output that the text view cuts short"}`, 1)
	unres = w.completed(unres, 1, `{"reservation":"res-1004"}`, 2)
	unres = w.failed(unres, 2, 1, "shipping.book: fatal: the address was rejected: no such street", 1)
	unres = w.compensated(unres, 1, "", 0, "")
	w.compensated(unres, 0, "payments.refund: fatal: the card was closed", 0, stores.SagaUnresolved)

	running := w.start("place-order", "ord-1002", steps...)
	running = w.completed(running, 0, `{"payment_id":"pay-1002","amount":40}`, 1)

	// refund has no compensate handler: once notify-customer failed for
	// good there is nothing to run, and the instance ends unresolved at
	// once, the refund done and not undone.
	refund := w.start("refund-order", "ref-2001", "refund", "notify-customer")
	refund = w.completed(refund, 0, `{"refund_id":"rf-2001"}`, 1)
	w.advance(refund, func(in *stores.SagaInstance, now time.Time) {
		in.Steps[1].State, in.Steps[1].Attempts = stores.StepFailed, 5
		in.Steps[1].Error = "notify.email: the mail server refused the message (5 attempts, the retries are exhausted)"
		in.State = stores.SagaUnresolved
	})

	compensating := w.start("place-order", "ord-1005", steps...)
	compensating = w.completed(compensating, 0, `{"payment_id":"pay-1005","amount":7.5}`, 1)
	compensating = w.completed(compensating, 1, `{"reservation":"res-1005"}`, 2)
	compensating = w.failed(compensating, 2, 3, "the saga's timeout (1h0m0s) passed while step \"book-courier\" was running", 1)
	w.compensated(compensating, 1, "", 0, "")
}

// TestSagasGoldens writes an instance in every state on each backend and
// checks every sagas command's text and JSON against the same goldens.
func TestSagasGoldens(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"list.txt", []string{"list"}, 0},
		{"list.json", []string{"list", "--format", "json"}, 0},
		{"list-limit.txt", []string{"list", "--limit", "2"}, 0},
		{"list-unresolved-place-order.txt", []string{"list", "--saga", "place-order", "--state", "unresolved"}, 0},
		{"list-none.txt", []string{"list", "--saga", "refund-order", "--state", "running"}, 0},
		{"show-completed.txt", []string{"show", "ord-1001"}, 0},
		{"show-running.txt", []string{"show", "ord-1002"}, 0},
		{"show-compensated.txt", []string{"show", "ord-1003"}, 0},
		{"show-unresolved.txt", []string{"show", "ord-1004"}, 0},
		{"show-unresolved.json", []string{"show", "ord-1004", "--format", "json"}, 0},
		{"show-compensating.txt", []string{"show", "ord-1005"}, 0},
		{"show-no-compensate.txt", []string{"show", "ref-2001"}, 0},
		{"unresolved.txt", []string{"unresolved"}, 1},
		{"unresolved.json", []string{"unresolved", "--format", "json"}, 1},
		{"unresolved-limit.txt", []string{"unresolved", "--limit", "1"}, 1},
		{"unresolved-place-order.txt", []string{"unresolved", "--saga", "place-order"}, 1},
	}
	for _, b := range sagaBackends {
		t.Run(b.name, func(t *testing.T) {
			clock := testenv.NewClock()
			url, set := b.open(t, stores.Options{Now: clock.Now})
			writeSagaFixture(t, set, clock)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					args := append([]string{"sagas"}, tc.args...)
					args = append(args, "--store", url)
					out, errOut, code := cli(t, args...)
					if code != tc.code || errOut != "" {
						t.Fatalf("acemq-flow %s: exit %d, stderr %q; want exit %d and nothing on stderr", strings.Join(tc.args, " "), code, errOut, tc.code)
					}
					golden(t, filepath.Join("testdata/sagas", tc.name+".golden"), []byte(out))
				})
			}
		})
	}
}

// TestSagasShowJSONIsTheSummary: `sagas show --format json` has every key
// of FLOW-FORMAT §5's summary, the steps in order with their states, and
// the not-undone steps of an unresolved instance.
func TestSagasShowJSONIsTheSummary(t *testing.T) {
	clock := testenv.NewClock()
	url, set := sagaBackends[0].open(t, stores.Options{Now: clock.Now})
	writeSagaFixture(t, set, clock)
	out, errOut, code := cli(t, "sagas", "show", "ord-1004", "--format", "json", "--store", url)
	if code != 0 {
		t.Fatalf("sagas show --format json: exit %d\nstderr: %s", code, errOut)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("sagas show --format json printed invalid JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"saga", "id", "state", "started_at", "ended_at", "steps"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("sagas show --format json lacks %q:\n%s", k, out)
		}
	}
	if doc["state"] != "unresolved" || doc["started_at"] != "2026-09-09T14:00:10Z" {
		t.Errorf("state %v, started_at %v; want unresolved, 2026-09-09T14:00:10Z", doc["state"], doc["started_at"])
	}
	steps, _ := doc["steps"].([]any)
	var states []string
	for _, s := range steps {
		st := s.(map[string]any)
		for _, k := range []string{"name", "state", "attempts"} {
			if _, ok := st[k]; !ok {
				t.Errorf("step %v lacks %q", st, k)
			}
		}
		states = append(states, st["name"].(string)+"="+st["state"].(string))
	}
	if want := []string{"take-payment=compensation_failed", "reserve-stock=compensated", "book-courier=failed"}; !slices.Equal(states, want) {
		t.Errorf("steps %v, want %v", states, want)
	}
	if nu, _ := doc["not_undone"].([]any); len(nu) != 1 || nu[0] != "take-payment" {
		t.Errorf("not_undone = %v, want [take-payment]", doc["not_undone"])
	}
	comps, _ := doc["compensations"].([]any)
	if len(comps) != 2 || comps[0].(map[string]any)["name"] != "reserve-stock" || comps[1].(map[string]any)["name"] != "take-payment" {
		t.Errorf("compensations = %v, want reserve-stock then take-payment, the order they ran", comps)
	}
}

func TestSagasOnAnEmptyStore(t *testing.T) {
	for _, b := range sagaBackends {
		t.Run(b.name, func(t *testing.T) {
			url, _ := b.open(t, stores.Options{})
			for _, tc := range []struct {
				args []string
				code int
				want string
			}{
				{[]string{"list"}, 0, "no saga instances\n"},
				{[]string{"list", "--saga", "place-order"}, 0, "no saga instances of saga \"place-order\"\n"},
				{[]string{"list", "--format", "json"}, 0, "{\n  \"instances\": [],\n  \"more\": false\n}\n"},
				{[]string{"unresolved"}, 0, "no unresolved saga instances\n"},
				{[]string{"unresolved", "--format", "json"}, 0, "{\n  \"unresolved\": 0,\n  \"compensating\": 0,\n  \"instances\": []\n}\n"},
			} {
				args := append(append([]string{"sagas"}, tc.args...), "--store", url)
				out, errOut, code := cli(t, args...)
				if code != tc.code || out != tc.want {
					t.Errorf("acemq-flow %s: exit %d, stdout %q; want %d and %q\nstderr: %s", strings.Join(tc.args, " "), code, out, tc.code, tc.want, errOut)
				}
			}
		})
	}
}

// TestSagasShowUnknownID: an id the store does not hold is a sentence
// naming the id and the store, exit 1, with the password hidden.
func TestSagasShowUnknownID(t *testing.T) {
	for _, b := range sagaBackends {
		t.Run(b.name, func(t *testing.T) {
			url, _ := b.open(t, stores.Options{})
			out, errOut, code := cli(t, "sagas", "show", "ord-404", "--store", url)
			if code != 1 || out != "" {
				t.Fatalf("sagas show ord-404: exit %d, stdout %q; want 1 and nothing on stdout", code, out)
			}
			for _, want := range []string{`no saga instance "ord-404" in the store ` + redactStore(url), "acemq-flow sagas list"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("sagas show ord-404: stderr %q lacks %q", errOut, want)
				}
			}
		})
	}
}

func TestSagasUsageErrors(t *testing.T) {
	store := "sqlite:" + filepath.Join(t.TempDir(), "unused.db")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"sagas"}, "name a command"},
		{"an unknown subcommand", []string{"sagas", "lst"}, "did you mean `acemq-flow sagas list`?"},
		{"show without an id", []string{"sagas", "show", "--store", store}, "name the instance"},
		{"show with two ids", []string{"sagas", "show", "a", "b", "--store", store}, "name the instance"},
		{"an unknown state", []string{"sagas", "list", "--state", "done", "--store", store}, `--state "done" is not a saga state`},
		{"a negative limit", []string{"sagas", "unresolved", "--limit", "-1", "--store", store}, "--limit must be 0 (all) or more"},
		{"an unknown format", []string{"sagas", "list", "--format", "yaml", "--store", store}, "--format must be text or json"},
		{"the memory store", []string{"sagas", "unresolved", "--store", "memory:"}, "name the store the runtime uses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := cli(t, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("acemq-flow %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
			}
		})
	}
	// A store that does not exist is a failed operation, not a usage
	// error, and is not created.
	_, errOut, code := cli(t, "sagas", "list", "--store", store)
	if code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("sagas list on a missing SQLite file: exit %d, stderr %q; want 1 saying it does not exist", code, errOut)
	}
}

// TestSagasEscapeWhatTheStoreHolds: an id, an output or an error holding
// a terminal escape sequence is printed escaped.
func TestSagasEscapeWhatTheStoreHolds(t *testing.T) {
	clock := testenv.NewClock()
	url, set := sagaBackends[0].open(t, stores.Options{Now: clock.Now})
	w := sagaWriter{t: t, set: set, clock: clock}
	inst := w.start("place-order", "ord-\x1b[2J", "take-payment", "reserve-stock")
	inst = w.completed(inst, 0, "\x1b[31mred", 1)
	inst = w.failed(inst, 1, 1, "boom \x1b[0m", 0)
	w.compensated(inst, 0, "refund \x1b]0;title\a", 0, stores.SagaUnresolved)
	for _, args := range [][]string{{"list"}, {"show", "ord-\x1b[2J"}, {"unresolved"}} {
		out, errOut, _ := cli(t, append(append([]string{"sagas"}, args...), "--store", url)...)
		if strings.ContainsAny(out, "\x1b\a") || !strings.Contains(out, `ord-\u001b[2J`) {
			t.Errorf("sagas %s printed a raw escape sequence or no escaped id:\n%q\nstderr: %s", args[0], out, errOut)
		}
	}
}

// TestReadmeShowsTheSagasGoldens: the README's sample output of the sagas
// commands is the goldens', so that it changes with them.
func TestReadmeShowsTheSagasGoldens(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct{ cmd, golden string }{
		{"$ acemq-flow sagas list --store postgres://acemq@db/acemq\n", "list.txt"},
		{"$ acemq-flow sagas show ord-1004\n", "show-unresolved.txt"},
		{"$ acemq-flow sagas unresolved\n", "unresolved.txt"},
	} {
		out, err := os.ReadFile(filepath.Join("testdata/sagas", g.golden+".golden"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), g.cmd+string(out)+"```") {
			t.Errorf("README.md lacks %q followed by testdata/sagas/%s.golden; copy the golden there", strings.TrimSpace(g.cmd), g.golden)
		}
	}
}
