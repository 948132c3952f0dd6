package admin

import (
	"context"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
)

// FirstEncoder is what a Runtime serves when its flows may have Avro
// types (*runtime.Runtime does): /v1/messages/first answers the first
// message as it is sent, encoded by the entry's input type when that is
// Avro (FLOW-FORMAT §6), so that `send` without flow files needs no
// registry of its own.
type FirstEncoder interface {
	EncodeFirst(ctx context.Context, t decide.Target, m decide.Message) (decide.Message, error)
}

// firstEncodeError is the answer to a first message that does not encode:
// a payload that does not fit its Avro type is the caller's (400); the
// registry failing is not.
func firstEncodeError(err error) error {
	if codec.Fatal(err) {
		return badRequest{err}
	}
	return err
}
