package decide

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

// Saga transitions (FLOW-FORMAT §5) are pure functions (state, event) →
// (new state, messages): the engine's saga wrapper reads the instance from
// the store, calls one of them, writes SagaTransition.Instance with the
// version it read when Write is set, and only then publishes
// SagaTransition.Publish and acknowledges. A write refused as stale means
// another delivery moved the instance first: the engine reads it again and
// asks again, and the answer is then a duplicate.
//
// The messages a transition sends have ids derived from the instance and
// the queue they go to, so that a message published again after a crash
// (written, published, not yet acknowledged) has the same id and is
// absorbed as a duplicate.

// States of a saga instance, as the store keeps them.
const (
	SagaRunning      = "running"
	SagaCompensating = "compensating"
	SagaCompleted    = "completed"
	SagaCompensated  = "compensated"
	SagaUnresolved   = "unresolved"
)

// States of one step of an instance.
const (
	SagaStepPending            = "pending"
	SagaStepCompleted          = "completed"
	SagaStepSkipped            = "skipped"
	SagaStepFailed             = "failed"
	SagaStepCompensated        = "compensated"
	SagaStepCompensationFailed = "compensation_failed"
)

// SagaInstance is an instance as the transitions see it: the store's row
// without its version, which the engine keeps. Step is the index of the
// step reached: running, the step whose message is out; compensating, the
// step whose compensation is out.
type SagaInstance struct {
	Saga          string
	ID            string
	State         string
	Step          int
	Input         []byte
	ReplyTo       string
	CorrelationID string
	Steps         []SagaStepRecord
	StartedAt     time.Time
	EndedAt       time.Time
}

// SagaStepRecord is what an instance records of one step.
type SagaStepRecord struct {
	Name          string
	State         string
	Attempts      int
	Output        []byte
	CompletedAt   time.Time
	CompensatedAt time.Time
	Error         string
}

// Ended reports whether the instance is in a terminal state.
func (i SagaInstance) Ended() bool {
	return i.State == SagaCompleted || i.State == SagaCompensated || i.State == SagaUnresolved
}

// SagaTransition is what one saga event does: write Instance (when Write),
// then publish Publish, then acknowledge. Outcome is counted (acknowledged,
// duplicate, dead_lettered) and Reason logged. Run, from SagaStart and
// SagaAccept, says the handler runs on the delivery in hand; nothing is
// written or published before it does. Rung is the retry queue of a
// delivery retried (SagaAfter), which writes nothing.
type SagaTransition struct {
	Outcome  string
	Write    bool
	Instance SagaInstance
	Publish  []Publish
	Reason   string
	Run      bool
	Rung     string
}

// Decision is the transition as a delivery's decision, for the engine's
// publish-then-acknowledge path.
func (t SagaTransition) Decision() Decision {
	return Decision{Outcome: t.Outcome, Publish: t.Publish, Reason: t.Reason, Rung: t.Rung}
}

// SagaInstanceID is the instance a delivery on a saga's queue belongs to:
// its x-acemq-saga-id header, or, for a message that carries none (the
// message that starts the instance), its own message id. start is true in
// that second case.
func SagaInstanceID(in Inbound) (id string, start bool) {
	if id := HeaderText(in.Env.Headers[plan.HeaderSagaID]); id != "" {
		return id, false
	}
	return in.Env.MessageID, true
}

// SagaStart decides what the message that starts an instance of saga s
// does, delivered to consumer c (the first step's queue, or any step's for
// a publisher that is not ours): a payload that is not a valid input is
// dead-lettered and starts nothing; otherwise the new instance (id: the
// message's id), its leading steps whose `when` is false recorded skipped,
// and the first step to run: on this delivery (Run) when c is that step's
// consumer, else its message. With no step to run, the instance is
// completed at once and the summary replied. The engine creates the
// instance (Write); when another creator won, it calls SagaAccept with the
// instance it read instead.
func SagaStart(s *plan.Saga, c *plan.Consumer, in Inbound, now time.Time) SagaTransition {
	if err := checkInput(s.File, s.Input, in.Body); err != nil {
		return sagaDeadLetter(c, in, fmt.Sprintf("saga %q: the starting message: %v", s.Name, err), now)
	}
	inst := SagaInstance{
		Saga: s.Name, ID: in.Env.MessageID, State: SagaRunning, Input: in.Body,
		ReplyTo: in.Env.ReplyTo, CorrelationID: RunID(in.Env), StartedAt: now,
	}
	for _, st := range s.Steps {
		inst.Steps = append(inst.Steps, SagaStepRecord{Name: st.Name, State: SagaStepPending})
	}
	t := sagaNext(s, inst, 0, in.Env.MessageID, now)
	if t.Instance.State == SagaRunning && s.Steps[t.Instance.Step].Name == c.Step && !isCompensation(s, c) {
		// This delivery is the first step's message: run it here rather
		// than publish it again.
		t.Run, t.Publish = true, nil
	}
	return t
}

