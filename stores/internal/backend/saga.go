package backend

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// SagaTime is t as every backend keeps an instance's times: UTC, to the
// millisecond.
func SagaTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// EncodeSagaSteps returns the JSON the steps column holds: an array of
// stores.SagaStep (outputs base64, times RFC 3339 UTC).
func EncodeSagaSteps(inst stores.SagaInstance) ([]byte, error) {
	steps := inst.Steps
	if steps == nil {
		steps = []stores.SagaStep{}
	}
	b, err := json.Marshal(steps)
	if err != nil {
		return nil, fmt.Errorf("saga %q instance %q: encode its steps: %w", inst.Saga, inst.ID, err)
	}
	return b, nil
}

// DecodeSagaSteps reads the steps column of instance id.
func DecodeSagaSteps(id string, b []byte) ([]stores.SagaStep, error) {
	var steps []stores.SagaStep
	if len(b) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(b, &steps); err != nil {
		return nil, fmt.Errorf("saga instance %q: the steps column %.80q is not a JSON array of steps: %w", id, b, err)
	}
	if len(steps) == 0 {
		return nil, nil
	}
	return steps, nil
}

// StaleSaga builds the refusal of an AdvanceSaga of inst given the version the
// store holds (0: no instance).
func StaleSaga(inst stores.SagaInstance, current int64) *stores.StaleSagaError {
	return &stores.StaleSagaError{Saga: inst.Saga, ID: inst.ID, Version: inst.Version, Current: current}
}
