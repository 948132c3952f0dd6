package decide

import (
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// Target says where `send` publishes: the entry of a pipeline, an
// itinerary or a saga, or an exchange and routing key.
type Target struct {
	Pipeline   string `json:"pipeline,omitempty"`
	Itinerary  string `json:"itinerary,omitempty"`
	Saga       string `json:"saga,omitempty"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
}

// FirstMessage builds the first message of a run: a new message id that is
// also the run's correlation id, attempt 1, first-seen now, and the route
// (a pipeline's declared route, or an itinerary's slip holding only the
// stops whose `when` holds for this payload); a saga's goes to its first
// step's queue and starts an instance whose id is the message's. The
// payload is checked against the entry's input type first.
func FirstMessage(p *plan.Plan, t Target, payload []byte, now time.Time) (Message, error) {
	id := NewMessageID()
	msg := Message{
		MessageID: id, CorrelationID: id, ContentType: "application/json", DeliveryMode: Persistent,
		Timestamp: now.UTC().Truncate(time.Second), Body: payload,
		Headers: Table{plan.HeaderAttempt: int64(1), plan.HeaderFirstSeen: FormatTime(now)},
	}
	switch {
	case t.Pipeline != "":
		pl := p.Pipeline(t.Pipeline)
		if pl == nil {
			return msg, fmt.Errorf("no pipeline %q in the flows; known: %s", t.Pipeline, p.Names("pipeline"))
		}
		if err := checkInput(pl.File, pl.Input, payload); err != nil {
			return msg, fmt.Errorf("pipeline %q: %w", pl.Name, err)
		}
		msg.Exchange, msg.RoutingKey = pl.Exchange, pl.Route[0]
		msg.Type = pl.Input
		msg.Headers[plan.HeaderRoute] = plan.RouteHeader(pl.Route)
		msg.Headers[plan.HeaderRoutePosition] = int64(0)
		msg.Headers[plan.HeaderOrigin] = pl.Flow
	case t.Itinerary != "":
		it := p.Itinerary(t.Itinerary)
		if it == nil {
			return msg, fmt.Errorf("no itinerary %q in the flows; known: %s", t.Itinerary, p.Names("itinerary"))
		}
		var decoded any
		if len(payload) > 0 {
			v, err := spec.DecodeJSON(payload)
			if err != nil {
				return msg, fmt.Errorf("itinerary %q: the payload is not JSON: %w", it.Name, err)
			}
			decoded = v
		}
		if it.Input != "" && it.Spec != nil {
			if err := checkInput(it.File, it.Input, payload); err != nil {
				return msg, fmt.Errorf("itinerary %q: %w", it.Name, err)
			}
		}
		slip, err := ItineraryFor(*it, decoded)
		if err != nil {
			return msg, err
		}
		first, ok := slip.Current()
		if !ok {
			return msg, fmt.Errorf("itinerary %q: no stop applies to this payload", it.Name)
		}
		raw, _ := slip.MarshalJSON()
		msg.Exchange, msg.RoutingKey = first.Exchange, first.RoutingKey
		msg.Type = it.Input
		msg.Headers[plan.HeaderSlip] = string(raw)
		msg.Headers[plan.HeaderOrigin] = it.Flow
	case t.Saga != "":
		s := p.Saga(t.Saga)
		if s == nil {
			return msg, fmt.Errorf("no saga %q in the flows; known: %s", t.Saga, p.Names("saga"))
		}
		if err := checkInput(s.File, s.Input, payload); err != nil {
			return msg, fmt.Errorf("saga %q: %w", s.Name, err)
		}
		// The instance's id is this message's (FLOW-FORMAT §5): it carries
		// no x-acemq-saga-id, which the first step's consumer reads as the
		// start of an instance.
		msg.Exchange, msg.RoutingKey = plan.SagaExchange(s.Name), plan.SagaStepKey(s.Steps[0].Name)
		msg.Type = s.Input
		msg.Headers[plan.HeaderOrigin] = s.Flow
		msg.Headers[plan.HeaderSaga] = s.Name
	case t.Exchange != "" || t.RoutingKey != "":
		msg.Exchange, msg.RoutingKey = t.Exchange, t.RoutingKey
		msg.Headers[plan.HeaderOrigin] = "acemq-flow send"
	default:
		return msg, errors.New("say where to send: --pipeline, --itinerary, --saga, or --exchange with --routing-key")
	}
	return msg, nil
}

func checkInput(f *spec.Flow, typ string, payload []byte) error {
	if f == nil || typ == "" {
		return nil
	}
	if err := f.Type(typ).ValidateJSON(payload); err != nil {
		return fmt.Errorf("the payload is not a valid %s: %w", typ, err)
	}
	return nil
}
