package plan

import (
	"errors"
	"fmt"
)

// Pipeline returns the pipeline called name, or nil.
func (p *Plan) Pipeline(name string) *Pipeline {
	for i := range p.Pipelines {
		if p.Pipelines[i].Name == name {
			return &p.Pipelines[i]
		}
	}
	return nil
}

// Itinerary returns the itinerary called name, or nil.
func (p *Plan) Itinerary(name string) *Itinerary {
	for i := range p.Itineraries {
		if p.Itineraries[i].Name == name {
			return &p.Itineraries[i]
		}
	}
	return nil
}

// Saga returns the saga called name, or nil.
func (p *Plan) Saga(name string) *Saga {
	for i := range p.Sagas {
		if p.Sagas[i].Name == name {
			return &p.Sagas[i]
		}
	}
	return nil
}

// Names lists the names of the plan's pipelines, itineraries or sagas
// (kind "pipeline", "itinerary" or "saga") for an error message: "[a b]",
// or "none".
func (p *Plan) Names(kind string) string {
	var out []string
	switch kind {
	case "pipeline":
		for _, x := range p.Pipelines {
			out = append(out, x.Name)
		}
	case "itinerary":
		for _, x := range p.Itineraries {
			out = append(out, x.Name)
		}
	case "saga":
		for _, x := range p.Sagas {
			out = append(out, x.Name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return fmt.Sprint(out)
}

// ErrUnsupported marks parts of the format the runtime does not run yet:
// `validate` accepts them, `run` refuses them, naming the feature and its
// position (runtime.Supported). Today there are none.
var ErrUnsupported = errors.New("not supported by this runtime yet")
