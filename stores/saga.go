package stores

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SagaState is where a saga instance is (FLOW-FORMAT §5): running, then
// completed; or, once a step failed for good, compensating, then
// compensated or unresolved.
type SagaState string

// The states of an instance. Completed, compensated and unresolved are
// ended: nothing moves an instance out of them.
const (
	SagaRunning      SagaState = "running"
	SagaCompensating SagaState = "compensating"
	SagaCompleted    SagaState = "completed"
	SagaCompensated  SagaState = "compensated"
	SagaUnresolved   SagaState = "unresolved"
)

// Ended reports whether s is a terminal state.
func (s SagaState) Ended() bool {
	return s == SagaCompleted || s == SagaCompensated || s == SagaUnresolved
}

// Valid reports whether s is one of the five states.
func (s SagaState) Valid() bool {
	return s == SagaRunning || s == SagaCompensating || s.Ended()
}

// SagaStepState is the outcome of one step of an instance.
type SagaStepState string

// The states of a step: pending until it runs; completed, skipped (its
// `when` was false) or failed (for good); a completed step that was undone
// is compensated, or compensation_failed when its compensation failed for
// good.
const (
	StepPending            SagaStepState = "pending"
	StepCompleted          SagaStepState = "completed"
	StepSkipped            SagaStepState = "skipped"
	StepFailed             SagaStepState = "failed"
	StepCompensated        SagaStepState = "compensated"
	StepCompensationFailed SagaStepState = "compensation_failed"
)

// SagaStep is what an instance records of one of its steps. Output is what
// the step's handler returned (what its compensation is given); Attempts
// counts the deliveries of the step's message (the last one recorded);
// Error is the last failure, of the step or of its compensation.
type SagaStep struct {
	Name          string        `json:"name"`
	State         SagaStepState `json:"state"`
	Attempts      int           `json:"attempts,omitempty"`
	Output        []byte        `json:"output,omitempty"`
	CompletedAt   time.Time     `json:"completed_at,omitzero"`
	CompensatedAt time.Time     `json:"compensated_at,omitzero"`
	Error         string        `json:"error,omitempty"`
}

// SagaInstance is one run of a saga as the store keeps it. ID is the
// message id of the message that started it, unique in the store. Step is
// the index of the step reached: running, the step whose message is out;
// compensating, the step whose compensation is out. Input is the saga's
// input, the payload every handler gets. ReplyTo and CorrelationID are
// where the summary goes when the instance ends. Version counts the writes:
// 1 after CreateSaga, +1 for every AdvanceSaga. Times are the store's
// clock: StartedAt set by CreateSaga, UpdatedAt by every write, EndedAt
// when the state is ended (zero before).
type SagaInstance struct {
	Saga          string
	ID            string
	State         SagaState
	Step          int
	Input         []byte
	ReplyTo       string
	CorrelationID string
	Steps         []SagaStep
	Version       int64
	StartedAt     time.Time
	UpdatedAt     time.Time
	EndedAt       time.Time
}

// SagaFilter selects instances for ListSagas: of one saga (empty: all), in
// one state (empty: all), at most Limit (0: no limit), oldest first, or
// newest first with Newest (the last Limit started, as `sagas list` shows
// them).
type SagaFilter struct {
	Saga   string
	State  SagaState
	Limit  int
	Newest bool
}

// SagaCount is how many instances of one saga are in one state, as
// CountSagas returns it.
type SagaCount struct {
	Saga      string
	State     SagaState
	Instances int64
}

// ErrStaleSaga is matched (errors.Is) by every *StaleSagaError.
var ErrStaleSaga = errors.New("stale saga version")

// StaleSagaError refuses an AdvanceSaga whose Version is not the one the
// store holds: another writer (a replica, a redelivery) advanced the
// instance since it was read (Current is the store's version), or the
// instance does not exist (Current 0). The refused caller wrote nothing;
// it reads the instance again and decides anew.
type StaleSagaError struct {
	Saga    string
	ID      string
	Version int64
	Current int64
}

// Error says which instance, which version was presented and which the
// store holds.
func (e *StaleSagaError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("saga %q instance %q: no such instance (purged, or never created): version %d not written", e.Saga, e.ID, e.Version)
	}
	return fmt.Sprintf("saga %q instance %q: version %d is stale, the store holds version %d: read the instance again and decide anew", e.Saga, e.ID, e.Version, e.Current)
}

// Is reports whether target is ErrStaleSaga.
func (e *StaleSagaError) Is(target error) bool { return target == ErrStaleSaga }