// SagaAccept decides, before the handler runs, whether a delivery to
// consumer c of saga s is the message instance inst is waiting for: a step's
// message while the instance is running at that step and the step is
// pending, a compensation's while it is compensating at that step and the
// step is completed. It returns nil when the handler should run. A message
// for an instance that has moved past it (a redelivery, a republish after a
// crash, a step's message arriving after the timeout) is a duplicate:
// acknowledged, nothing run; when the instance is exactly where this
// message's handling left it (its write made, its delivery not
// acknowledged), the duplicate sends again what that handling sent, with
// the same id. A message for no instance (inst nil: a store
// deleted or purged, a foreign publisher's id), or for another saga's, is
// dead-lettered with that reason, never dropped.
func SagaAccept(s *plan.Saga, c *plan.Consumer, inst *SagaInstance, in Inbound, now time.Time) *SagaTransition {
	id, _ := SagaInstanceID(in)
	if inst == nil {
		t := sagaDeadLetter(c, in, fmt.Sprintf("saga %q: no instance %q in the store (purged, a store that was replaced, or a message that no instance sent); nothing was run", s.Name, id), now)
		return &t
	}
	if inst.Saga != s.Name {
		t := sagaDeadLetter(c, in, fmt.Sprintf("saga %q: instance %q belongs to saga %q; nothing was run", s.Name, id, inst.Saga), now)
		return &t
	}
	if why := sagaChanged(s, *inst); why != "" {
		t := sagaDeadLetter(c, in, why+"; nothing was run", now)
		return &t
	}
	i := stepIndex(s, c.Step)
	if i < 0 || i >= len(inst.Steps) {
		t := sagaDeadLetter(c, in, fmt.Sprintf("saga %q: instance %q has no step %q; nothing was run", s.Name, id, c.Step), now)
		return &t
	}
	want, state := SagaRunning, SagaStepPending
	if isCompensation(s, c) {
		want, state = SagaCompensating, SagaStepCompleted
	}
	if inst.State == want && inst.Step == i && inst.Steps[i].State == state {
		return nil
	}
	t := &SagaTransition{Outcome: OutcomeDuplicate,
		Reason: fmt.Sprintf("saga %q instance %q is %s at step %q (step %q %s): this message was handled before", s.Name, inst.ID, inst.State, stepAt(*inst), c.Step, inst.Steps[i].State)}
	if sagaCausedByStep(*inst, i, isCompensation(s, c)) {
		// The instance is where this message's handling put it: the write
		// was made, but the delivery was not acknowledged (a crash between
		// the write and the publish, or before the acknowledgement). What
		// the write sent may never have gone out: send it again, with the
		// same id, so that the instance does not wait for ever.
		t.Publish = sagaWaitingFor(s, *inst, in.Env.MessageID, now)
		if len(t.Publish) > 0 {
			t.Reason += "; what its handling sent is sent again, in case it was lost"
		}
	}
	return t
}

// sagaCausedByStep reports whether instance inst is where the handling of
// step i's message (or, with compensation, its compensation's) left it,
// rather than further on: nothing was recorded after it.
func sagaCausedByStep(inst SagaInstance, i int, compensation bool) bool {
	undone := func(st SagaStepRecord) bool {
		return st.State == SagaStepCompensated || st.State == SagaStepCompensationFailed
	}
	// Whether no step in (lo, hi) moved on after step i's handling.
	untouchedBetween := func(lo, hi int, forward bool) bool {
		for m := lo + 1; m < hi; m++ {
			st := inst.Steps[m]
			if forward && st.State != SagaStepSkipped {
				return false
			}
			if !forward && undone(st) {
				return false
			}
		}
		return true
	}
	st := inst.Steps[i]
	switch {
	// A skipped step's queue gets the starting message when the saga's
	// first steps are skipped: its handling created the instance and sent
	// the first step to run.
	case !compensation && (st.State == SagaStepCompleted || st.State == SagaStepSkipped) && (inst.State == SagaRunning || inst.State == SagaCompleted):
		end := inst.Step
		if inst.State == SagaCompleted {
			end = len(inst.Steps)
		}
		return end > i && untouchedBetween(i, end, true)
	case !compensation && st.State == SagaStepFailed, compensation && undone(st):
		switch inst.State {
		case SagaCompensating:
			return inst.Step < i && untouchedBetween(inst.Step, i, false)
		case SagaCompensated, SagaUnresolved:
			return untouchedBetween(-1, i, false)
		}
	}
	return false
}

