package decide

import "time"

// SagaSummary is an instance as a person or a program reads it
// (FLOW-FORMAT §5): the body of the reply when it ends, and what `sagas
// show ID --format json` prints. Times are RFC 3339 UTC; a time not reached
// yet is left out. NotUndone lists the steps that happened and were not
// undone (an unresolved instance's report); fields may be added, never
// renamed.
type SagaSummary struct {
	Saga      string            `json:"saga"`
	ID        string            `json:"id"`
	State     string            `json:"state"`
	StartedAt time.Time         `json:"started_at,omitzero"`
	EndedAt   time.Time         `json:"ended_at,omitzero"`
	Steps     []SagaStepSummary `json:"steps"`
	NotUndone []string          `json:"not_undone,omitempty"`
}

// SagaStepSummary is one step of a SagaSummary. Output is not part of it:
// it may be large, and it is the steps' business.
type SagaStepSummary struct {
	Name          string    `json:"name"`
	State         string    `json:"state"`
	Attempts      int       `json:"attempts"`
	CompletedAt   time.Time `json:"completed_at,omitzero"`
	CompensatedAt time.Time `json:"compensated_at,omitzero"`
	Error         string    `json:"error,omitempty"`
}

// SummaryOf is the summary of inst, its times in UTC.
func SummaryOf(inst SagaInstance) SagaSummary {
	s := SagaSummary{Saga: inst.Saga, ID: inst.ID, State: inst.State,
		StartedAt: utc(inst.StartedAt), EndedAt: utc(inst.EndedAt), Steps: []SagaStepSummary{}, NotUndone: NotUndone(inst)}
	for _, st := range inst.Steps {
		s.Steps = append(s.Steps, SagaStepSummary{Name: st.Name, State: st.State, Attempts: st.Attempts,
			CompletedAt: utc(st.CompletedAt), CompensatedAt: utc(st.CompensatedAt), Error: st.Error})
	}
	return s
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
