package decide

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

const formatSlip = `{"steps":[{"exchange":"orders-events","routingKey":"order.charge","name":"charge"}],"done":[{"exchange":"orders-events","routingKey":"order.validate","name":"validate","completedAt":"2026-09-09T14:03:11Z"}]}`

func TestSlipRoundTripsByteForByte(t *testing.T) {
	cases := []struct{ name, in string }{
		{"the example of FLOW-FORMAT §2", formatSlip},
		{"unknown fields at every level are kept", `{"steps":[{"exchange":"x","routingKey":"k","name":"a","ttl":5}],"done":[],"trace":{"id":"t-1"},"v":2}`},
		{"an empty route", `{"steps":[],"done":[]}`},
		{"another writer's timestamps are kept as written", `{"steps":[],"done":[{"exchange":"x","routingKey":"k","name":"a","completedAt":"2026-09-09T14:03:11.250Z"},{"exchange":"x","routingKey":"k","name":"b","completedAt":"2026-09-09T16:03:11+02:00"}]}`},
		{"characters HTML would escape", `{"steps":[{"exchange":"a&b","routingKey":"<k>","name":"n"}],"done":[]}`},
		{"text that looks like an HTML escape", `{"steps":[{"exchange":"x","routingKey":"a\\u003cb\\u0026","name":"n"}],"done":[]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			it, err := ParseItinerary([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseItinerary(%s): %v", tc.in, err)
			}
			out, _ := it.MarshalJSON()
			if string(out) != tc.in {
				t.Errorf("round trip changed the slip:\n got  %s\n want %s", out, tc.in)
			}
		})
	}
}

func TestSlipAdvanceIsImmutableAndStampsCompletedAt(t *testing.T) {
	it := Itinerary{}.Then("orders-events", "order.validate", "validate").Then("orders-events", "order.charge", "charge")
	at := time.Date(2026, 9, 9, 14, 3, 11, 500_000_000, time.FixedZone("CEST", 7200))
	next := it.Advance(at)
	if len(it.Steps()) != 2 || len(it.Done()) != 0 {
		t.Errorf("Advance changed the original: %d steps, %d done", len(it.Steps()), len(it.Done()))
	}
	out, _ := next.MarshalJSON()
	want := `{"steps":[{"exchange":"orders-events","routingKey":"order.charge","name":"charge"}],"done":[{"exchange":"orders-events","routingKey":"order.validate","name":"validate","completedAt":"2026-09-09T12:03:11Z"}]}`
	if string(out) != want {
		t.Errorf("Advance: got %s, want %s", out, want)
	}
	last := next.Advance(at)
	if _, ok := last.Current(); ok || len(last.Done()) != 2 {
		t.Errorf("after the last stop: current present = %v, done %d; want the route ended with 2 done", ok, len(last.Done()))
	}
}

func TestSlipAcceptsFractionalSeconds(t *testing.T) {
	it, err := ParseItinerary([]byte(`{"steps":[],"done":[{"exchange":"x","routingKey":"k","name":"a","completedAt":"2026-09-09T14:03:11.123456Z"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := it.Done()[0].CompletedAt.Nanosecond(); got != 123456000 {
		t.Errorf("completedAt nanoseconds = %d, want 123456000", got)
	}
}

func TestBrokenSlipsAreErrSlip(t *testing.T) {
	for _, in := range []string{``, `not json`, `[]`, `{"steps":"x"}`, `{"steps":[{"name":"a"}]}`, `{"steps":[],"done":[{"completedAt":"yesterday"}]}`, `{"steps":[]} trailing`} {
		if _, err := ParseItinerary([]byte(in)); !errors.Is(err, ErrSlip) {
			t.Errorf("ParseItinerary(%q) = %v, want ErrSlip", in, err)
		}
	}
}

func FuzzParseItinerary(f *testing.F) {
	f.Add([]byte(formatSlip))
	f.Add([]byte(`{"steps":[],"done":[],"x":[1,{"y":null}]}`))
	f.Add([]byte(`{"steps":[{"exchange":"x","routingKey":"a\\u003cb","name":"n"}],"done":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		it, err := ParseItinerary(data)
		if err != nil {
			return
		}
		// What we write, we must read back the same.
		out, _ := it.MarshalJSON()
		again, err := ParseItinerary(out)
		if err != nil {
			t.Fatalf("our own output does not parse: %v\n%s", err, out)
		}
		out2, _ := again.MarshalJSON()
		if string(out) != string(out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
		if strings.Contains(string(out), "\n") && !strings.Contains(string(data), "\n") {
			t.Fatalf("newline appeared")
		}
	})
}

// Foreign writers: a completedAt written as null is absent (Jackson and
// Python write missing values so), and a slip header set to nothing means
// no slip; anything else unreadable is still a broken slip.
func TestSlipsFromOtherWriters(t *testing.T) {
	it, err := ParseItinerary([]byte(`{"steps":[{"exchange":"x","routingKey":"k","name":"a","completedAt":null}],"done":[{"exchange":"x","routingKey":"j","name":"z","completedAt":null}]}`))
	if err != nil {
		t.Fatalf("a null completedAt: %v", err)
	}
	if next, ok := it.Current(); !ok || next.Name != "a" || !it.Done()[0].CompletedAt.IsZero() {
		t.Errorf("slip read as %+v", it)
	}
	for _, v := range []any{nil, "", "  ", []byte{}} {
		env := ReadEnvelope(Message{Headers: Table{plan.HeaderSlip: v}})
		if env.SlipErr != nil || env.Slip != nil {
			t.Errorf("slip header %#v: slip %v, error %v; want none", v, env.Slip, env.SlipErr)
		}
	}
	if env := ReadEnvelope(Message{Headers: Table{plan.HeaderSlip: int64(7)}}); !errors.Is(env.SlipErr, ErrSlip) {
		t.Errorf("slip header 7: error %v, want ErrSlip", env.SlipErr)
	}
}

// A plan read back without its flows has the text of the stops' when
// conditions, not their programs: the slip is refused rather than built
// with every stop.
func TestAnItineraryWithoutItsConditionsIsRefused(t *testing.T) {
	_, err := ItineraryFor(plan.Itinerary{Name: "approval", Stops: []plan.Stop{
		{Name: "approve", Exchange: "x", RoutingKey: "a", When: "payload.total > 1000"},
		{Name: "ship", Exchange: "x", RoutingKey: "s"},
	}}, map[string]any{"total": 5})
	if err == nil || !strings.Contains(err.Error(), `stop "approve"`) {
		t.Fatalf("ItineraryFor without compiled conditions = %v, want a refusal naming stop approve", err)
	}
}