// sagaWaitingFor is what instance inst waits for now, as the transition
// that put it there sent it: the current step's message, the current
// compensation's, or, once ended, the reply.
func sagaWaitingFor(s *plan.Saga, inst SagaInstance, causation string, now time.Time) []Publish {
	switch {
	case inst.State == SagaRunning:
		return []Publish{{Message: sagaMessage(s, inst, inst.Step, false, causation, now)}}
	case inst.State == SagaCompensating:
		return []Publish{{Message: sagaMessage(s, inst, inst.Step, true, causation, now)}}
	case inst.ReplyTo != "":
		return []Publish{SagaReply(inst, causation, now)}
	}
	return nil
}

// SagaStepSucceeded records that the step inst is running returned output
// on delivery attempt attempts, then sends the next step whose `when` holds
// (those between recorded skipped), or completes the instance and replies
// its summary. A `when` that cannot be evaluated fails its step for good.
// causation is the id of the delivery that ran the step.
func SagaStepSucceeded(s *plan.Saga, inst SagaInstance, output []byte, attempts int, causation string, now time.Time) SagaTransition {
	inst = cloneInstance(inst)
	st := &inst.Steps[inst.Step]
	st.State, st.Output, st.Attempts, st.CompletedAt, st.Error = SagaStepCompleted, output, attempts, now, ""
	return sagaNext(s, inst, inst.Step+1, causation, now)
}

// SagaStepFailedForGood records that the step inst is running failed for good
// (fatal, or its retries exhausted) with reason, and starts compensating:
// the completed steps' compensations, one at a time, in reverse order.
func SagaStepFailedForGood(s *plan.Saga, inst SagaInstance, attempts int, reason, causation string, now time.Time) SagaTransition {
	inst = cloneInstance(inst)
	st := &inst.Steps[inst.Step]
	st.State, st.Attempts, st.Error = SagaStepFailed, attempts, reason
	return sagaCompensate(s, inst, inst.Step-1, causation, now)
}

// SagaTimedOut is the saga's timeout reached by instance inst: a running
// instance's current step fails for good, as SagaStepFailedForGood; an instance
// already compensating or ended is left as it is (a duplicate). A handler
// still running when the timeout is recorded finds, when it ends, an
// instance that moved on: its result is a duplicate and not recorded.
func SagaTimedOut(s *plan.Saga, inst SagaInstance, timeout time.Duration, causation string, now time.Time) SagaTransition {
	if inst.State != SagaRunning {
		t := SagaTransition{Outcome: OutcomeDuplicate,
			Reason: fmt.Sprintf("saga %q instance %q is %s: its timeout changes nothing", s.Name, inst.ID, inst.State)}
		// The timeout delivered again after its write (a crash before the
		// publish) finds the instance where it put it: what it sent may
		// never have gone out, so it is sent again, with the same id. A
		// step that failed on its own is found the same way; its own
		// redelivery sends the same message, absorbed as a duplicate.
		for i := len(inst.Steps) - 1; i >= 0; i-- {
			if inst.Steps[i].State == SagaStepFailed && sagaCausedByStep(inst, i, false) {
				t.Publish = sagaWaitingFor(s, inst, causation, now)
				break
			}
		}
		return t
	}
	reason := fmt.Sprintf("the saga's timeout (%s) passed while step %q was running", timeout, stepAt(inst))
	return SagaStepFailedForGood(s, inst, inst.Steps[inst.Step].Attempts, reason, causation, now)
}

