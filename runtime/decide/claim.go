package decide

import (
	"errors"
	"time"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// ErrNoMessageID is the claim gate's answer for a delivery without a
// message id: nothing can deduplicate it.
var ErrNoMessageID = errors.New("the message has no message_id, which an idempotent consumer needs to deduplicate it; publish it with one")

// ClaimAnswer is the claim gate's answer for a delivery's message id
// (patterns.txt, "Claim, then work, then confirm").
type ClaimAnswer int

const (
	// ClaimTaken: this delivery holds the claim, and its handler runs.
	ClaimTaken ClaimAnswer = iota + 1
	// ClaimConfirmed: the message was handled and confirmed before.
	ClaimConfirmed
	// ClaimHeld: another delivery of it holds an unexpired claim.
	ClaimHeld
)

// Claimed decides what the claim gate's answer does to a delivery to
// idempotent consumer c: nil when the claim was taken (the handler runs);
// a message handled before is a duplicate, acknowledged without the call;
// one whose claim is held elsewhere comes round through the 1s rung
// (InProgress). A message without an id is dead-lettered whatever the
// answer (ErrNoMessageID).
func Claimed(c *plan.Consumer, in Inbound, answer ClaimAnswer, now time.Time) *Decision {
	var d Decision
	switch {
	case in.Env.MessageID == "":
		d = DeadLetter(c, in, KindFatal, ErrNoMessageID.Error(), now)
	case answer == ClaimConfirmed:
		d = Decision{Outcome: OutcomeDuplicate}
	case answer == ClaimHeld:
		d = InProgress(c, in)
	default:
		return nil
	}
	return &d
}
