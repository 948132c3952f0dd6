package decide

import (
	"maps"

	"github.com/acemq/acemq-flow/runtime/plan"
)

// Replayed is dead letter m sent back to queue for its replays-th replay
// (FLOW-FORMAT §2): the envelope kept, the attempt reset to 1, the replay
// counted, and the error headers, which belong to the failure the replay
// ends, removed with the broker's dead-letter history (see DropDeaths).
func Replayed(m Message, queue string, replays int) Message {
	m.Headers = maps.Clone(m.Headers)
	if m.Headers == nil {
		m.Headers = Table{}
	}
	for _, k := range []string{plan.HeaderError, plan.HeaderErrorKind, plan.HeaderFailedQueue, plan.HeaderFailedAt} {
		delete(m.Headers, k)
	}
	DropDeaths(m.Headers)
	m.Headers[plan.HeaderAttempt] = int64(1)
	m.Headers[plan.HeaderReplays] = int64(replays)
	return to("", queue, m)
}

// ReplayParked is m, replayed too often, sent to parked queue unchanged
// but kept until someone looks: persistent with no expiration, whatever
// its sender chose (the broker's own dead-lettering keeps a transient
// message transient).
func ReplayParked(m Message, queue string) Message {
	m.Headers = maps.Clone(m.Headers)
	m.DeliveryMode, m.Expiration = Persistent, ""
	return to("", queue, m)
}