// SagaCompensationDone records that the compensation inst is waiting for
// ran, then sends the next one down, or ends the instance.
func SagaCompensationDone(s *plan.Saga, inst SagaInstance, attempts int, causation string, now time.Time) SagaTransition {
	inst = cloneInstance(inst)
	st := &inst.Steps[inst.Step]
	st.State, st.CompensatedAt = SagaStepCompensated, now
	st.Attempts = max(st.Attempts, attempts)
	return sagaCompensate(s, inst, inst.Step-1, causation, now)
}

// SagaCompensationFailed records that the compensation inst is waiting for
// failed for good with reason (the step stays done and not undone), then
// runs the remaining compensations all the same: stopping would leave more
// undone than going on. The instance ends unresolved.
func SagaCompensationFailed(s *plan.Saga, inst SagaInstance, attempts int, reason, causation string, now time.Time) SagaTransition {
	inst = cloneInstance(inst)
	st := &inst.Steps[inst.Step]
	st.State, st.Error = SagaStepCompensationFailed, "compensation: "+reason
	st.Attempts = max(st.Attempts, attempts)
	return sagaCompensate(s, inst, inst.Step-1, causation, now)
}

// sagaNext moves running instance inst to the first step from `from` whose
// `when` holds, recording those before it skipped, and sends its message;
// past the last step the instance is completed.
func sagaNext(s *plan.Saga, inst SagaInstance, from int, causation string, now time.Time) SagaTransition {
	var payload any
	decoded := false
	for i := from; i < len(s.Steps); i++ {
		ok, err := sagaWhen(s, i, inst.Input, &payload, &decoded)
		if err != nil {
			inst.Step = i
			inst.Steps[i].State, inst.Steps[i].Error = SagaStepFailed, err.Error()
			return sagaCompensate(s, inst, i-1, causation, now)
		}
		if !ok {
			inst.Steps[i].State = SagaStepSkipped
			continue
		}
		inst.Step = i
		return SagaTransition{Outcome: OutcomeAcknowledged, Write: true, Instance: inst,
			Publish: []Publish{{Message: sagaMessage(s, inst, i, false, causation, now)}}}
	}
	inst.State, inst.EndedAt = SagaCompleted, now
	return sagaEnd(inst, causation, now)
}

// sagaCompensate sends the compensation of the last completed step at or
// below from; completed steps without a compensate handler stay done and
// not undone. With none left the instance ends: compensated when every
// completed step was undone, unresolved otherwise.
func sagaCompensate(s *plan.Saga, inst SagaInstance, from int, causation string, now time.Time) SagaTransition {
	inst.State = SagaCompensating
	for j := min(from, len(inst.Steps)-1); j >= 0; j-- {
		if inst.Steps[j].State != SagaStepCompleted || s.Steps[j].Compensate == "" {
			continue
		}
		inst.Step = j
		return SagaTransition{Outcome: OutcomeAcknowledged, Write: true, Instance: inst,
			Publish: []Publish{{Message: sagaMessage(s, inst, j, true, causation, now)}}}
	}
	inst.State, inst.EndedAt = SagaCompensated, now
	if len(NotUndone(inst)) > 0 {
		inst.State = SagaUnresolved
	}
	return sagaEnd(inst, causation, now)
}

// sagaEnd writes the ended instance and replies its summary.
func sagaEnd(inst SagaInstance, causation string, now time.Time) SagaTransition {
	t := SagaTransition{Outcome: OutcomeAcknowledged, Write: true, Instance: inst}
	if inst.ReplyTo != "" {
		t.Publish = append(t.Publish, SagaReply(inst, causation, now))
	}
	return t
}

// NotUndone lists, in step order, the steps of an instance that compensated
// that happened and were not undone: a compensation that failed for good,
// or a completed step with no compensate handler.
func NotUndone(inst SagaInstance) []string {
	if inst.State == SagaRunning || inst.State == SagaCompleted {
		return nil
	}
	var out []string
	for _, st := range inst.Steps {
		if st.State == SagaStepCompleted || st.State == SagaStepCompensationFailed {
			out = append(out, st.Name)
		}
	}
	return out
}