// Sagas is the saga state store: one row per instance, written by the
// runtime's saga wrapper around each step call, read by `acemq-flow
// sagas`.
//
// Protocol: the message that starts a saga calls CreateSaga; of any number
// of concurrent creators of one id (replicas, redeliveries) exactly one
// gets created true, and the others read the instance instead. Every later
// decision reads the instance (GetSaga), decides its next state and writes
// it with AdvanceSaga, presenting the version it read: a concurrent writer
// makes it fail with a *StaleSagaError (errors.Is ErrStaleSaga), and the
// loser wrote nothing. The writer publishes what its decision sends only
// after its write succeeded, so a refused writer publishes nothing. Any
// other error is a failure of the store and decides nothing: the caller
// tries again (the message is retried). Implementations are safe for
// concurrent use.
type Sagas interface {
	// CreateSaga writes inst as a new instance at version 1, with
	// StartedAt and UpdatedAt set to the store's clock, and returns it as
	// stored. created is false, and nothing is written, when an instance
	// with inst.ID exists; the existing one is returned instead. Saga, ID
	// and a valid State are required.
	CreateSaga(ctx context.Context, inst SagaInstance) (stored SagaInstance, created bool, err error)

	// GetSaga returns the instance with id, and ok false when there is none.
	GetSaga(ctx context.Context, id string) (inst SagaInstance, ok bool, err error)

	// AdvanceSaga replaces the state, step, steps and reply fields of the
	// instance inst.ID when the store holds inst.Version, and returns it
	// as stored: Version + 1, UpdatedAt now, EndedAt now when the state
	// became ended. Saga, Input and StartedAt are not changed. A version
	// the store does not hold, or a missing instance, is refused with a
	// *StaleSagaError; an ended instance can not be advanced (its version
	// is never presented again by a correct caller, and a stale one is
	// refused as above).
	AdvanceSaga(ctx context.Context, inst SagaInstance) (SagaInstance, error)

	// ListSagas returns the instances f selects, oldest started first (ties
	// by id), or newest first (ties by id, descending) with f.Newest.
	ListSagas(ctx context.Context, f SagaFilter) ([]SagaInstance, error)

	// CountSagas returns how many instances each saga has in each state,
	// ordered by saga and state, without reading the instances themselves
	// (the metrics' acemq_saga_instances). A saga with no instance in a
	// state has no entry for it.
	CountSagas(ctx context.Context) ([]SagaCount, error)

	// PurgeSagas deletes the instances that ended before before, never a
	// running or compensating one, and returns how many it deleted.
	PurgeSagas(ctx context.Context, before time.Time) (int64, error)
}

// CheckSagaInstance refuses an instance a store must not write: no saga
// name, no id, or a state that is not one of the five.
func CheckSagaInstance(inst SagaInstance) error {
	switch {
	case inst.Saga == "":
		return fmt.Errorf("saga instance %q: no saga name: set SagaInstance.Saga", inst.ID)
	case inst.ID == "":
		return fmt.Errorf("saga %q: instance without an id: set SagaInstance.ID to the starting message's id", inst.Saga)
	case !inst.State.Valid():
		return fmt.Errorf("saga %q instance %q: state %q is not one of running, compensating, completed, compensated, unresolved", inst.Saga, inst.ID, inst.State)
	}
	return nil
}

// SagaClaimRequest asks ClaimSagaBatch for the claim of a saga delivery's
// message (as TryClaim: Key, Owner, Lease) and for the instance it belongs
// to (Instance, its id).
type SagaClaimRequest struct {
	ClaimRequest
	Instance string
}

// SagaClaim answers one SagaClaimRequest: the claim, as TryClaim answers
// it, and, for a Claimed or AlreadyConfirmed answer, the instance the store
// holds (Found false: none), read as of the claim's answer: an
// AlreadyConfirmed answer's instance has every write committed before the
// confirm (a saga consumer advances the instance before it confirms). For
// an InProgress answer the instance may be left unread.
type SagaClaim struct {
	Claim
	Instance SagaInstance
	Found    bool
}

// SagaClaims is what a backend that keeps its idempotency claims and its
// saga instances in one database offers the saga consumers, so that a step
// waits on the store fewer times: the claim of a delivery and the read of
// its instance in one round trip. Every backend implements it. Safe for
// concurrent use.
type SagaClaims interface {
	// ClaimSagaBatch claims each request's key as TryClaimBatch does (one
	// claimant of a key wins; a key's later requests in the batch are
	// never Claimed and get the first's instance) and reads the instance
	// each names, in one round trip. An error means no answer for any
	// request, and no claim taken.
	ClaimSagaBatch(ctx context.Context, reqs []SagaClaimRequest) ([]SagaClaim, error)
}
