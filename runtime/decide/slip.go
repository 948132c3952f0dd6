package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// Itinerary is a carried routing slip (FLOW-FORMAT §2): the stops still to
// visit, steps[0] being the one the message is addressed to now, and the
// stops done, each stamped when it finished. It is immutable: Then and
// Advance return new values. Fields other languages add, at any level, are
// kept and written back.
type Itinerary struct {
	steps []Stop
	done  []Stop
	extra []field // unknown top-level fields, in the order they were read
}

// Stop is one entry of a slip.
type Stop struct {
	Exchange    string
	RoutingKey  string
	Name        string
	CompletedAt time.Time // zero while the stop is still ahead
	completed   string    // completedAt as it was read, written back unchanged
	extra       []field
}

type field struct {
	key   string
	value json.RawMessage
}

// ErrSlip marks a slip that cannot be parsed: fatal, never retried.
var ErrSlip = errors.New("the routing slip cannot be parsed")

// Then returns the itinerary with one more stop at the end.
func (it Itinerary) Then(exchange, routingKey, name string) Itinerary {
	steps := make([]Stop, len(it.steps), len(it.steps)+1)
	copy(steps, it.steps)
	it.steps = append(steps, Stop{Exchange: exchange, RoutingKey: routingKey, Name: name})
	return it
}

// Steps returns the stops still ahead; Steps()[0] is the current one.
func (it Itinerary) Steps() []Stop { return append([]Stop(nil), it.steps...) }

// Done returns the stops finished, in order.
func (it Itinerary) Done() []Stop { return append([]Stop(nil), it.done...) }

// Current returns the stop the message is addressed to, if any.
func (it Itinerary) Current() (Stop, bool) {
	if len(it.steps) == 0 {
		return Stop{}, false
	}
	return it.steps[0], true
}

// Advance moves the current stop to done, stamped with at (UTC, whole
// seconds as other languages write it), and returns the new itinerary.
func (it Itinerary) Advance(at time.Time) Itinerary {
	if len(it.steps) == 0 {
		return it
	}
	cur := it.steps[0]
	cur.CompletedAt = at.UTC().Truncate(time.Second)
	cur.completed = ""
	done := make([]Stop, len(it.done), len(it.done)+1)
	copy(done, it.done)
	it.done = append(done, cur)
	it.steps = append([]Stop(nil), it.steps[1:]...)
	return it
}

// ParseItinerary reads a slip as other languages write it. Unknown fields
// are kept. A slip that is not this shape is ErrSlip.
func ParseItinerary(data []byte) (Itinerary, error) {
	var it Itinerary
	fields, err := objectFields(data)
	if err != nil {
		return it, fmt.Errorf("%w: %v", ErrSlip, err)
	}
	for _, f := range fields {
		switch f.key {
		case "steps", "done":
			stops, err := parseStops(f.value, f.key == "done")
			if err != nil {
				return it, fmt.Errorf("%w: %s: %v", ErrSlip, f.key, err)
			}
			if f.key == "steps" {
				it.steps = stops
			} else {
				it.done = stops
			}
		default:
			it.extra = append(it.extra, f)
		}
	}
	return it, nil
}

func parseStops(raw json.RawMessage, done bool) ([]Stop, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("not a list")
	}
	stops := make([]Stop, 0, len(items))
	for i, item := range items {
		fields, err := objectFields(item)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %v", i, err)
		}
		var s Stop
		for _, f := range fields {
			if f.key == "completedAt" && string(bytes.TrimSpace(f.value)) == "null" {
				continue // written as null by a writer that has no time: absent
			}
			var str string
			switch f.key {
			case "exchange", "routingKey", "name", "completedAt":
				if err := json.Unmarshal(f.value, &str); err != nil {
					return nil, fmt.Errorf("entry %d: %s is not a string", i, f.key)
				}
			}
			switch f.key {
			case "exchange":
				s.Exchange = str
			case "routingKey":
				s.RoutingKey = str
			case "name":
				s.Name = str
			case "completedAt":
				t, err := time.Parse(time.RFC3339Nano, str)
				if err != nil {
					return nil, fmt.Errorf("entry %d: completedAt %q is not an RFC 3339 time", i, str)
				}
				s.CompletedAt, s.completed = t, str
			default:
				s.extra = append(s.extra, f)
			}
		}
		if !done && s.RoutingKey == "" && s.Exchange == "" {
			return nil, fmt.Errorf("entry %d names neither exchange nor routingKey", i)
		}
		stops = append(stops, s)
	}
	return stops, nil
}

// objectFields reads a JSON object's fields in order, values raw.
func objectFields(data []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{key: key, value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

// MarshalJSON writes the slip field for field as other languages do:
// {"steps":[{"exchange","routingKey","name"}],"done":[{...,"completedAt"}]},
// unknown fields after the known ones, in the order they were read.
func (it Itinerary) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"steps":`)
	writeStops(&b, it.steps)
	b.WriteString(`,"done":`)
	writeStops(&b, it.done)
	writeExtra(&b, it.extra)
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeStops(b *bytes.Buffer, stops []Stop) {
	b.WriteByte('[')
	for i, s := range stops {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"exchange":`)
		writeString(b, s.Exchange)
		b.WriteString(`,"routingKey":`)
		writeString(b, s.RoutingKey)
		b.WriteString(`,"name":`)
		writeString(b, s.Name)
		switch {
		case s.completed != "":
			// Another writer's timestamp is kept as it wrote it.
			b.WriteString(`,"completedAt":`)
			writeString(b, s.completed)
		case !s.CompletedAt.IsZero():
			b.WriteString(`,"completedAt":`)
			writeString(b, s.CompletedAt.UTC().Format(time.RFC3339))
		}
		writeExtra(b, s.extra)
		b.WriteByte('}')
	}
	b.WriteByte(']')
}

func writeExtra(b *bytes.Buffer, extra []field) {
	for _, f := range extra {
		b.WriteByte(',')
		writeString(b, f.key)
		b.WriteByte(':')
		b.Write(f.value)
	}
}

func writeString(b *bytes.Buffer, s string) {
	// Names, exchanges and keys are nearly always plain ASCII with nothing
	// to escape: written as they are, without an encoder per string.
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\'
	}
	if plain {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	// Without HTML escaping (<, > and & as \u003c…, which other languages
	// do not write); the encoder ends its value with a newline.
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	b.Truncate(b.Len() - 1)
}

// ItineraryFor builds the slip a message entering itinerary it starts
// with: only the stops whose `when` holds for this payload (the decoded
// JSON).
func ItineraryFor(it plan.Itinerary, payload any) (Itinerary, error) {
	var out Itinerary
	for i, s := range it.Stops {
		if s.When != "" && (it.Spec == nil || i >= len(it.Spec.Stops)) {
			// A plan read back without its flows has the conditions'
			// text but not their programs: every stop would be taken.
			return Itinerary{}, fmt.Errorf("itinerary %q stop %q: its when condition is not compiled; build the message from the flow files", it.Name, s.Name)
		}
		if it.Spec != nil && i < len(it.Spec.Stops) {
			ok, err := it.Spec.Stops[i].When.Eval(payload)
			if err != nil {
				return Itinerary{}, fmt.Errorf("itinerary %q stop %q: %w", it.Name, s.Name, err)
			}
			if !ok {
				continue
			}
		}
		out = out.Then(s.Exchange, s.RoutingKey, s.Name)
	}
	return out, nil
}