// sagaWhen evaluates step i's `when` on the instance's input, decoding the
// input once.
func sagaWhen(s *plan.Saga, i int, input []byte, payload *any, decoded *bool) (bool, error) {
	if s.Steps[i].When == "" {
		return true, nil
	}
	if s.Spec == nil || i >= len(s.Spec.Steps) {
		return false, fmt.Errorf("saga %q step %q: its when condition is not compiled; run the saga from the flow files", s.Name, s.Steps[i].Name)
	}
	if !*decoded {
		*decoded = true
		if len(input) > 0 {
			v, err := spec.DecodeJSON(input)
			if err != nil {
				return false, fmt.Errorf("saga %q step %q: when: the input is not JSON: %w", s.Name, s.Steps[i].Name, err)
			}
			*payload = v
		}
	}
	ok, err := s.Spec.Steps[i].When.Eval(*payload)
	if err != nil {
		return false, fmt.Errorf("saga %q step %q: %w", s.Name, s.Steps[i].Name, err)
	}
	return ok, nil
}

// sagaMessage is the message of step i of inst, or of its compensation:
// the saga's input as payload, addressed on the saga's exchange, with an
// id derived from the instance and the queue.
func sagaMessage(s *plan.Saga, inst SagaInstance, i int, compensation bool, causation string, now time.Time) Message {
	step := s.Steps[i].Name
	queue, key := plan.SagaStepQueue(s.Name, step), plan.SagaStepKey(step)
	if compensation {
		queue, key = plan.CompensateQueue(s.Name, step), plan.CompensateKey(step)
	}
	firstSeen := inst.StartedAt
	if firstSeen.IsZero() {
		firstSeen = now
	}
	return Message{
		Exchange:      plan.SagaExchange(s.Name),
		RoutingKey:    key,
		MessageID:     DerivedMessageID(queue, inst.ID),
		CorrelationID: inst.CorrelationID,
		Type:          s.Input,
		ContentType:   "application/json",
		DeliveryMode:  Persistent,
		Timestamp:     now.UTC().Truncate(time.Second),
		Body:          inst.Input,
		Headers: Table{
			plan.HeaderAttempt:     int64(1),
			plan.HeaderCausationID: causation,
			plan.HeaderFirstSeen:   FormatTime(firstSeen),
			plan.HeaderOrigin:      s.Flow,
			plan.HeaderSaga:        s.Name,
			plan.HeaderSagaID:      inst.ID,
			plan.HeaderSagaStep:    step,
		},
	}
}

// SagaReply is the reply an ended instance sends to its reply_to: the
// instance's correlation id, x-acemq-outcome its state, the summary as
// body. It is best effort, as every reply.
func SagaReply(inst SagaInstance, causation string, now time.Time) Publish {
	body, _ := json.Marshal(SummaryOf(inst))
	return Publish{BestEffort: true, Message: Message{
		RoutingKey:    inst.ReplyTo,
		NotMandatory:  strings.HasPrefix(inst.ReplyTo, "amq.rabbitmq.reply-to"),
		MessageID:     NewMessageID(),
		CorrelationID: inst.CorrelationID,
		ContentType:   "application/json",
		Timestamp:     now.UTC().Truncate(time.Second),
		Body:          body,
		Headers: Table{
			plan.HeaderOutcome:     inst.State,
			plan.HeaderCausationID: causation,
			plan.HeaderSaga:        inst.Saga,
			plan.HeaderSagaID:      inst.ID,
		},
	}}
}

// sagaDeadLetter dead-letters a delivery to a saga's queue as fatal: no
// instance is written and nothing runs. The instance's requester, if the
// message names one, is told.
func sagaDeadLetter(c *plan.Consumer, in Inbound, reason string, now time.Time) SagaTransition {
	return sagaTransitionOf(DeadLetter(c, in, KindFatal, reason, now))
}

// isCompensation reports whether c consumes a compensation queue of s.
func isCompensation(s *plan.Saga, c *plan.Consumer) bool {
	return c.Queue == plan.CompensateQueue(s.Name, c.Step)
}

func stepIndex(s *plan.Saga, name string) int {
	for i, st := range s.Steps {
		if st.Name == name {
			return i
		}
	}
	return -1
}

func stepAt(inst SagaInstance) string {
	if inst.Step >= 0 && inst.Step < len(inst.Steps) {
		return inst.Steps[inst.Step].Name
	}
	return fmt.Sprint(inst.Step)
}

func cloneInstance(inst SagaInstance) SagaInstance {
	inst.Steps = append([]SagaStepRecord(nil), inst.Steps...)
	return inst
}

// SagaTimeoutMessage is the message that ends instance inst of saga s when
// its timeout passes (FLOW-FORMAT §5): addressed to the saga's timeout
// queue, due at the instance's start plus the timeout, with an id derived
// from the instance, so that the copies published by a step's redeliveries
// are one message to the timeout's consumer. The engine publishes it
// through the delay ladder before the first handler of the instance runs.
// ok is false for a saga without a timeout.
func SagaTimeoutMessage(s *plan.Saga, inst SagaInstance, now time.Time) (m Message, due time.Time, ok bool) {
	if s.Timeout <= 0 {
		return Message{}, time.Time{}, false
	}
	started := inst.StartedAt
	if started.IsZero() {
		started = now
	}
	return Message{
		Exchange:      plan.SagaExchange(s.Name),
		RoutingKey:    plan.TimeoutKey,
		MessageID:     DerivedMessageID(plan.TimeoutQueue(s.Name), inst.ID),
		CorrelationID: inst.CorrelationID,
		ContentType:   "application/json",
		DeliveryMode:  Persistent,
		Timestamp:     now.UTC().Truncate(time.Second),
		Headers: Table{
			plan.HeaderAttempt:   int64(1),
			plan.HeaderFirstSeen: FormatTime(started),
			plan.HeaderOrigin:    s.Flow,
			plan.HeaderSaga:      s.Name,
			plan.HeaderSagaID:    inst.ID,
		},
	}, started.Add(time.Duration(s.Timeout)), true
}

// SagaNothingDone reports whether no step of inst has completed yet: the
// instance is at its first step to run, whose handler publishes the
// timeout before it runs.
func SagaNothingDone(inst SagaInstance) bool {
	for _, st := range inst.Steps {
		if st.State != SagaStepPending && st.State != SagaStepSkipped {
			return false
		}
	}
	return true
}

// SagaTimeoutArrived decides what saga s's timeout message, delivered to
// consumer c, does to instance inst: nil inst (purged, or a message no
// instance sent) is dead-lettered saying so; otherwise SagaTimedOut.
func SagaTimeoutArrived(s *plan.Saga, c *plan.Consumer, inst *SagaInstance, in Inbound, now time.Time) SagaTransition {
	id, _ := SagaInstanceID(in)
	if inst == nil {
		return sagaDeadLetter(c, in, fmt.Sprintf("saga %q: the timeout of instance %q, which is not in the store (purged, a store that was replaced, or a message that no instance sent); nothing was done", s.Name, id), now)
	}
	if inst.Saga != s.Name {
		return sagaDeadLetter(c, in, fmt.Sprintf("saga %q: timeout for instance %q, which belongs to saga %q; nothing was done", s.Name, id, inst.Saga), now)
	}
	if why := sagaChanged(s, *inst); why != "" {
		return sagaDeadLetter(c, in, why+"; nothing was done", now)
	}
	return SagaTimedOut(s, *inst, time.Duration(s.Timeout), in.Env.MessageID, now)
}

// sagaChanged says how instance inst's steps differ from saga s's, or ""
// when they are the same, name for name: an instance keeps its steps by
// position, so one started before the saga's steps were added, removed or
// reordered cannot be moved on by the saga as it is now. Its messages are
// dead-lettered saying so, for a person to finish it (or to deploy the
// flows it was started with again and replay them).
func sagaChanged(s *plan.Saga, inst SagaInstance) string {
	same := len(inst.Steps) == len(s.Steps)
	for i := 0; same && i < len(s.Steps); i++ {
		same = inst.Steps[i].Name == s.Steps[i].Name
	}
	if same {
		return ""
	}
	var had, has []string
	for _, st := range inst.Steps {
		had = append(had, st.Name)
	}
	for _, st := range s.Steps {
		has = append(has, st.Name)
	}
	return fmt.Sprintf("saga %q instance %q was started with the steps [%s], and the saga now has [%s]: the flows changed while it ran; finish it by hand, or run the flows it started with and replay this message",
		s.Name, inst.ID, strings.Join(had, " "), strings.Join(has, " "))
}

// SagaCheckOutput checks what saga step consumer c's handler returned
// against the step's output type: a mismatch is the step's failure for
// good, as a pipeline step's is fatal.
func SagaCheckOutput(c *plan.Consumer, output []byte) error {
	if typ := outputType(c); typ != nil {
		if err := typ.ValidateJSON(output); err != nil {
			return fmt.Errorf("output: %w", err)
		}
	}
	return nil
}
